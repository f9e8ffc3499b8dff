/**
 * The PostgreSQL connection: one `pg` pool, shared by the migrator, the readiness check and Prisma's
 * client (Prisma 7's engine-less client with the `pg` driver adapter, so no query engine binary is
 * downloaded or shipped). Without DATABASE_URL the service runs without a database.
 */
import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { PrismaClient } from "./__generated__/prisma/client.js";
import type { Logger } from "./logger.js";

export type Database = {
  pool: pg.Pool;
  prisma: PrismaClient;
  /** Answers when PostgreSQL answers a query; throws otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
};

export function openDatabase(url: string, log: Logger): Database {
  const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 5_000 });
  // An idle connection dropped by the server (a restart, a failover) is reported here; without a
  // listener it would crash the process. The pool opens a new connection for the next query.
  pool.on("error", (e) => log.warn({ err: e }, "database connection lost"));
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  return {
    pool,
    prisma,
    ping: async () => {
      await pool.query("SELECT 1");
    },
    close: async () => {
      await prisma.$disconnect();
      await pool.end();
    },
  };
}

/** Retries until the database answers (it may start after the service, as in docker compose). */
export async function waitForDatabase(db: Database, log: Logger, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt++) {
    try {
      await db.ping();
      return;
    } catch (e) {
      if (Date.now() >= deadline)
        throw new Error(`the database did not answer within ${timeoutMs} ms (DATABASE_WAIT_MS): ${(e as Error).message}`, {
          cause: e,
        });
      log.info({ attempt, err: (e as Error).message }, "waiting for the database");
      await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 2_000)));
    }
  }
}
