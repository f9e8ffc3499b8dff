/**
 * `platform dev-center service deploy|list|show|delete|overview set`: services as records
 * (docs/services.md). Deploy fills what it can from the workspace (`.platformrc.json`'s
 * imageRepository and language), so inside a service's repository `deploy <name> --tag <tag>`
 * is enough.
 */
import { readFile, stat } from "node:fs/promises";
import { Argument, type Command } from "commander";
import { formatBytes } from "../../contracts/bytes.ts";
import { ImageRepository } from "../../container-images/names.ts";
import { MAX_OVERVIEW_BYTES, RepoType } from "../../services/names.ts";
import { ApiClient } from "../../client/api.ts";
import { wholeNumber } from "../common/flags.ts";
import { CliError } from "../common/errors.ts";
import { printJson, printTable } from "../common/output.ts";
import type { Language } from "../../protos/languages.ts";
import { findWorkspace, workspaceSettings } from "../../workspace/find.ts";
import { imageTag, SERVICES, type ServiceView, serviceName, servicePath } from "./api.ts";
import { parseAssignments } from "./assignments.ts";
import {
  HISTORY_HEAD,
  historyRows,
  overviewHead,
  REPLICA_HEAD,
  replicaCounts,
  replicaList,
  replicaRows,
  SERVICE_HEAD,
  serviceRows,
  shortDigest,
} from "./format.ts";
import { followRollout } from "./watch.ts";

const REPO_TYPE_OF: Record<Language, RepoType> = { node: "js", python: "python" };

type DeployFlags = {
  tag: string;
  repoType?: string;
  imageRepository?: string;
  replicas?: number;
  port?: number;
  env: string[];
  wait?: boolean;
  json?: boolean;
};

export function registerServiceCommands(devCenter: Command): void {
  const service = devCenter.command("service").description("deployed services: deploy, list, show, delete");

  service
    .command("deploy <name>")
    .description("deploy a published image as a new service (its first rollout)")
    .requiredOption("--tag <tag>", "the image tag to run, as `platform publish` printed it")
    .option("--repo-type <type>", "js or python (default: from the workspace's language)")
    .option("--image-repository <repo>", "host[:port]/path (default: the workspace's imageRepository)")
    .option("--replicas <n>", "how many replicas (1-20; default: the platform's)", wholeNumber(1, 20))
    .option("--port <port>", "the port the image listens on (default: the platform's)", wholeNumber(1, 65535))
    .option("--env <KEY=VALUE>", "an environment variable (repeatable)", (v: string, all: string[]) => [...all, v], [])
    .option("--wait", "follow the rollout until it completes or fails (exit 1 when it fails)")
    .option("--json", "print the service as JSON")
    .action(async (name: string, flags: DeployFlags) => {
      const body = await deployBody(name, flags);
      const api = await ApiClient.fromCredentials();
      const created = await api.request<ServiceView>("POST", SERVICES, body);
      if (flags.json) printJson(created);
      else {
        const { desired } = replicaCounts(created);
        console.log(
          `deploying ${created.name}:${created.rollout.release.tag} (rollout ${created.rollout.id}) from ${created.image_repository}, ${desired} replica(s)…`,
        );
        if (!flags.wait) console.log(`follow it: platform dev-center rollout status ${created.name} --watch`);
      }
      if (flags.wait) await followRollout(api, created.name, { json: flags.json, rolloutId: created.rollout.id });
    });

  service
    .command("list")
    .description("your organization's services")
    .option("--json", "print the API's JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const answer = await api.request<{ data: ServiceView[] }>("GET", SERVICES);
      if (opts.json) return printJson(answer);
      if (answer.data.length === 0)
        return console.log("no services yet: deploy one with `platform dev-center service deploy <name> --tag <tag>`");
      printTable(SERVICE_HEAD, serviceRows(answer.data));
    });

  service
    .command("show <name>")
    .description("a service: its record, replicas, recent rollouts, environment and secret names, overview")
    .option("--json", "print the API's JSON")
    .action(async (name: string, opts: { json?: boolean }) => {
      const path = servicePath(name);
      const api = await ApiClient.fromCredentials();
      const s = await api.request<ServiceView>("GET", path);
      if (opts.json) return printJson(s);
      show(s);
    });

  service
    .command("delete <name>")
    .description("delete a service: its replicas stop, its routes go")
    .action(async (name: string) => {
      const path = servicePath(name);
      const api = await ApiClient.fromCredentials();
      await api.request("DELETE", path);
      console.log(`deleted ${name}`);
    });

  service
    .command("scale <name>")
    .addArgument(new Argument("<replicas>", "how many replicas run (1 to 20)").argParser(wholeNumber(1, 20)))
    .description("change how many replicas run (1 to 20); the serving release, at once, no rollout")
    .action(async (name: string, replicas: number) => {
      const path = servicePath(name, "/replicas");
      const api = await ApiClient.fromCredentials();
      await api.request("PUT", path, { replicas });
      console.log(`${name}: ${replicas} replica(s) wanted; platform dev-center rollout status ${name} shows them`);
    });

  service
    .command("overview")
    .description("the service's overview page (Markdown) in the dashboard")
    .command("set <name>")
    .description(`replace the overview with a Markdown file (at most ${formatBytes(MAX_OVERVIEW_BYTES)})`)
    .requiredOption("--file <file>", "the Markdown file, e.g. README.md")
    .action(async (name: string, opts: { file: string }) => {
      const path = servicePath(name, "/overview");
      const markdown = await readOverview(opts.file);
      const api = await ApiClient.fromCredentials();
      await api.request("PUT", path, { markdown });
      console.log(`set the overview of ${name} from ${opts.file} (${formatBytes(Buffer.byteLength(markdown))})`);
    });
}

async function deployBody(name: string, flags: DeployFlags): Promise<Record<string, unknown>> {
  serviceName(name);
  const tag = imageTag(flags.tag, "--tag");
  const env = parseAssignments(flags.env, "--env");
  // Only what the flags leave open is read from the workspace (a broken .platformrc.json is
  // then reported, as every workspace command reports it).
  const ws = flags.repoType === undefined || flags.imageRepository === undefined ? await findWorkspace() : undefined;
  const settings = ws ? workspaceSettings(ws) : undefined;

  let repoType: RepoType | undefined;
  if (flags.repoType !== undefined) {
    const parsed = RepoType.safeParse(flags.repoType);
    if (!parsed.success) throw new CliError(`--repo-type: expected js or python, got "${flags.repoType}"`, 2);
    repoType = parsed.data;
  } else if (settings) repoType = REPO_TYPE_OF[settings.language];
  else throw new CliError("--repo-type js|python is needed outside a workspace (its language says which)", 2);

  const repository = flags.imageRepository ?? settings?.imageRepository;
  if (repository === undefined)
    throw new CliError(
      ws
        ? `--image-repository is needed: ${ws.file} names no imageRepository and none can be derived`
        : "--image-repository <host/path> is needed outside a workspace (its imageRepository says which)",
      2,
    );
  const repo = ImageRepository.safeParse(repository);
  if (!repo.success)
    throw new CliError(
      `${flags.imageRepository !== undefined ? "--image-repository" : `${ws?.file} imageRepository`}: ${repo.error.issues[0]?.message}`,
      2,
    );

  return {
    name,
    tag,
    repo_type: repoType,
    image_repository: repo.data,
    ...(flags.replicas !== undefined ? { replicas: flags.replicas } : {}),
    ...(flags.port !== undefined ? { port: flags.port } : {}),
    ...(Object.keys(env).length > 0 ? { env } : {}),
  };
}

/** The file, checked against the API's bound before it is read whole or sent. */
async function readOverview(file: string): Promise<string> {
  const info = await stat(file).catch((e: NodeJS.ErrnoException) => {
    throw new CliError(`--file ${file}: ${e.code === "ENOENT" ? "no such file" : e.message}`, 2);
  });
  if (!info.isFile()) throw new CliError(`--file ${file}: not a file`, 2);
  if (info.size > MAX_OVERVIEW_BYTES)
    throw new CliError(
      `--file ${file} is ${formatBytes(info.size)}: an overview holds at most ${formatBytes(MAX_OVERVIEW_BYTES)}; shorten it or link to the rest`,
      2,
    );
  return readFile(file, "utf8");
}

function show(s: ServiceView): void {
  const { ready, desired } = replicaCounts(s);
  const release = (r: ServiceView["current"]) => (r ? `${r.tag} (${shortDigest(r.digest)})` : "-");
  const lines: [string, string][] = [
    ["service", `${s.name} (${s.repo_type}, owner ${s.owner.name})`],
    ["image", s.image_repository],
    ["serving", release(s.current)],
    ["previous", release(s.previous)],
    ["replicas", `${ready}/${desired} ready, port ${s.port}`],
    ["rollout", `${s.rollout.id}: ${s.rollout.phase}${s.rollout.reason ? ` (${s.rollout.reason})` : ""}`],
    ["url", s.url ?? "-"],
    ["rpc", s.rpc_services.join(", ") || "-"],
    ["protos", s.current?.protos.map((p) => `${p.package}@${p.version}`).join(", ") || "-"],
    ["env", (s.env ?? []).map((e) => e.name).join(", ") || "-"],
    ["secrets", (s.secrets ?? []).map((e) => `${e.name} (v${e.version})`).join(", ") || "-"],
  ];
  for (const [k, v] of lines) console.log(`${k.padEnd(9)} ${v}`);
  const replicas = replicaList(s);
  if (replicas.length > 0) printTable(REPLICA_HEAD, replicaRows(replicas));
  if (s.rollouts && s.rollouts.length > 0) {
    console.log("recent rollouts:");
    printTable(HISTORY_HEAD, historyRows(s.rollouts.slice(0, 5)));
  }
  const head = overviewHead(s.overview ?? "");
  if (head.length > 0) console.log(`overview:\n${head.map((l) => `  ${l}`).join("\n")}`);
}
