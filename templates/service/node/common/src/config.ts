/**
 * The service's settings, read once from the environment at start. A bad value stops the service
 * with a message naming the variable and what it expects, before anything listens.
 */

export type Config = {
  /** PORT: where Connect, gRPC and gRPC-Web are served, over HTTP/1.1 and h2c (0: any free port). */
  port: number;
  /** HOST: the address to bind (0.0.0.0 in a container, 127.0.0.1 for a local-only run). */
  host: string;
  /** DATABASE_URL: PostgreSQL (postgresql://user:password@host:5432/db); unset: no database. */
  databaseUrl: string | undefined;
  /** DATABASE_WAIT_MS: how long to wait for the database at start before giving up. */
  databaseWaitMs: number;
  /** SHUTDOWN_TIMEOUT_MS: how long in-flight calls get to finish after SIGTERM. */
  shutdownTimeoutMs: number;
  /** LOG_LEVEL: pino's level (trace, debug, info, warn, error, fatal). */
  logLevel: string;
};

const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0 || value > max)
    throw new Error(`${name}: expected an integer from 0 to ${max}, got "${raw}"`);
  return value;
}

export function readConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const databaseUrl = env.DATABASE_URL === "" ? undefined : env.DATABASE_URL;
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl))
    throw new Error("DATABASE_URL: expected postgresql://user:password@host:5432/database");
  const logLevel = env.LOG_LEVEL || "info";
  if (!LEVELS.includes(logLevel)) throw new Error(`LOG_LEVEL: expected one of ${LEVELS.join(", ")}, got "${logLevel}"`);
  return {
    port: integer(env, "PORT", 8080, 65535),
    host: env.HOST || "0.0.0.0",
    databaseUrl,
    databaseWaitMs: integer(env, "DATABASE_WAIT_MS", 60_000),
    shutdownTimeoutMs: integer(env, "SHUTDOWN_TIMEOUT_MS", 10_000),
    logLevel,
  };
}
