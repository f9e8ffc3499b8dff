/** The embedded Redis `platform up` starts: locked, private files, no secret on a command line, no orphan, no wrong kill. */
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { alive } from "../helpers/processes.ts";
import { type EmbeddedRedis, startEmbeddedRedis } from "../../src/control/embedded-redis.ts";

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "platform-er-"));
  dirs.push(d);
  return d;
}

const mode = async (path: string) => ((await stat(path)).mode & 0o777).toString(8);

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !alive(pid);
}

async function refusal(client: Redis): Promise<string> {
  client.on("error", () => undefined);
  try {
    await client.ping();
    return "answered";
  } catch (e) {
    return (e as Error).message;
  } finally {
    client.disconnect();
  }
}

describe("embedded Redis", () => {
  let redis: EmbeddedRedis;
  let dir: string;

  it("refuses clients without the password, and lets the platform user in", async () => {
    dir = join(await tempDir(), "redis");
    redis = await startEmbeddedRedis(dir);
    const port = Number(new URL(redis.url).port);
    expect(await refusal(new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 0, retryStrategy: () => null }))).toMatch(/NOAUTH/);
    expect(await refusal(new Redis({ port, host: "127.0.0.1", username: "platform", password: "guess", maxRetriesPerRequest: 0, retryStrategy: () => null }))).toMatch(/WRONGPASS/);
    expect(await refusal(new Redis({ port, host: "127.0.0.1", username: "default", password: "", maxRetriesPerRequest: 0, retryStrategy: () => null }))).not.toBe("answered");
    const ok = new Redis(redis.url);
    expect(await ok.set("kept", "yes")).toBe("OK");
    ok.disconnect();
    expect(redis.displayUrl).not.toContain((await readFile(redis.passwordFile, "utf8")).trim());
    expect(redis.displayUrl).toMatch(/^redis:\/\/platform:\*\*\*@127\.0\.0\.1:\d+$/);
  });

  it("keeps its directory 0700 and its password and config 0600", async () => {
    expect(await mode(dir)).toBe("700");
    expect(await mode(redis.passwordFile)).toBe("600");
    expect(await mode(join(dir, "redis.conf"))).toBe("600");
  });

  it("never puts the password on a command line", async () => {
    const password = (await readFile(redis.passwordFile, "utf8")).trim();
    expect(password).toMatch(/^[0-9a-f]{64}$/);
    const cmdline = await readFile(`/proc/${redis.pid}/cmdline`, "utf8");
    expect(cmdline).toMatch(/redis-server/);
    expect(cmdline).not.toContain(password);
    // The watchdog shell and anything else on this machine too.
    for (const entry of await readdir("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      const line = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
      expect(line).not.toContain(password);
    }
  });

  it("reuses its password after a restart, so the AOF's data stays reachable", async () => {
    const before = await readFile(redis.passwordFile, "utf8");
    await redis.stop();
    expect(alive(redis.pid)).toBe(false);
    redis = await startEmbeddedRedis(dir);
    expect(await readFile(redis.passwordFile, "utf8")).toBe(before);
    const client = new Redis(redis.url);
    expect(await client.get("kept")).toBe("yes");
    client.disconnect();
    await redis.stop();
  });

  it("tightens a data directory other users could read", async () => {
    const loose = join(await tempDir(), "redis");
    await mkdir(loose, { mode: 0o755 });
    await chmod(loose, 0o755);
    const notes: string[] = [];
    const r = await startEmbeddedRedis(loose, { onNote: (l) => notes.push(l) });
    await r.stop();
    expect(await mode(loose)).toBe("700");
    expect(notes.join("\n")).toMatch(/now 0700/);
  });

  it("leaves alone a live process that is not its Redis, even if the pidfile names it", async () => {
    const d = join(await tempDir(), "redis");
    await mkdir(d, { recursive: true, mode: 0o700 });
    const sleeper = spawn("sleep", ["60"], { stdio: "ignore" });
    children.push(sleeper);
    const pid = sleeper.pid as number;
    await writeFile(join(d, "redis.pid"), `${pid}\n`);
    const r = await startEmbeddedRedis(d);
    await r.stop();
    expect(alive(pid)).toBe(true);
    expect(sleeper.exitCode).toBeNull();
    expect(sleeper.signalCode).toBeNull();
  });

  it("does stop a stale Redis of its own directory (it would hold the AOF)", async () => {
    const d = join(await tempDir(), "redis");
    await (await startEmbeddedRedis(d)).stop(); // leaves this directory's redis.conf
    const stale = spawn("redis-server", [join(d, "redis.conf")], { stdio: "ignore", cwd: "/" });
    children.push(stale);
    const t0 = Date.now();
    while (Number((await readFile(join(d, "redis.pid"), "utf8").catch(() => "")).trim()) !== stale.pid) {
      if (Date.now() - t0 > 10_000) throw new Error("the stale Redis did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
    const r = await startEmbeddedRedis(d);
    expect(await waitGone(stale.pid as number, 5_000)).toBe(true);
    expect(r.pid).not.toBe(stale.pid);
    await r.stop();
  });

  it("stops when the process that started it is killed outright (SIGKILL), within 10 s", async () => {
    const d = join(await tempDir(), "redis");
    const module = new URL("../../src/control/embedded-redis.ts", import.meta.url).href;
    const script = `import { startEmbeddedRedis } from ${JSON.stringify(module)};
      const r = await startEmbeddedRedis(${JSON.stringify(d)});
      console.log("PID " + r.pid);
      setInterval(() => undefined, 1000);`;
    const parent = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    children.push(parent);
    let out = "";
    parent.stdout?.on("data", (b) => (out += b));
    const t0 = Date.now();
    while (!/PID \d+/.test(out)) {
      if (Date.now() - t0 > 30_000 || parent.exitCode !== null) throw new Error(`embedded Redis did not start: ${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const pid = Number(/PID (\d+)/.exec(out)?.[1]);
    expect(alive(pid)).toBe(true);
    parent.kill("SIGKILL");
    expect(await waitGone(pid, 10_000)).toBe(true);
    // It stopped with SIGTERM, the way that flushes the AOF: the log says so.
    expect(await readFile(join(d, "redis.log"), "utf8")).toMatch(/SIGTERM|shutdown/i);
  });
});
