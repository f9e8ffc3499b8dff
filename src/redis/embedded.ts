/**
 * The Redis `platform up` starts when REDIS_URL is unset: a child process
 * bound to 127.0.0.1, with AOF persistence in the data directory and
 * `noeviction`, because queues and records must never be silently dropped.
 * It is locked: a generated password (kept in the data directory, mode 0600)
 * is the only way in, for the platform user and the default user alike. The
 * password lives in the config file, never on a command line, so `ps` does not
 * show it.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, readlink, stat, writeFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { freePort } from "../process/free-port.ts";
import { spawnWatched } from "../process/watchdog.ts";

export type EmbeddedRedis = {
  /** The full URL, password included: give it to child processes, never print it. */
  url: string;
  /** The same URL with the password masked, for logs and terminals. */
  displayUrl: string;
  /** Where the password is kept (mode 0600). */
  passwordFile: string;
  /** Process id of redis-server itself (not of its watchdog). */
  pid: number;
  /** The port it listens on (a restart takes the same one: the URL its clients hold stays good). */
  port: number;
  /** Its log, named when it fails. */
  logfile: string;
  /** Settles when redis-server has ended, however it ended, with how (`code 1`, `signal SIGKILL`). */
  exited: Promise<string>;
  /** Graceful by default (SIGTERM, so the AOF is flushed); `fast` gives it 2 s before SIGKILL. */
  stop: (options?: { fast?: boolean }) => Promise<void>;
};

export const REDIS_USER = "platform";
const PASSWORD_FILE = "password";
const CONFIG_FILE = "redis.conf";

/**
 * When `up` dies without stopping anything (SIGKILL, OOM), Redis runs on this long before its
 * watchdog's SIGTERM: the workers notice too, and hand their in-flight jobs back to the queue —
 * through this Redis, which must still be there.
 */
export const REDIS_GRACE_AFTER_PARENT_S = 3;

/** Creates `dir` (mode 0700) or tightens it: it holds the password and every record. */
export async function ensurePrivateDir(dir: string, onNote: (line: string) => void = () => undefined): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const mode = (await stat(dir)).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    await chmod(dir, 0o700);
    onNote(`note: ${dir} was readable by other users (mode ${mode.toString(8)}); it is now 0700`);
  }
}

/** The password generated on the first start, reused after (the AOF keeps the data it guards). */
async function loadOrCreatePassword(file: string): Promise<string> {
  const existing = (await readFile(file, "utf8").catch(() => "")).trim();
  if (/^[0-9a-f]{64}$/.test(existing)) {
    await chmod(file, 0o600);
    return existing;
  }
  const password = randomBytes(32).toString("hex");
  await writeFile(file, `${password}\n`, { mode: 0o600 });
  await chmod(file, 0o600); // writeFile's mode applies only to a new file
  return password;
}

/** Major and minor version of the redis-server binary: ACL syntax differs between 6.0, 6.2 and 7. */
async function serverVersion(server: string): Promise<[number, number]> {
  try {
    const { stdout } = await promisify(execFile)(server, ["--version"]);
    const m = /v=(\d+)\.(\d+)/.exec(stdout);
    return m ? [Number(m[1]), Number(m[2])] : [7, 0];
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") {
      throw new Error(
        "redis-server is not installed: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set REDIS_URL to an existing Redis",
      );
    }
    return [7, 0];
  }
}

function config(o: {
  dir: string;
  port: number;
  password: string;
  logfile: string;
  pidfile: string;
  version: [number, number];
}): string {
  const [major, minor] = o.version;
  // Redis 6.0 has ACL users but no channel rules; before 6, only requirepass. The default user
  // must stay on: Redis 7.0 replays the AOF's MULTI/EXEC (API keys, every BullMQ script) as
  // `default`, and with it off refuses each EXEC ("NOPERM ACLs rules changed") and silently
  // drops it (redis/redis#14541). With a password it still admits no client that lacks one.
  const rules = `~* ${major > 6 || minor >= 2 ? "&* " : ""}+@all`;
  const auth =
    major >= 6
      ? [`user default on >${o.password} ${rules}`, `user ${REDIS_USER} on >${o.password} ${rules}`]
      : [`requirepass ${o.password}`];
  return [
    "# Written by `platform up` on every start; edits are overwritten.",
    `port ${o.port}`,
    "bind 127.0.0.1",
    "protected-mode yes",
    ...auth,
    `dir ${o.dir}`,
    // A redis-server killed outright (kill -9, the OOM killer) loses nothing it acknowledged: it
    // write(2)s the AOF before it replies, and the kernel keeps what was written. `everysec` leaves
    // only a machine crash's last second at risk; `always` would fsync every write, which costs
    // milliseconds per command on ordinary disks (docs/fleet.md, "When the embedded Redis dies").
    "appendonly yes",
    "appendfsync everysec",
    'save ""',
    "maxmemory-policy noeviction",
    "daemonize no",
    `logfile ${o.logfile}`,
    `pidfile ${o.pidfile}`,
    "",
  ].join("\n");
}

/**
 * Whether `pid` is this directory's Redis: a `redis-server` whose command line names this config
 * or whose working directory is this directory (Redis changes into its `dir`). Without /proc
 * there is no way to tell, so the answer is no.
 */
export async function isOurRedis(pid: number, dir: string): Promise<boolean | "unknown"> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch((e: NodeJS.ErrnoException) =>
    e.code === "ENOENT" ? null : undefined,
  );
  if (cmdline === undefined) return "unknown";
  if (cmdline === null) {
    // No such process, or no /proc at all.
    return (await stat("/proc/self").catch(() => undefined)) ? false : "unknown";
  }
  const argv = cmdline.split("\0").filter(Boolean);
  const first = argv[0]?.split(" ")[0] ?? "";
  if (!basename(first).startsWith("redis-server")) return false;
  // Whole arguments only, against the absolute path: a relative data directory ("data/redis")
  // is a substring of many another directory's config path. (Redis 7 retitles itself, so a live
  // one usually shows no config path at all; its working directory then tells.)
  if (argv.flatMap((arg) => arg.split(" ")).includes(resolve(dir, CONFIG_FILE))) return true;
  const cwd = await readlink(`/proc/${pid}/cwd`).catch(() => undefined);
  return cwd !== undefined && resolve(cwd) === resolve(dir);
}

/** The parent of `pid`, from /proc (after the last ")": a command name may hold spaces and parentheses). */
async function parentOf(pid: number): Promise<number | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  return Number.isInteger(ppid) && ppid > 1 ? ppid : undefined;
}

/**
 * The `platform up` that runs Redis `pid`, if it still runs: Redis runs under its watchdog, whose
 * parent is the `up` that started it. A killed `up`'s watchdog has been handed to init (or a
 * subreaper, which is no `up`): that Redis is stale.
 */
async function runningUp(pid: number): Promise<number | undefined> {
  const watchdog = await parentOf(pid);
  const owner = watchdog === undefined ? undefined : await parentOf(watchdog);
  if (owner === undefined || owner === process.pid) return undefined;
  const argv = (await readFile(`/proc/${owner}/cmdline`, "utf8").catch(() => "")).split("\0");
  return argv.includes("up") ? owner : undefined;
}

/**
 * A Redis left running by an `up` that was killed outright would hold the AOF: stop it first —
 * but only if the pidfile's process is verifiably this directory's Redis (a stale pidfile may
 * name any process by now), and never while the `up` that started it still runs: that is a
 * second `up` on the same data directory, refused.
 */
async function stopStale(pidfile: string, dir: string, onNote: (line: string) => void): Promise<void> {
  const pid = Number((await readFile(pidfile, "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 1) return;
  try {
    process.kill(pid, 0);
  } catch {
    return; // not running
  }
  const ours = await isOurRedis(pid, dir);
  if (ours !== true) {
    if (ours === "unknown")
      onNote(
        `note: ${pidfile} names process ${pid}, which cannot be identified here (no /proc); it is left alone — stop it yourself if it is an old Redis of this data directory`,
      );
    return;
  }
  const owner = await runningUp(pid);
  if (owner !== undefined)
    throw new Error(
      `another \`platform up\` (process ${owner}) is running on this data directory (its Redis: ${dir}); stop it first (Ctrl-C in its terminal, or \`kill ${owner}\`), or give this one its own --data-dir`,
    );
  process.kill(pid, "SIGTERM");
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 100));
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
  }
}

/**
 * `server`: the redis-server to run (settings.queue.redisServer, PLATFORM_REDIS_SERVER); default the
 * one on PATH. `port`: the one to listen on (a restart's); default a free one.
 */
export async function startEmbeddedRedis(
  dataDir: string,
  options: { onNote?: (line: string) => void; server?: string; port?: number } = {},
): Promise<EmbeddedRedis> {
  // Absolute from here on: Redis changes into `dir` before it reads the logfile and pidfile paths.
  const dir = resolve(dataDir);
  const onNote = options.onNote ?? ((line: string) => console.error(line));
  await ensurePrivateDir(dir, onNote);
  const server = options.server ?? "redis-server";
  const version = await serverVersion(server);
  const port = options.port ?? (await freePort());
  const logfile = join(dir, "redis.log");
  const pidfile = join(dir, "redis.pid");
  const confFile = join(dir, CONFIG_FILE);
  const passwordFile = join(dir, PASSWORD_FILE);
  await stopStale(pidfile, dir, onNote);
  const password = await loadOrCreatePassword(passwordFile);
  await writeFile(confFile, config({ dir, port, password, logfile, pidfile, version }), { mode: 0o600 });
  await chmod(confFile, 0o600);

  // Under the pipe watchdog (src/process/watchdog.ts): no orphan, whatever ends `up`. In its own process
  // group, so a terminal's Ctrl-C does not stop Redis before the workers have drained.
  const watched = spawnWatched(server, [confFile], { graceSeconds: REDIS_GRACE_AFTER_PARENT_S });
  const child = watched.process;
  const exited = new Promise<string>((resolve) =>
    child.once("exit", (code, signal) => resolve(signal ? `signal ${signal}` : `code ${code}`)),
  );
  const spawnError = new Promise<Error>((resolve) => child.once("error", resolve));
  const user = version[0] >= 6 ? REDIS_USER : "";
  const url = `redis://${user}:${password}@127.0.0.1:${port}`;
  const displayUrl = `redis://${user}:***@127.0.0.1:${port}`;
  const probe = new Redis({
    port,
    host: "127.0.0.1",
    username: user || undefined,
    password,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on("error", () => undefined);
  const group = (signal: NodeJS.Signals) => {
    try {
      if (child.pid) process.kill(-child.pid, signal); // the watchdog and redis-server
    } catch {
      // already gone
    }
  };
  let pid = 0;
  try {
    for (let i = 0; ; i++) {
      const failed = await Promise.race([
        spawnError,
        exited.then((how) => new Error(`redis-server exited (${how})`)),
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 100)),
      ]);
      if (failed) {
        const log = await readFile(logfile, "utf8").catch(() => "");
        throw new Error(`${failed.message}; last log lines:\n${log.split("\n").slice(-10).join("\n")}`);
      }
      try {
        await probe.connect();
        await probe.ping();
        pid = Number((await probe.info("server")).match(/process_id:(\d+)/)?.[1] ?? 0);
        break;
      } catch {
        probe.disconnect();
        if (i > 100) throw new Error(`redis-server did not answer on ${displayUrl} within 10 s (log: ${logfile})`);
      }
    }
  } catch (e) {
    group("SIGKILL");
    throw e;
  } finally {
    probe.disconnect();
  }
  return {
    url,
    displayUrl,
    passwordFile,
    pid,
    port,
    logfile,
    exited,
    stop: async ({ fast = false } = {}) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // The watchdog's cue: SIGTERM to Redis now, which flushes the AOF.
      watched.stop();
      const stuck = setTimeout(() => group("SIGKILL"), fast ? 2_000 : 10_000);
      await exited;
      clearTimeout(stuck);
    },
  };
}
