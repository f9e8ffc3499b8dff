/**
 * Variables and secrets as the command line and dotenv files write them: `KEY=VALUE` arguments and
 * files of such lines. Every error names the argument's position or the file's line and the key,
 * never the value: a secret pasted in the wrong place must not end up in a terminal's scrollback.
 */
import { EnvName, EnvValue } from "../../services/names.ts";
import { CliError } from "../common/errors.ts";

const ASSIGNMENT = /^([^=]*)=(.*)$/s;

/** Checks a key (EnvName) and its value (EnvValue); `where` prefixes the error (`KEY=VALUE argument 2`). */
function checked(where: string, key: string, value: string): [string, string] {
  const name = EnvName.safeParse(key);
  if (!name.success) throw new CliError(`${where}: "${key}": ${name.error.issues[0]?.message}`, 2);
  const v = EnvValue.safeParse(value);
  if (!v.success) throw new CliError(`${where}: the value of ${key} ${v.error.issues[0]?.message}`, 2);
  return [key, value];
}

/** Checks keys alone (`unset KEY...`). */
export function parseKeys(keys: string[]): string[] {
  return keys.map((key, i) => checked(`KEY ${i + 1}`, key, "")[0]);
}

/** `["A=1", "B=x=y"]` → `{A: "1", B: "x=y"}`: the first "=" splits; a later key wins. */
export function parseAssignments(args: string[], what = "KEY=VALUE argument"): Record<string, string> {
  const values: Record<string, string> = {};
  args.forEach((arg, i) => {
    const where = `${what} ${i + 1}`;
    const m = ASSIGNMENT.exec(arg);
    // The argument itself is not shown: without "=", it may be a bare value.
    if (!m) throw new CliError(`${where}: expected KEY=VALUE (it has no "=")`, 2);
    const [key, value] = checked(where, m[1] as string, m[2] as string);
    values[key] = value;
  });
  return values;
}

const ESCAPES: Record<string, string> = { n: "\n", r: "\r", t: "\t", '"': '"', "\\": "\\" };

/**
 * A dotenv-style file: `KEY=VALUE` lines, blank lines, `#` comment lines, an optional `export `
 * before the key. A value in double quotes takes \n, \t, \" and \\; one in single quotes is taken
 * as written; an unquoted one is trimmed, and
 * ends at a " #" (a comment). A bad line is `<file>:<line>: ...`.
 */
export function parseDotenv(text: string, file: string): Record<string, string> {
  const values: Record<string, string> = {};
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const where = `${file}:${i + 1}`;
    const m = /^(?:export\s+)?([^=\s]+)\s*=\s*(.*)$/s.exec(line);
    if (!m) throw new CliError(`${where}: expected KEY=VALUE`, 2);
    const value = unquote(m[2] as string, where);
    const [key] = checked(where, m[1] as string, value);
    values[key] = value;
  });
  return values;
}

function unquote(value: string, where: string): string {
  const quote = value[0];
  // Unquoted: a " #" starts a comment, as dotenv reads it ("#" inside a value stays).
  if (quote !== '"' && quote !== "'") return value.replace(/\s+#.*$/s, "").trim();
  const m = (quote === '"' ? /^"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$/s : /^'([^']*)'\s*(?:#.*)?$/s).exec(value);
  if (!m) throw new CliError(`${where}: expected a closing ${quote} at the end of the value`, 2);
  const inner = m[1] as string;
  return quote === "'" ? inner : inner.replace(/\\(.)/g, (all, c: string) => ESCAPES[c] ?? all);
}

/**
 * Replaces every value of `values` in an error's message with `***`: the API is not supposed to
 * echo a secret, and if it ever did, the CLI still would not print it.
 */
export function redact(message: string, values: Iterable<string>): string {
  let out = message;
  // Longest first, so a value holding another is replaced whole; very short values would blank
  // ordinary words, and a 1-2 character secret hides nothing anyway.
  for (const v of [...values].filter((v) => v.length >= 3).sort((a, b) => b.length - a.length))
    out = out.split(v).join("***");
  return out;
}
