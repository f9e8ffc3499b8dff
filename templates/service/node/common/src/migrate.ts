/**
 * Applies the SQL migrations in prisma/migrations/NNNN_name/migration.sql, in name order, each once,
 * each in its own transaction, recording them in the `_service_migrations` table. `prisma migrate`
 * would do this, but it downloads its schema engine and so cannot run offline; these are plain SQL
 * files in Prisma's layout, applied with `pg`. An advisory lock keeps two replicas starting at once
 * from applying the same migration twice. Run by the service at start, or alone:
 * `npm run migrate` (DATABASE_URL set).
 */
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { Logger } from "./logger.js";

/** The migrations beside the code: `../prisma/migrations` from src/ (tests) and from dist/ (built). */
export const MIGRATIONS_DIR = fileURLToPath(new URL("../prisma/migrations", import.meta.url));

/** Any fixed number: the key of the advisory lock the migrating replica holds. */
const LOCK_KEY = 72_707_369;

export async function pendingMigrations(dir: string): Promise<string[]> {
  if (!existsSync(dir)) return [];
  const entries = await readdir(dir, { withFileTypes: true });
  return entries
    .filter((e) => e.isDirectory() && existsSync(join(dir, e.name, "migration.sql")))
    .map((e) => e.name)
    .sort();
}

/** Applies what is not applied yet; returns the names it applied. */
export async function migrate(pool: pg.Pool, log: Logger, dir: string = MIGRATIONS_DIR): Promise<string[]> {
  const client = await pool.connect();
  try {
    await client.query("SELECT pg_advisory_lock($1)", [LOCK_KEY]);
    await client.query(
      "CREATE TABLE IF NOT EXISTS _service_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    );
    const done = new Set(
      (await client.query<{ name: string }>("SELECT name FROM _service_migrations")).rows.map((r) => r.name),
    );
    const applied: string[] = [];
    for (const name of await pendingMigrations(dir)) {
      if (done.has(name)) continue;
      const sql = await readFile(join(dir, name, "migration.sql"), "utf8");
      await client.query("BEGIN");
      try {
        await client.query(sql);
        await client.query("INSERT INTO _service_migrations (name) VALUES ($1)", [name]);
        await client.query("COMMIT");
      } catch (e) {
        await client.query("ROLLBACK");
        throw new Error(`migration ${name} failed: ${(e as Error).message}`, { cause: e });
      }
      log.info({ migration: name }, "migration applied");
      applied.push(name);
    }
    return applied;
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [LOCK_KEY]).catch(() => {});
    client.release();
  }
}

// `node dist/migrate.js`: apply the migrations and exit, as a release step or a Kubernetes Job would.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { createLogger } = await import("./logger.js");
  const log = createLogger(process.env.LOG_LEVEL || "info");
  const url = process.env.DATABASE_URL;
  if (!url) {
    log.fatal("DATABASE_URL is not set: it names the PostgreSQL database to migrate");
    process.exit(2);
  }
  const pool = new pg.Pool({ connectionString: url });
  try {
    const applied = await migrate(pool, log);
    log.info({ applied }, applied.length ? "migrations applied" : "no migration to apply");
  } catch (e) {
    log.fatal({ err: e }, "migration failed");
    process.exitCode = 1;
  } finally {
    await pool.end();
  }
}
