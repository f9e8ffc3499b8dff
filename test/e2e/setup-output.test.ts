/**
 * The README's setup commands print nothing alarming where the machine's own Node is older than
 * the Node 24 the project runs on (npm ci installs that one): no EBADENGINE warnings from npm,
 * while `platform` still runs. Checked with the machine's npm under its own Node, as a new user
 * runs them; skipped, saying so, where the machine has no older Node.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
/** PATH without this checkout's node_modules/.bin, so `node` is the machine's. */
const PATH = (process.env.PATH ?? "")
  .split(":")
  .filter((p) => !p.includes("node_modules"))
  .join(":");

function machineNode(): { node: string; npm: string; npx: string; major: number } | undefined {
  try {
    const which = (name: string) => execFileSync("which", [name], { env: { PATH }, encoding: "utf8" }).trim();
    const node = which("node");
    const version = execFileSync(node, ["--version"], { encoding: "utf8" }).trim();
    return { node, npm: which("npm"), npx: which("npx"), major: Number(version.slice(1).split(".")[0]) };
  } catch {
    return undefined;
  }
}

function clean(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.toLowerCase().startsWith("npm_")));
}

const machine = machineNode();
const older = machine !== undefined && machine.major < 24;
if (!older) console.warn("setup-output.test: the machine's Node is 24 or absent; the check needs an older one");

describe.skipIf(!older)("the README's setup on a machine whose Node is older than 24", () => {
  // An npm cache of its own: what npx cached for this checkout before must not decide what it prints.
  const cache = mkdtempSync(join(tmpdir(), "platform-npm-cache-"));
  afterAll(() => rmSync(cache, { recursive: true, force: true }));

  const run = (command: "npm" | "npx", args: string[]) => {
    const { node } = machine!;
    const out = spawnSync(machine![command], args, {
      cwd: ROOT,
      // As a user's shell has it: no npm_* variables from the npm that runs this suite.
      env: { ...clean(process.env), PATH: `${dirname(node)}:${PATH}`, npm_config_cache: cache },
      encoding: "utf8",
      timeout: 60_000,
    });
    return { code: out.status, output: `${out.stdout}${out.stderr}` };
  };

  it("npm ci warns about no engine", () => {
    const { code, output } = run("npm", ["ci", "--dry-run", "--ignore-scripts", "--no-audit", "--no-fund"]);
    expect(code, output).toBe(0);
    expect(output).not.toMatch(/EBADENGINE|npm warn/);
  });

  it("npx platform answers, with nothing before its own output", () => {
    const { code, output } = run("npx", ["platform", "--version"]);
    expect(code, output).toBe(0);
    expect(output.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });
});
