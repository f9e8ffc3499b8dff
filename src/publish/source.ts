/**
 * What `platform publish` builds from: the commit it tags the image with (and the tree's
 * uncommitted changes), the service's version (package.json, or pyproject.toml read with a TOML
 * parser), and the proto packages the workspace declares.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { parse as parseToml } from "smol-toml";
import { runTool } from "../container-images/build.ts";
import { CommandError } from "../process/command-error.ts";
import type { Language } from "../protos/languages.ts";

/** What a version may hold to be part of a tag (the distribution spec's tag characters). */
const TAG_SAFE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$/;

async function git(root: string, args: string[]): Promise<{ code: number; output: string }> {
  const ran = await runTool("git", args, { cwd: root });
  if (!ran)
    throw new CommandError("git is not installed: `platform publish` tags images with the commit they are built from");
  return ran;
}

export type Commit = { sha: string; full: string; changed: string[]; source?: string };

/** The commit to tag with, and the workspace's uncommitted changes (paths relative to the workspace). */
export async function commitOf(root: string): Promise<Commit> {
  if ((await git(root, ["rev-parse", "--is-inside-work-tree"])).code !== 0)
    throw new CommandError(
      `${root} is not in a git repository: \`git init\` and commit first; images are tagged <version>-<short commit>`,
    );
  const head = await git(root, ["rev-parse", "--short", "HEAD"]);
  if (head.code !== 0)
    throw new CommandError(`no commit yet in ${root}: commit first; images are tagged <version>-<short commit>`);
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

/** package.json's `version`, or pyproject.toml's `[project].version` (a dynamic version is not read). */
function versionIn(name: string, file: string, text: string): unknown {
  try {
    if (name === "package.json") return (JSON.parse(text) as { version?: unknown }).version;
    const project = parseToml(text).project;
    return typeof project === "object" && project !== null && !Array.isArray(project)
      ? (project as { version?: unknown }).version
      : undefined;
  } catch (e) {
    const what = name === "package.json" ? "JSON" : `TOML (${(e as Error).message.split("\n")[0]})`;
    throw new CommandError(`${file}: not valid ${what}`);
  }
}

/** The service's version: package.json's (node) or pyproject.toml's (python), the language's file first. */
export async function versionOf(root: string, language: Language): Promise<{ version: string; file: string }> {
  const files = language === "python" ? ["pyproject.toml", "package.json"] : ["package.json", "pyproject.toml"];
  for (const name of files) {
    const file = join(root, name);
    const text = await readFile(file, "utf8").catch(() => undefined);
    if (text === undefined) continue;
    const version = versionIn(name, file, text);
    if (typeof version !== "string" || version === "")
      throw new CommandError(
        `${file}: no version${name === "pyproject.toml" ? " in [project] (a dynamic version is not read)" : ""}; add one, such as "1.0.0": images are tagged <version>-<short commit>`,
      );
    if (!TAG_SAFE.test(version))
      throw new CommandError(
        `${file}: version "${version}" cannot be part of an image tag (letters, digits, ".", "_" and "-" only; no "+")`,
      );
    return { version, file };
  }
  throw new CommandError(
    `no package.json or pyproject.toml in ${root}: \`platform publish\` reads the service's version from it (\`platform service create\` writes one)`,
  );
}

/** The proto packages the `.proto` files under `protoDir` declare (a `package` line each). */
export async function declaredPackages(protoDir: string): Promise<string[]> {
  const entries = await readdir(protoDir, { recursive: true, withFileTypes: true }).catch(() => []);
  const packages = new Set<string>();
  for (const e of entries) {
    if (!e.isFile() || !e.name.endsWith(".proto")) continue;
    const text = await readFile(join(e.parentPath, e.name), "utf8");
    const pkg = /^\s*package\s+([A-Za-z0-9_.]+)\s*;/m.exec(text)?.[1];
    if (pkg) packages.add(pkg);
  }
  return [...packages].sort();
}
