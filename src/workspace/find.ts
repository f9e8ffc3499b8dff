/**
 * The team's workspace: `.platformrc.json` at its root (its keys: config.ts), found by walking
 * up from the current directory as git finds `.git`. Every error about it names the file and the
 * field, and exits 2; `config` is the file as written, `workspaceSettings` fills in the defaults.
 */
import { readFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { describeIssues } from "../contracts/issues.ts";
import { CommandError } from "../process/command-error.ts";
import type { Builder } from "../container-images/build.ts";
import type { Language } from "../protos/languages.ts";
import { DEFAULT_LANGUAGE, DEFAULT_PROTO_ROOT, IMAGE_REPOSITORY_PATTERN, WorkspaceConfig } from "./config.ts";

export const WORKSPACE_FILE = ".platformrc.json";

export type Workspace = { root: string; file: string; config: WorkspaceConfig };

/** A workspace's keys with their defaults filled in: what the commands run in it use. */
export type WorkspaceSettings = {
  /** As written: `normalizeBaseUrl` (src/client/credentials.ts) before building URLs on it, as commands resolve it. */
  registryUrl: string;
  orgId: string;
  /** Undefined where the file names none and none can be derived (see deriveImageRepository). */
  imageRepository: string | undefined;
  /** Relative to the workspace root, as buf.yaml names it. */
  protoRoot: string;
  language: Language;
  build: { args: Record<string, string>; builder?: Builder };
};

/** The nearest `.platformrc.json` at or above `from`, parsed; undefined when there is none up to the filesystem root. */
export async function findWorkspace(from: string = process.cwd()): Promise<Workspace | undefined> {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    const file = join(dir, WORKSPACE_FILE);
    const raw = await readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT" || e.code === "ENOTDIR") return undefined;
      throw new CommandError(`${file}: cannot read it (${e.code ?? e.message})`);
    });
    if (raw !== undefined) return { root: dir, file, config: parseWorkspace(file, raw) };
    if (dirname(dir) === dir) return undefined;
  }
}

/** The workspace a command needs, with its settings; outside one, an error saying how to make one. */
export async function requireWorkspace(
  from: string = process.cwd(),
): Promise<Workspace & { settings: WorkspaceSettings }> {
  const found = await findWorkspace(from);
  if (!found)
    throw new CommandError(
      `not in a workspace: no ${WORKSPACE_FILE} in ${resolve(from)} or above it; run \`platform init --registry-url <url> --org-id <id>\` at the repository's root`,
      2,
    );
  return { ...found, settings: workspaceSettings(found) };
}

export function workspaceSettings({ root, config }: Workspace): WorkspaceSettings {
  return {
    registryUrl: config.registryUrl,
    orgId: config.orgId,
    imageRepository: config.imageRepository ?? deriveImageRepository(config.registryUrl, config.orgId, basename(root)),
    protoRoot: config.protoRoot ?? DEFAULT_PROTO_ROOT,
    language: config.language ?? DEFAULT_LANGUAGE,
    build: { args: config.build?.args ?? {}, ...(config.build?.builder ? { builder: config.build.builder } : {}) },
  };
}

/**
 * `<registry host>/<org>/<directory name>`: the platform's host and port, the directory's name in
 * the lowercase letters, digits and "-" an image path takes. Undefined where that is no repository:
 * a directory name with none of those characters, or a host without "." or ":" (other than
 * localhost), which docker would read as a Docker Hub path.
 */
export function deriveImageRepository(registryUrl: string, orgId: string, directory: string): string | undefined {
  const name = directory
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  const repository = `${new URL(registryUrl).host}/${orgId}/${name}`;
  return name && IMAGE_REPOSITORY_PATTERN.test(repository) ? repository : undefined;
}

function parseWorkspace(file: string, raw: string): WorkspaceConfig {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new CommandError(`${file}: not valid JSON`, 2);
  }
  const parsed = WorkspaceConfig.safeParse(json);
  if (!parsed.success) throw new CommandError(`${file}: ${describeIssues(parsed.error)}`, 2);
  return parsed.data;
}
