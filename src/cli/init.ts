/**
 * `platform init`: makes a repository a workspace. It writes `.platformrc.json` at the workspace
 * root (the git root, else the current directory), buf.yaml beside it so `buf lint` and editors
 * apply `platform proto lint`'s rules, and creates the proto root. Before writing anything it checks
 * that the registry URL is a platform gateway and that the organization exists (`--offline` skips
 * both), and it never replaces either file without `--force`.
 */
import { execFile } from "node:child_process";
import { mkdir, stat, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { createInterface } from "node:readline/promises";
import type { Command } from "commander";
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { loadCliSettings } from "../settings/cli.ts";
import { ApiClient } from "./client.ts";
import { findCredentials, normalizeBaseUrl } from "./credentials.ts";
import { CliError } from "./errors.ts";
import { DEFAULT_LANGUAGE, DEFAULT_PROTO_ROOT, PlatformrcFile, WorkspaceConfig } from "../workspace/config.ts";
import { probeOrg, probeRegistry } from "./probe.ts";
import { deriveImageRepository, WORKSPACE_FILE } from "../workspace/find.ts";

/** Where the gateway serves the schema shipped in schemas/ (src/gateway/app.ts), named by each file's `$schema`. */
export const SCHEMA_PATH = "/schemas/platformrc.schema.json";

export const BUF_FILE = "buf.yaml";

/** buf's v2 configuration for the proto root: the rules `platform proto lint` applies, and the breaking-change check publishing runs. */
export function bufYaml(protoRoot: string): string {
  return [
    "version: v2",
    "modules:",
    `  - path: ${protoRoot}`,
    "lint:",
    "  use:",
    "    - STANDARD",
    "    - COMMENT_SERVICE",
    "    - COMMENT_RPC",
    "breaking:",
    "  use:",
    "    - WIRE_JSON",
    "",
  ].join("\n");
}

type InitFlags = {
  registryUrl: string;
  orgId: string;
  imageRepository?: string;
  lang: string;
  force?: boolean;
  offline?: boolean;
};

export function registerInit(program: Command): void {
  program
    .command("init")
    .description(
      "make this repository a workspace: .platformrc.json and buf.yaml at its root (the git root, else here), checked against the registry",
    )
    .requiredOption("--registry-url <url>", "the platform's base URL (its gateway), e.g. https://platform.example.com")
    .requiredOption("--org-id <id>", "the organization the workspace belongs to")
    .option(
      "--image-repository <repo>",
      "where `platform publish` pushes images, host[:port]/path (default: <registry host>/<org>/<directory name>)",
    )
    .option("--lang <language>", "node or python: what services and generated code are written in", DEFAULT_LANGUAGE)
    .option("--force", "replace an existing .platformrc.json and buf.yaml")
    .option("--offline", "skip checking the registry and the organization")
    .action(async (flags: InitFlags) => {
      const registryUrl = normalizeBaseUrl(checkFlag("--registry-url", "registryUrl", flags.registryUrl));
      const orgId = checkFlag("--org-id", "orgId", flags.orgId);
      const language = checkFlag("--lang", "language", flags.lang);
      const root = (await gitRoot(process.cwd())) ?? process.cwd();
      const files = { config: join(root, WORKSPACE_FILE), buf: join(root, BUF_FILE) };
      const present = (await Promise.all(Object.values(files).map(async (f) => ((await exists(f)) ? [f] : [])))).flat();
      if (present.length > 0 && !flags.force)
        throw new CliError(
          `${present.join(" and ")} already ${present.length > 1 ? "exist" : "exists"}; nothing was changed (--force replaces ${present.length > 1 ? "them" : "it"})`,
          2,
        );
      const imageRepository = checkFlag(
        "--image-repository",
        "imageRepository",
        flags.imageRepository ??
          deriveImageRepository(registryUrl, orgId, basename(root)) ??
          (await askImageRepository(registryUrl, root)),
      );

      const checked = flags.offline ? undefined : await checkRegistry(registryUrl, orgId);

      const config = PlatformrcFile.parse({
        $schema: `${registryUrl}${SCHEMA_PATH}`,
        registryUrl,
        orgId,
        imageRepository,
        protoRoot: DEFAULT_PROTO_ROOT,
        language,
        build: { args: {} },
      });
      const protoDir = join(root, DEFAULT_PROTO_ROOT);
      const createdProtoDir = !(await exists(protoDir));
      await mkdir(protoDir, { recursive: true });
      await write(files.config, `${JSON.stringify(config, null, 2)}\n`, flags.force);
      await write(files.buf, bufYaml(DEFAULT_PROTO_ROOT), flags.force);

      console.log(
        `wrote ${files.config}: registry ${registryUrl}, organization ${orgId}, images ${imageRepository}, protos in ${DEFAULT_PROTO_ROOT}/, ${language}`,
      );
      console.log(`wrote ${files.buf}: the lint and breaking-change rules of \`platform proto lint\` and publishing`);
      if (createdProtoDir) console.log(`created ${protoDir}/`);
      if (checked?.warning) console.error(`warning: ${checked.warning}`);
      else if (checked) console.log(`checked: ${checked.summary}`);
      else
        console.error(
          "warning: --offline: the registry and the organization were not checked; `platform doctor` checks them",
        );
      const signIn = checked?.summary ? "" : "`platform auth login`, ";
      console.log(
        `next: ${signIn}.proto files under ${DEFAULT_PROTO_ROOT}/, \`platform proto lint\`, \`platform doctor\``,
      );
    });
}

/** A flag through its key's schema, so it fails as the file would, but named as the flag (exit 2). */
function checkFlag<K extends "registryUrl" | "orgId" | "imageRepository" | "language">(
  flag: string,
  key: K,
  value: unknown,
): NonNullable<z.infer<(typeof WorkspaceConfig.shape)[K]>> {
  const parsed = WorkspaceConfig.shape[key].nonoptional().safeParse(value);
  if (!parsed.success)
    throw new CliError(describeIssues(new z.ZodError(parsed.error.issues.map((i) => ({ ...i, path: [flag] })))), 2);
  return parsed.data as NonNullable<z.infer<(typeof WorkspaceConfig.shape)[K]>>;
}

/**
 * The registry answers as a platform gateway, and the stored credentials see the organization.
 * Without credentials the organization cannot be checked: a warning, as signing in comes next.
 */
async function checkRegistry(url: string, orgId: string): Promise<{ summary?: string; warning?: string }> {
  const probe = await probeRegistry(url);
  if (!probe.ok)
    throw new CliError(
      probe.problem === "unreachable"
        ? `${probe.message}: check --registry-url and that the platform runs there (--offline skips this check)`
        : `${probe.message}: --registry-url is the platform's base URL, e.g. https://platform.example.com (without /v1)`,
    );
  const cli = loadCliSettings();
  const { credentials } = await findCredentials(cli, url);
  if (!credentials)
    return {
      warning: `${url} is a platform gateway (${probe.version}), but organization "${orgId}" was not checked: no credentials for ${url}. Run \`platform auth login\`, then \`platform doctor\``,
    };
  const org = await probeOrg(new ApiClient(credentials, cli), orgId);
  if (!org.ok) throw new CliError(org.message);
  return { summary: `${url} is a platform gateway (${probe.version}); organization ${orgId} (${org.org.name}) exists` };
}

/** Asked on a terminal; elsewhere (a script, CI) the flag is the only way. */
async function askImageRepository(registryUrl: string, root: string): Promise<string> {
  const why = `no image repository can be derived from ${new URL(registryUrl).host} and the directory name "${basename(root)}"`;
  if (!process.stdin.isTTY) throw new CliError(`${why}: give --image-repository host[:port]/path`, 2);
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await prompt.question(`${why}.\nimage repository (host[:port]/path): `)).trim();
  } finally {
    prompt.close();
  }
}

/** The repository's top directory, or undefined outside one or without git. */
function gitRoot(cwd: string): Promise<string | undefined> {
  return new Promise((resolve) =>
    execFile("git", ["rev-parse", "--show-toplevel"], { cwd }, (error, stdout) =>
      resolve(error ? undefined : stdout.trim() || undefined),
    ),
  );
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Without `force`, never over an existing file, even one that appeared since it was checked. */
async function write(path: string, text: string, force = false): Promise<void> {
  await writeFile(path, text, { flag: force ? "w" : "wx" }).catch((e: NodeJS.ErrnoException) => {
    throw e.code === "EEXIST" ? new CliError(`${path} already exists (--force replaces it)`, 2) : e;
  });
}
