/**
 * The Redis `platform up` starts when REDIS_URL is unset: a child process
 * bound to 127.0.0.1, with AOF persistence in the data directory and
 * `noeviction`, because queues and records must never be silently dropped.
 */
import { spawn } from "node:child_process";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Redis } from "ioredis";
import { freePort } from "../net.ts";

export type EmbeddedRedis = { url: string; stop: () => Promise<void> };


/** A Redis left running by an `up` that was killed outright would hold the AOF: stop it first. */
async function stopStale(pidfile: string): Promise<void> {
  const pid = Number((await readFile(pidfile, "utf8").catch(() => "")).trim());
  if (!pid) return;
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return; // not running
  }
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 100));
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
  }
}

export async function startEmbeddedRedis(dir: string): Promise<EmbeddedRedis> {
  await mkdir(dir, { recursive: true });
  const port = await freePort();
  const logfile = join(dir, "redis.log");
  const pidfile = join(dir, "redis.pid");
  await stopStale(pidfile);
  const child = spawn(
    process.env.PLATFORM_REDIS_SERVER ?? "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction", "--daemonize", "no", "--logfile", logfile, "--pidfile", pidfile],
    // Its own process group: a terminal's Ctrl-C must not stop Redis before the workers have drained.
    { stdio: "ignore", detached: true },
  );
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const spawnError = new Promise<Error>((resolve) => child.once("error", resolve));
  const url = `redis://127.0.0.1:${port}`;
  const probe = new Redis(port, "127.0.0.1", { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    for (let i = 0; ; i++) {
      const failed = await Promise.race([spawnError, exited.then((code) => new Error(`redis-server exited with code ${code}`)), new Promise<undefined>((r) => setTimeout(() => r(undefined), 100))]);
      if (failed) {
        const missing = (failed as NodeJS.ErrnoException).code === "ENOENT";
        const log = await readFile(logfile, "utf8").catch(() => "");
        throw new Error(
          missing
            ? "redis-server is not installed: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set REDIS_URL to an existing Redis"
            : `${failed.message}; last log lines:\n${log.split("\n").slice(-10).join("\n")}`,
        );
      }
      try {
        await probe.connect();
        await probe.ping();
        break;
      } catch {
        probe.disconnect();
        if (i > 100) throw new Error(`redis-server did not answer on ${url} within 10 s (log: ${logfile})`);
      }
    }
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  } finally {
    probe.disconnect();
  }
  return {
    url,
    stop: async () => {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM"); // Redis flushes the AOF on SIGTERM
      const stuck = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(stuck);
    },
  };
}
