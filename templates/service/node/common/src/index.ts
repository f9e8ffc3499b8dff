/**
 * The entry point (`npm start`, the image's command): reads the settings, opens the database when
 * DATABASE_URL is set, serves (src/server.ts), and on SIGTERM or SIGINT stops taking calls, lets
 * in-flight ones finish within SHUTDOWN_TIMEOUT_MS and exits. Kubernetes sends SIGTERM, then
 * SIGKILL after terminationGracePeriodSeconds: keep SHUTDOWN_TIMEOUT_MS below it.
 */
import { readConfig } from "./config.js";
import { type Database, openDatabase } from "./db.js";
import { createLogger } from "./logger.js";
import { startServer } from "./server.js";

let config: ReturnType<typeof readConfig>;
try {
  config = readConfig();
} catch (e) {
  console.error(`{{name}}: ${(e as Error).message}`);
  process.exit(2);
}
const log = createLogger(config.logLevel);
const db: Database | undefined = config.databaseUrl ? openDatabase(config.databaseUrl, log) : undefined;
if (!db) log.info("DATABASE_URL is not set: running without a database");

const server = await startServer({
  port: config.port,
  host: config.host,
  db,
  databaseWaitMs: config.databaseWaitMs,
  shutdownTimeoutMs: config.shutdownTimeoutMs,
  log,
});

async function stop(signal: string, code: number): Promise<never> {
  log.info({ signal, timeoutMs: config.shutdownTimeoutMs }, "shutting down");
  await server.shutdown();
  await db?.close().catch((e: unknown) => log.warn({ err: e }, "closing the database failed"));
  log.info("stopped");
  process.exit(code);
}
process.once("SIGTERM", () => void stop("SIGTERM", 0));
process.once("SIGINT", () => void stop("SIGINT", 0));

try {
  await server.ready;
  log.info({ url: server.url }, "ready");
} catch (e) {
  log.fatal({ err: e }, "could not start");
  await stop("startup failure", 1);
}
