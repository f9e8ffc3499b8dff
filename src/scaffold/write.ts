/**
 * Writes a scaffold's files at the workspace root. Without `force`, nothing is written when any of
 * them exists: the error names every one, so a team never loses work to a scaffold, nor gets half
 * of one. Paths are checked to stay inside the root.
 */
import { existsSync } from "node:fs";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { dirname, isAbsolute, join, normalize, sep } from "node:path";
import { CommandError } from "../process/command-error.ts";
import type { ScaffoldFile } from "./types.ts";

export type WriteResult = { written: string[]; replaced: string[] };

function checkedPath(root: string, path: string): string {
  const clean = normalize(path);
  if (isAbsolute(path) || clean === ".." || clean.startsWith(`..${sep}`))
    throw new Error(`scaffold file ${path}: outside the workspace`);
  return join(root, clean);
}

export async function writeScaffold(root: string, files: ScaffoldFile[], force: boolean): Promise<WriteResult> {
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.path)) throw new Error(`scaffold file ${f.path}: given twice`);
    seen.add(f.path);
  }
  const existing = files.filter((f) => existsSync(checkedPath(root, f.path))).map((f) => f.path);
  if (existing.length > 0 && !force)
    throw new CommandError(
      `${existing.length} of the scaffold's files already ${existing.length === 1 ? "exists" : "exist"}, nothing written: ${existing.join(", ")}; move them away, or pass --force to replace them`,
    );
  for (const f of files) {
    const target = checkedPath(root, f.path);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, f.content);
    if (f.executable) await chmod(target, 0o755);
  }
  return { written: files.map((f) => f.path), replaced: existing };
}
