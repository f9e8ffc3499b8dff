/** The pipe watchdog (src/process/watchdog.ts) that keeps the embedded Redis and vLLM from outliving their parent. */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { alive } from "../helpers/processes.ts";
import { holdsWithin } from "../helpers/wait.ts";
import { spawnWatched } from "../../src/process/watchdog.ts";

const children: ChildProcess[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const until = (check: () => boolean | Promise<boolean>, ms: number) => holdsWithin(check, ms);

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
}

/** A child that writes its PID to `file`, then sleeps (`ignoreTerm`: surviving SIGTERM). */
function sleeperArgs(file: string, ignoreTerm = false): string[] {
  return ["-c", `${ignoreTerm ? "trap '' TERM; " : ""}echo $$ > '${file}'; exec sleep 60`];
}

async function pidIn(file: string): Promise<number> {
  let pid = 0;
  await until(async () => {
    pid = Number((await readFile(file, "utf8").catch(() => "")).trim());
    return pid > 0;
  }, 5_000);
  if (!pid) throw new Error(`no pid in ${file}`);
  return pid;
}

/** A Node parent that starts a watched sleeper and can then be SIGKILLed. */
async function watchedByParent(options: {
  graceSeconds?: number;
  killAfterSeconds?: number;
  ignoreTerm?: boolean;
  output?: "pipe";
}): Promise<{ parent: ChildProcess; pid: number; group: number }> {
  const dir = await mkdtemp(join(tmpdir(), "platform-wd-"));
  dirs.push(dir);
  const file = join(dir, "pid");
  const module = new URL("../../src/process/watchdog.ts", import.meta.url).href;
  const script = `import { spawnWatched } from ${JSON.stringify(module)};
    const w = spawnWatched("sh", ${JSON.stringify(sleeperArgs(file, options.ignoreTerm))}, ${JSON.stringify({ graceSeconds: options.graceSeconds, killAfterSeconds: options.killAfterSeconds, output: options.output })});
    w.process.stdout?.resume();
    w.process.stderr?.resume();
    console.log("GROUP " + w.process.pid);
    setInterval(() => undefined, 1000);`;
  const parent = spawn(process.execPath, ["--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  children.push(parent);
  let out = "";
  parent.stdout?.on("data", (b) => (out += b));
  const pid = await pidIn(file);
  await until(() => /GROUP \d+/.test(out), 5_000);
  return { parent, pid, group: Number(/GROUP (\d+)/.exec(out)?.[1]) };
}

describe("spawnWatched", () => {
  it("stops the command when its parent is killed outright, after the grace and not before", async () => {
    const { parent, pid } = await watchedByParent({ graceSeconds: 1.5 });
    parent.kill("SIGKILL");
    await exitOf(parent);
    const t0 = Date.now();
    expect(await until(() => !alive(pid), 1_000)).toBe(false); // still running: others may need it
    expect(await until(() => !alive(pid), 5_000)).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_000);
  });

  it("SIGKILLs a command that ignores SIGTERM once killAfterSeconds have passed", async () => {
    const { parent, pid } = await watchedByParent({ graceSeconds: 0, killAfterSeconds: 1, ignoreTerm: true });
    parent.kill("SIGKILL");
    expect(await until(() => !alive(pid), 800)).toBe(false);
    expect(await until(() => !alive(pid), 5_000)).toBe(true);
  });

  it("leaves nothing of its process group behind, even with its output piped to the dead parent", async () => {
    // A shell writing to the dead parent's pipe would die of SIGPIPE before its clean-up.
    const { parent, pid, group } = await watchedByParent({ graceSeconds: 0, killAfterSeconds: 30, output: "pipe" });
    expect(group).toBeGreaterThan(1);
    parent.kill("SIGKILL");
    expect(await until(() => !alive(pid), 5_000)).toBe(true);
    expect(await until(() => !alive(-group), 5_000)).toBe(true); // not 30 s later: the watcher's own sleep went too
  });

  it("stop() ends the command at once, with no grace, and reports its signal", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-wd-"));
    dirs.push(dir);
    const w = spawnWatched("sh", sleeperArgs(join(dir, "pid")), { graceSeconds: 30 });
    const pid = await pidIn(join(dir, "pid"));
    w.stop();
    expect(await until(() => !alive(pid), 1_000)).toBe(true);
    expect(await exitOf(w.process)).toEqual({ code: null, signal: "SIGTERM" });
  });

  it("a SIGTERM to the whole group stops the command, and the watchdog stays to report it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-wd-"));
    dirs.push(dir);
    const w = spawnWatched("sh", sleeperArgs(join(dir, "pid")), { graceSeconds: 30 });
    const pid = await pidIn(join(dir, "pid"));
    process.kill(-(w.process.pid as number), "SIGTERM");
    expect(await exitOf(w.process)).toEqual({ code: null, signal: "SIGTERM" });
    expect(alive(pid)).toBe(false);
  });

  it("exits with the command's own status, and 127 for a command that does not exist", async () => {
    expect(await exitOf(spawnWatched("sh", ["-c", "exit 3"]).process)).toEqual({ code: 3, signal: null });
    expect(await exitOf(spawnWatched(join(tmpdir(), "no-such-command-here"), []).process)).toEqual({
      code: 127,
      signal: null,
    });
  });
});
