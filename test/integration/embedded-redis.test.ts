/** The embedded Redis `platform up` starts: locked, private files, no secret on a command line, no orphan, no wrong kill. */
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { alive } from "../helpers/processes.ts";
import { holdsWithin } from "../helpers/wait.ts";
import { type EmbeddedRedis, isOurRedis, startEmbeddedRedis } from "../../src/redis/embedded.ts";
import { connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";

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

const waitGone = (pid: number, ms: number) => holdsWithin(() => !alive(pid), ms, 100);

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
    expect(await refusal(new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 0, retryStrategy: () => null }))).toMatch(
      /NOAUTH/,
    );
    expect(
      await refusal(
        new Redis({
          port,
          host: "127.0.0.1",
          username: "platform",
          password: "guess",
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        }),
      ),
    ).toMatch(/WRONGPASS/);
    expect(
      await refusal(
        new Redis({
          port,
          host: "127.0.0.1",
          username: "default",
          password: "",
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        }),
      ),
    ).not.toBe("answered");
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

  it("reuses its password after a restart, and replays transactions, scripts and queue jobs from its AOF", async () => {
    const before = await readFile(redis.passwordFile, "utf8");
    // What the platform writes atomically (API keys: MULTI/EXEC; BullMQ: Lua scripts, which
    // Redis 7 logs as MULTI/EXEC) is what an AOF replay run as a disabled default user drops.
    const writer = connectControl(redis.url, "test");
    const queues = new QueueBase(writer);
    expect(
      await writer.redis.multi().set("tx:key", "1").hset("tx:hash", "field", "value").sadd("tx:set", "member").exec(),
    ).toHaveLength(3);
    await writer.redis.eval(
      "redis.call('set', KEYS[1], ARGV[1]); redis.call('rpush', KEYS[2], ARGV[1]); return 1",
      2,
      "lua:key",
      "lua:list",
      "x",
    );
    const job = await queues.queueNamed("restart").add("kept", { n: 1 });
    await queues.close();
    writer.redis.disconnect();

    await redis.stop();
    expect(alive(redis.pid)).toBe(false);
    redis = await startEmbeddedRedis(dir);
    expect(await readFile(redis.passwordFile, "utf8")).toBe(before);
    expect(await readFile(join(dir, "redis.log"), "utf8")).not.toMatch(/NOPERM|CRITICAL/);
    const reader = connectControl(redis.url, "test");
    const client = reader.redis;
    const again = new QueueBase(reader);
    try {
      expect(await client.get("kept")).toBe("yes");
      expect(await client.get("tx:key")).toBe("1");
      expect(await client.hget("tx:hash", "field")).toBe("value");
      expect(await client.smembers("tx:set")).toEqual(["member"]);
      expect(await client.get("lua:key")).toBe("x");
      expect(await client.lrange("lua:list", 0, -1)).toEqual(["x"]);
      const restart = again.queueNamed("restart");
      expect((await restart.getJob(job.id as string))?.data).toEqual({ n: 1 });
      expect(await restart.getJobState(job.id as string)).toBe("waiting");
    } finally {
      await again.close();
      client.disconnect();
    }
    // Still locked after the restart.
    const port = Number(new URL(redis.url).port);
    expect(await refusal(new Redis(port, "127.0.0.1", { maxRetriesPerRequest: 0, retryStrategy: () => null }))).toMatch(
      /NOAUTH/,
    );
    expect(
      await refusal(
        new Redis({
          port,
          host: "127.0.0.1",
          username: "default",
          password: "guess",
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        }),
      ),
    ).toMatch(/WRONGPASS/);
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

  it("leaves alone a foreign redis-server that names another directory's redis.conf, with a relative data directory", async () => {
    const root = await tempDir();
    const other = join(root, "elsewhere", "redis");
    await mkdir(other, { recursive: true, mode: 0o700 });
    await mkdir(join(root, "redis"), { recursive: true, mode: 0o700 });
    // A process titled redis-server whose command line names elsewhere/redis/redis.conf, which
    // ends with "redis/redis.conf": what a relative data directory "redis" joins to.
    const foreign = spawn(process.execPath, ["-e", "setInterval(() => undefined, 1000)", join(other, "redis.conf")], {
      argv0: "redis-server",
      cwd: other,
      stdio: "ignore",
    });
    children.push(foreign);
    const pid = foreign.pid as number;
    const t0 = Date.now();
    while (!(await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).includes("redis.conf")) {
      if (Date.now() - t0 > 5_000) throw new Error("the foreign process did not start");
      await new Promise((r) => setTimeout(r, 20));
    }
    await writeFile(join(root, "redis", "redis.pid"), `${pid}\n`);
    const cwd = process.cwd();
    process.chdir(root);
    try {
      expect(await isOurRedis(pid, "redis")).toBe(false);
      expect(await isOurRedis(pid, other)).toBe(true); // the directory it does name
      const r = await startEmbeddedRedis("redis");
      await r.stop();
    } finally {
      process.chdir(cwd);
    }
    expect(alive(pid)).toBe(true);
    expect(foreign.exitCode).toBeNull();
    expect(foreign.signalCode).toBeNull();
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

  it("stops when the process that started it is killed outright (SIGKILL), after a short grace, within 10 s", async () => {
    const d = join(await tempDir(), "redis");
    const module = new URL("../../src/redis/embedded.ts", import.meta.url).href;
    const script = `import { startEmbeddedRedis } from ${JSON.stringify(module)};
      const r = await startEmbeddedRedis(${JSON.stringify(d)});
      console.log("PID " + r.pid);
      setInterval(() => undefined, 1000);`;
    const parent = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
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
    // Not at once: the workers of a killed `up` still need it to hand their jobs back.
    expect(await waitGone(pid, 1_000)).toBe(false);
    expect(await waitGone(pid, 9_000)).toBe(true);
    // It stopped with SIGTERM, the way that flushes the AOF: the log says so.
    expect(await readFile(join(d, "redis.log"), "utf8")).toMatch(/SIGTERM|shutdown/i);
  });
});
