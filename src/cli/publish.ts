/**
 * `platform publish`: builds the workspace's service image, tags it `<version>-<short sha>` (from
 * package.json or pyproject.toml and git), labels it with the OCI annotations, pushes it to the
 * workspace's image repository and records it with the platform (docs/publish.md). What can be
 * checked in a second is checked before the build, which takes minutes: the tree is clean, the
 * platform accepts the credentials, the registry accepts the builder's session.
 */
import { access, readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import type { Command } from "commander";
import type { ImageRecord } from "../images/record.ts";
import { loadToolSettings } from "../settings/tools.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { buildImage, findBuilder, pushImage, runTool } from "./image-build.ts";
import { askRegistry, authFilesOf, isPlainHttp, notLoggedIn, registryHost, storedSession } from "./image-session.ts";
import { printJson } from "./output.ts";
import { BUILDERS, type Builder } from "./platformrc.ts";
import { requireWorkspace, WORKSPACE_FILE, type Workspace, type WorkspaceSettings } from "./workspace.ts";

const BUILD_ARG = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s;
/** What a version may hold to be part of a tag (the distribution spec's tag characters). */
const TAG_SAFE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$/;

type Options = { allowDirty?: boolean; builder?: string; buildArg: string[]; json?: boolean };

export function registerPublish(program: Command): void {
  program
    .command("publish")
    .description(
      "build the service's image, tag it <version>-<short git sha>, push it to the workspace's image repository and record it with the platform",
    )
    .option("--allow-dirty", "publish a tree with uncommitted changes, tagged <version>-<sha>-dirty")
    .option("--builder <builder>", `${BUILDERS.join(", ")} (default: build.builder, else the first installed)`)
    .option(
      "--build-arg <NAME=value>",
      "a build argument, added to .platformrc.json's build.args (repeatable)",
      (value: string, all: string[]) => [...all, value],
      [] as string[],
    )
    .option("--json", "print the image record as JSON")
    .action(async (opts: Options) => {
      const record = await publish(opts);
      if (opts.json) return printJson(record);
      console.log(`pushed ${record.repository}:${record.tag}@${record.digest}`);
      const protos = record.protos.map((p) => `${p.package}@${p.version}`).join(", ");
      console.log(
        `recorded ${record.service}:${record.tag} in organization ${record.org}${protos ? ` (implements ${protos})` : ""}`,
      );
    });
}

function parseOptions(opts: Options): { builder?: Builder; buildArgs: Record<string, string> } {
  const builder = BUILDERS.find((b) => b === opts.builder);
  if (opts.builder !== undefined && !builder)
    throw new CliError(`--builder: expected ${BUILDERS.join(", ")} (got "${opts.builder}")`, 2);
  const buildArgs: Record<string, string> = {};
  for (const arg of opts.buildArg) {
    const m = BUILD_ARG.exec(arg);
    if (!m) throw new CliError(`--build-arg: expected NAME=value, such as NODE_IMAGE=node:24-slim (got "${arg}")`, 2);
    buildArgs[m[1] as string] = m[2] as string;
  }
  return { ...(builder ? { builder } : {}), buildArgs };
}

async function git(root: string, args: string[]): Promise<{ code: number; output: string }> {
  const ran = await runTool("git", args, { cwd: root });
  if (!ran)
    throw new CliError("git is not installed: `platform publish` tags images with the commit they are built from");
  return ran;
}

type Commit = { sha: string; full: string; changed: string[]; source?: string };

/** The commit to tag with, and the workspace's uncommitted changes (paths relative to the workspace). */
async function commitOf(root: string): Promise<Commit> {
  if ((await git(root, ["rev-parse", "--is-inside-work-tree"])).code !== 0)
    throw new CliError(
      `${root} is not in a git repository: \`git init\` and commit first; images are tagged <version>-<short commit>`,
    );
  const head = await git(root, ["rev-parse", "--short", "HEAD"]);
  if (head.code !== 0)
    throw new CliError(`no commit yet in ${root}: commit first; images are tagged <version>-<short commit>`);
  const full = (await git(root, ["rev-parse", "HEAD"])).output.trim();
  const top = (await git(root, ["rev-parse", "--show-toplevel"])).output.trim();
  // -z: paths as they are (no quoting of spaces or non-ASCII); a rename's source follows it, skipped.
  const status = await git(root, ["status", "--porcelain", "-z", "--untracked-files=all", "--", "."]);
  const entries = status.output.split("\0").filter(Boolean);
  const changed: string[] = [];
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i] as string;
    changed.push(relative(root, join(top, entry.slice(3))));
    if (/^[RC]/.test(entry)) i++;
  }
  const remote = await git(root, ["remote", "get-url", "origin"]);
  // A remote's URL may carry a token (https://user:token@host/...): never into a label.
  const source = remote.code === 0 ? remote.output.trim().replace(/^(https?:\/\/)[^@/]*@/, "$1") : undefined;
  return { sha: head.output.trim(), full, changed, ...(source ? { source } : {}) };
}

/** The service's version: package.json's `version` (node) or pyproject.toml's `[project].version` (python). */
async function versionOf(
  root: string,
  language: WorkspaceSettings["language"],
): Promise<{ version: string; file: string }> {
  const files = language === "python" ? ["pyproject.toml", "package.json"] : ["package.json", "pyproject.toml"];
  for (const name of files) {
    const file = join(root, name);
    const text = await readFile(file, "utf8").catch(() => undefined);
    if (text === undefined) continue;
    let version: unknown;
    if (name === "package.json") {
      try {
        version = (JSON.parse(text) as { version?: unknown }).version;
      } catch {
        throw new CliError(`${file}: not valid JSON`);
      }
    } else {
      const project = /^\[project\][ \t]*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(text)?.[1] ?? "";
      version = /^version\s*=\s*["']([^"']*)["']/m.exec(project)?.[1];
    }
    if (typeof version !== "string" || version === "")
      throw new CliError(
        `${file}: no version${name === "pyproject.toml" ? " in [project] (a dynamic version is not read)" : ""}; add one, such as "1.0.0": images are tagged <version>-<short commit>`,
      );
    if (!TAG_SAFE.test(version))
      throw new CliError(
        `${file}: version "${version}" cannot be part of an image tag (letters, digits, ".", "_" and "-" only; no "+")`,
      );
    return { version, file };
  }
  throw new CliError(
    `no package.json or pyproject.toml in ${root}: \`platform publish\` reads the service's version from it (\`platform service create\` writes one)`,
  );
}

/** The proto packages the workspace's `.proto` files declare (a `package` line each). */
async function workspacePackages(ws: Workspace & { settings: WorkspaceSettings }): Promise<string[]> {
  const dir = join(ws.root, ws.settings.protoRoot);
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  const packages = new Set<string>();
  for (const e of entries) {
    if (!e.isFile() || !e.name.endsWith(".proto")) continue;
    const text = await readFile(join(e.parentPath, e.name), "utf8");
    const pkg = /^\s*package\s+([A-Za-z0-9_.]+)\s*;/m.exec(text)?.[1];
    if (pkg) packages.add(pkg);
  }
  return [...packages].sort();
}

/** Each package at its latest published version; one not published yet is left out, with a note. */
async function implementedProtos(api: ApiClient, packages: string[]): Promise<{ package: string; version: string }[]> {
  const found: { package: string; version: string }[] = [];
  for (const pkg of packages) {
    const res = await api.send("GET", `/admin/v1/protos/${encodeURIComponent(pkg)}/versions/latest`);
    if (res.status === 404) {
      console.error(
        `note: ${pkg} is not published to ${api.baseUrl}: the image record names no version of it (\`platform proto publish\`)`,
      );
      continue;
    }
    if (!res.ok) throw new CliError(`GET the latest version of ${pkg}: HTTP ${res.status}`);
    found.push({ package: pkg, version: ((await res.json()) as { version: string }).version });
  }
  return found;
}

/** Fails unless the builder holds a session the registry accepts (a credential helper is trusted: the push tells). */
async function checkSession(builder: Builder, host: string, plainHttp: boolean): Promise<void> {
  const stored = await storedSession(host, authFilesOf(builder, loadToolSettings()).reads);
  if (stored.kind === "helper") return;
  // Without a session, the registry may still be open (200): only its 401 means "log in".
  const answer = await askRegistry(host, { plainHttp, ...(stored.kind === "basic" ? { credentials: stored } : {}) });
  if (answer.status === "ok") return;
  if (answer.status === "unauthorized") throw new CliError(notLoggedIn(host), 1, { plain: true });
  const what =
    answer.status === "unreachable"
      ? `cannot reach the image registry at ${answer.url} (${answer.message})`
      : answer.message;
  throw new CliError(`${what}: check imageRepository in ${WORKSPACE_FILE} and that the registry runs there`);
}

export async function publish(opts: Options): Promise<ImageRecord> {
  const { builder: named, buildArgs: flagArgs } = parseOptions(opts);
  const ws = await requireWorkspace();
  const repository = ws.settings.imageRepository;
  if (!repository)
    throw new CliError(
      `${ws.file}: no imageRepository, and none can be derived from registryUrl and the directory's name; add "imageRepository": "<host>[:<port>]/<path>"`,
      2,
    );
  const dockerfile = join(ws.root, "Dockerfile");
  await access(dockerfile).catch(() => {
    throw new CliError(`no Dockerfile in ${ws.root}: \`platform service create\` writes one`);
  });
  const commit = await commitOf(ws.root);
  if (commit.changed.length > 0 && !opts.allowDirty)
    throw new CliError(
      `the workspace has uncommitted changes: ${commit.changed.join(", ")}; commit or stash them, or publish with --allow-dirty (tagged -dirty)`,
    );
  const { version } = await versionOf(ws.root, ws.settings.language);
  const dirty = commit.changed.length > 0;
  const tag = `${version}-${commit.sha}${dirty ? "-dirty" : ""}`;
  const service = repository.split("/").at(-1) as string;
  const host = registryHost(repository);
  const plainHttp = isPlainHttp(host, ws.settings.registryUrl);

  const builder = await findBuilder(named ?? ws.settings.build.builder);
  await checkSession(builder, host, plainHttp);
  const api = await ApiClient.fromCredentials();
  const me = await api.request<{ org: string }>("GET", "/admin/v1/whoami");
  if (me.org !== ws.settings.orgId)
    throw new CliError(
      `${WORKSPACE_FILE} names organization "${ws.settings.orgId}", but your credentials for ${api.baseUrl} are for "${me.org}": sign in to ${ws.settings.orgId} (platform auth login) or correct orgId`,
    );
  const protos = await implementedProtos(api, await workspacePackages(ws));

  const reference = `${repository}:${tag}`;
  await buildImage({
    builder,
    context: ws.root,
    dockerfile,
    reference,
    buildArgs: { ...ws.settings.build.args, ...flagArgs },
    labels: {
      "org.opencontainers.image.version": version,
      "org.opencontainers.image.revision": commit.full,
      // A URL to the sources: the origin remote's, where there is one (none is better than a guess).
      ...(commit.source ? { "org.opencontainers.image.source": commit.source } : {}),
      "org.opencontainers.image.created": new Date().toISOString(),
      "org.opencontainers.image.title": service,
    },
  });
  const digest = await pushImage(builder, reference, { plainHttp, notLoggedIn: notLoggedIn(host) });
  return api.request<ImageRecord>("POST", "/admin/v1/images", {
    service,
    repository,
    tag,
    digest,
    git_sha: commit.sha,
    dirty,
    version,
    protos,
  });
}
