/** Process settings from the environment, validated once at start-up. */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { describeIssues } from "./contracts/deployment.ts";

const Env = z.object({
  REDIS_URL: z.string().url().optional(),
  PLATFORM_PREFIX: z.string().regex(/^[a-z0-9_-]+$/i).default("platform"),
  PLATFORM_DATA_DIR: z.string().optional(),
  PLATFORM_ARTIFACTS_URL: z.string().optional(),
  PLATFORM_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(600_000),
  PLATFORM_MAX_BODY_BYTES: z.coerce.number().int().positive().default(8 * 1024 * 1024),
});

export type Settings = {
  redisUrl: string | undefined;
  prefix: string;
  dataDir: string;
  /** Artifact store root: a file:// URL or s3://bucket/prefix. */
  artifactsUrl: string;
  requestTimeoutMs: number;
  maxBodyBytes: number;
};

export function defaultDataDir(): string {
  const xdg = process.env.XDG_DATA_HOME;
  return join(xdg && xdg.length > 0 ? xdg : join(homedir(), ".local", "share"), "platform");
}

export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const parsed = Env.safeParse(env);
  if (!parsed.success) throw new Error(`invalid environment: ${describeIssues(parsed.error)}`);
  const e = parsed.data;
  const dataDir = e.PLATFORM_DATA_DIR ?? defaultDataDir();
  return {
    redisUrl: e.REDIS_URL,
    prefix: e.PLATFORM_PREFIX,
    dataDir,
    artifactsUrl: e.PLATFORM_ARTIFACTS_URL ?? `file://${join(dataDir, "artifacts")}`,
    requestTimeoutMs: e.PLATFORM_REQUEST_TIMEOUT_MS,
    maxBodyBytes: e.PLATFORM_MAX_BODY_BYTES,
  };
}
