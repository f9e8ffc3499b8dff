/**
 * The scaffolds' template files (templates/service/<language>/ in the CLI's package) and their one
 * substitution: `{{name}}` is a value, `{{#flag}}…{{/flag}}` is kept only when the flag is set and
 * `{{^flag}}…{{/flag}}` only when it is not. A section tag alone on its line takes the line with it.
 * Anything else in braces is an error, so a misspelt placeholder never reaches a team's repository.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import type { ScaffoldFile } from "./types.ts";

/** templates/service/ beside src/ in the CLI's package. */
export const TEMPLATES_DIR = fileURLToPath(new URL("../../templates/service/", import.meta.url));

/** Files whose real names npm or git would treat specially in the CLI's own repository. */
const RENAMED: Record<string, string> = { gitignore: ".gitignore", dockerignore: ".dockerignore" };

export type TemplateValues = { values: Record<string, string>; flags: Record<string, boolean> };

export function render(text: string, { values, flags }: TemplateValues, where = "template"): string {
  // A tag alone on its line goes with its line; then every tag is inline.
  const inline = text.replace(/^[ \t]*(\{\{[#^/]\w+\}\})[ \t]*\n/gm, "$1");
  const sections = inline.replace(
    /\{\{([#^])(\w+)\}\}([\s\S]*?)\{\{\/\2\}\}/g,
    (_all, kind: string, flag: string, body: string) => {
      if (!(flag in flags)) throw new Error(`${where}: unknown section {{${kind}${flag}}}`);
      return (kind === "#") === flags[flag] ? body : "";
    },
  );
  return sections.replace(/\{\{(\w+)\}\}/g, (_all, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`${where}: unknown placeholder {{${name}}}`);
    return value;
  });
}

/** Every file under `dir`, rendered, at its path relative to `dir`; executable bits are kept. */
export async function renderDir(dir: string, values: TemplateValues): Promise<ScaffoldFile[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  const files: ScaffoldFile[] = [];
  for (const e of entries.filter((e) => e.isFile())) {
    const full = join(e.parentPath, e.name);
    const path = relative(dir, full).split(sep).join("/");
    const parts = path.split("/");
    const last = parts.pop() as string;
    const target = [...parts, RENAMED[last] ?? last].join("/");
    const text = await readFile(full, "utf8");
    const executable = ((await stat(full)).mode & 0o111) !== 0;
    files.push({ path: target, content: render(text, values, full), ...(executable ? { executable } : {}) });
  }
  return files.sort((a, b) => a.path.localeCompare(b.path));
}
