/** The core section: Redis, the data directory, artifact and batch storage roots, timeouts and body limits. */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { redisOptionsFromUrl } from "../redis/connection.ts";
import { parseStorageRoots, type StorageRoot } from "../storage/policy.ts";
import { optional } from "./parse.ts";

export const coreShape = {
  REDIS_URL: z
    .string()
    .optional()
    .superRefine((url, ctx) => {
      if (url === undefined) return;
      try {
        redisOptionsFromUrl(url);
      } catch (e) {
        ctx.addIssue({ code: "custom", message: (e as Error).message });
      }
    }),
  /** Kept apart from REDIS_URL so a Kubernetes secretKeyRef can supply it without the URL being a secret. */
  REDIS_PASSWORD: z.string().min(1).optional(),
  PLATFORM_BOOTSTRAP_ADMIN_KEY: z.string().min(1).optional(),
  PLATFORM_PREFIX: z
    .string()
    .regex(/^[a-z0-9_-]+$/i, "expected letters, digits, _ or - (e.g. platform)")
    .default("platform"),
  PLATFORM_DATA_DIR: z.string().optional(),
  /** Only for the default data directory, as the XDG base-directory spec says. */
  XDG_DATA_HOME: optional(z.string()),
  PLATFORM_ARTIFACTS_URL: z.string().optional(),
  PLATFORM_STORAGE_ROOTS: z.string().optional(),
  PLATFORM_ADMIN_STORAGE_ROOTS: z.string().optional(),
  PLATFORM_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(600_000),
  PLATFORM_DRAIN_TIMEOUT_MS: z.coerce.number().int().nonnegative().default(30_000),
  PLATFORM_MAX_REQUEST_BYTES: z.coerce.number().int().positive().optional(),
  /** The old name of PLATFORM_MAX_REQUEST_BYTES, still honoured when the new one is unset. */
  PLATFORM_MAX_BODY_BYTES: z.coerce.number().int().positive().optional(),
  PLATFORM_MAX_FILE_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(512 * 1024 * 1024),
  PLATFORM_MAX_MODEL_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(64 * 1024 ** 3),
};

type CoreEnv = z.infer<z.ZodObject<typeof coreShape>>;

/** Top-level fields rather than a section: every role and most tests use them, under these names since the start. */
export type CoreSettings = {
  redisUrl: string | undefined;
  prefix: string;
  dataDir: string;
  /** Artifact store root: a file:// URL or s3://bucket/prefix. */
  artifactsUrl: string;
  /** Where client-named batch URIs may point (PLATFORM_STORAGE_ROOTS); a user key gets `<root>/<key id>/` of each. */
  storageRoots: StorageRoot[];
  /** Further roots for operators only (admins of the install's own organization; PLATFORM_ADMIN_STORAGE_ROOTS). */
  adminStorageRoots: StorageRoot[];
  requestTimeoutMs: number;
  /** How long a stopping worker may finish its generations before they are aborted and requeued. */
  drainTimeoutMs: number;
  /** Body limit of the JSON API routes (chat, completions, generate, embeddings, management). */
  maxRequestBytes: number;
  /** Body limit of `POST /v1/files` uploads. */
  maxFileBytes: number;
  /** Size limit of a model artifact, uploaded or downloaded from a remote source. */
  maxModelBytes: number;
  /** The operator's first admin key (a Secret), registered by its hash at start: `platform keys bootstrap`. */
  bootstrapAdminKey: string | undefined;
};

/**
 * PLATFORM_DATA_DIR, else `$XDG_DATA_HOME/platform`, else `~/.local/share/platform`. Also read
 * straight from the environment by client commands that keep files there (the benchmark's reports).
 */
export function dataDirOf(e: { PLATFORM_DATA_DIR?: string; XDG_DATA_HOME?: string }): string {
  return e.PLATFORM_DATA_DIR ?? join(e.XDG_DATA_HOME || join(homedir(), ".local", "share"), "platform");
}

export function coreSettings(e: CoreEnv): CoreSettings {
  const dataDir = dataDirOf(e);
  return {
    redisUrl: e.REDIS_URL && e.REDIS_PASSWORD ? withPassword(e.REDIS_URL, e.REDIS_PASSWORD) : e.REDIS_URL,
    prefix: e.PLATFORM_PREFIX,
    dataDir,
    artifactsUrl: e.PLATFORM_ARTIFACTS_URL ?? `file://${join(dataDir, "artifacts")}`,
    storageRoots: parseStorageRoots(e.PLATFORM_STORAGE_ROOTS, "PLATFORM_STORAGE_ROOTS"),
    adminStorageRoots: parseStorageRoots(e.PLATFORM_ADMIN_STORAGE_ROOTS, "PLATFORM_ADMIN_STORAGE_ROOTS"),
    requestTimeoutMs: e.PLATFORM_REQUEST_TIMEOUT_MS,
    drainTimeoutMs: e.PLATFORM_DRAIN_TIMEOUT_MS,
    // Small by default: a JSON request holds a prompt, and whatever it holds is copied into Redis.
    maxRequestBytes: e.PLATFORM_MAX_REQUEST_BYTES ?? e.PLATFORM_MAX_BODY_BYTES ?? 2 * 1024 * 1024,
    maxFileBytes: e.PLATFORM_MAX_FILE_BYTES,
    maxModelBytes: e.PLATFORM_MAX_MODEL_BYTES,
    bootstrapAdminKey: e.PLATFORM_BOOTSTRAP_ADMIN_KEY,
  };
}

/** REDIS_URL with REDIS_PASSWORD filled in, unless the URL carries a password already. */
function withPassword(redisUrl: string, password: string): string {
  // By hand, not with URL(): a Sentinel URL lists several hosts. `user@` keeps its user.
  const m = /^([a-z+]+:\/\/)(?:([^:@/]*)(:[^@/]*)?@)?(.*)$/i.exec(redisUrl);
  if (!m || m[3]) return redisUrl;
  return `${m[1]}${m[2] ?? ""}:${encodeURIComponent(password)}@${m[4]}`;
}
