/**
 * A private PostgreSQL cluster on loopback for the tests that need their own (the scaffolds' examples
 * restart it, or their service, and check the data is still there): Debian's PostgreSQL binaries,
 * a data directory under a temp dir owned by `postgres` (initdb refuses root), trust auth, fsync off.
 * `postgresUnavailable()` says why it cannot run here, for a skip that names the reason.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { chmod, chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./redis.ts";

const run = promisify(execFile);

/** Debian's newest PostgreSQL bin directory, if one is installed. */
function binDir(): string | undefined {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : join(base, versions[0], "bin");
}

/** Why a private cluster cannot start here, or undefined when it can. */
export function postgresUnavailable(): string | undefined {
  if (!binDir()) return "PostgreSQL's server binaries are not installed (Debian package postgresql)";
  if (process.getuid?.() !== 0)
    return "starting a private PostgreSQL needs root here (initdb runs as the postgres user)";
  return undefined;
}

export type Postgres = {
  /** `postgresql://postgres@127.0.0.1:PORT/postgres` */
  url: string;
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its data. */
  remove(): Promise<void>;
};

async function asPostgres(program: string, args: string[]): Promise<void> {
  await run("runuser", ["-u", "postgres", "--", program, ...args], { timeout: 60_000 });
}

export async function startPostgres(): Promise<Postgres> {
  const bin = binDir();
  const why = postgresUnavailable();
  if (!bin || why) throw new Error(why);
  const dir = await mkdtemp(join(tmpdir(), "platform-pg-"));
  const { stdout } = await run("id", ["-u", "postgres"]);
  const uid = Number(stdout.trim());
  const gid = Number((await run("id", ["-g", "postgres"])).stdout.trim());
  await chown(dir, uid, gid);
  await chmod(dir, 0o700);
  const data = join(dir, "data");
  await asPostgres(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth-local=trust", "--auth-host=trust"]);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  const pgCtl = join(bin, "pg_ctl");
  let running = false;
  const pg: Postgres = {
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    port,
    start: async () => {
      await asPostgres(pgCtl, ["-D", data, "-l", join(dir, "log"), "-w", "-o", options, "start"]);
      running = true;
    },
    stop: async () => {
      if (!running) return;
      await asPostgres(pgCtl, ["-D", data, "-m", "fast", "-w", "stop"]);
      running = false;
    },
    remove: async () => {
      await pg.stop().catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
  await pg.start();
  return pg;
}
