/**
 * Making a repository a workspace (`platform init`): `.platformrc.json` at its root (the git root,
 * else the directory given), buf.yaml beside it so `buf lint` and editors apply `platform proto
 * lint`'s rules, and the proto root. Neither file is ever replaced without `force`.
 */
import { execFile } from "node:child_process";
import { mkdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CommandError } from "../process/command-error.ts";
import type { Language } from "../protos/languages.ts";
import { DEFAULT_PROTO_ROOT, PlatformrcFile } from "./config.ts";
import { WORKSPACE_FILE } from "./find.ts";

/** Where the gateway serves the schema shipped in schemas/ (src/gateway/server/app.ts), named by each file's `$schema`. */
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

/** The repository's top directory, else `cwd` (outside one, or without git). */
export function workspaceRoot(cwd: string): Promise<string> {
  return new Promise((resolve) =>
    execFile("git", ["rev-parse", "--show-toplevel"], { cwd }, (error, stdout) =>
      resolve((error ? undefined : stdout.trim()) || cwd),
    ),
  );
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** The workspace's two files under `root`. */
export const workspaceFiles = (root: string) => ({ config: join(root, WORKSPACE_FILE), buf: join(root, BUF_FILE) });

/** Without `force`, an error naming the workspace files that already exist under `root` (exit 2). */
export async function refuseExisting(root: string, force: boolean): Promise<void> {
  const present = (
    await Promise.all(Object.values(workspaceFiles(root)).map(async (f) => ((await exists(f)) ? [f] : [])))
  ).flat();
  if (present.length > 0 && !force)
    throw new CommandError(
      `${present.join(" and ")} already ${present.length > 1 ? "exist" : "exists"}; nothing was changed (--force replaces ${present.length > 1 ? "them" : "it"})`,
      2,
    );
}

/** Without `force`, never over an existing file, even one that appeared since it was checked. */
async function write(path: string, text: string, force: boolean): Promise<void> {
  await writeFile(path, text, { flag: force ? "w" : "wx" }).catch((e: NodeJS.ErrnoException) => {
    throw e.code === "EEXIST" ? new CommandError(`${path} already exists (--force replaces it)`, 2) : e;
  });
}

export type NewWorkspace = {
  root: string;
  registryUrl: string;
  orgId: string;
  imageRepository: string;
  language: Language;
  force: boolean;
};

/** Writes the workspace's files under `root`: what was written, and the proto root when it was created. */
export async function createWorkspace(ws: NewWorkspace): Promise<{ config: string; buf: string; protoDir?: string }> {
  const files = workspaceFiles(ws.root);
  const config = PlatformrcFile.parse({
    $schema: `${ws.registryUrl}${SCHEMA_PATH}`,
    registryUrl: ws.registryUrl,
    orgId: ws.orgId,
    imageRepository: ws.imageRepository,
    protoRoot: DEFAULT_PROTO_ROOT,
    language: ws.language,
    build: { args: {} },
  });
  const protoDir = join(ws.root, DEFAULT_PROTO_ROOT);
  const createdProtoDir = !(await exists(protoDir));
  await mkdir(protoDir, { recursive: true });
  await write(files.config, `${JSON.stringify(config, null, 2)}\n`, ws.force);
  await write(files.buf, bufYaml(DEFAULT_PROTO_ROOT), ws.force);
  return { ...files, ...(createdProtoDir ? { protoDir } : {}) };
}
