/** Process settings from the environment, validated once at start-up. */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { describeIssues } from "./contracts/deployment.ts";
import { redisOptionsFromUrl } from "./control/redis.ts";
import { parseStorageRoots, type StorageRoot } from "./storage/policy.ts";
import { parseCidr } from "./registry/addresses.ts";
import { DEFAULT_HF_ENDPOINT, type SourcePolicy } from "./registry/sources.ts";

/** "true"/"false" (or 1/0): z.coerce.boolean would read "false" as true. */
const Flag = z.enum(["true", "false", "1", "0", ""]).default("false").transform((v) => v === "true" || v === "1");

const Env = z.object({
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
  PLATFORM_PREFIX: z.string().regex(/^[a-z0-9_-]+$/i).default("platform"),
  PLATFORM_DATA_DIR: z.string().optional(),
  PLATFORM_ARTIFACTS_URL: z.string().optional(),
  PLATFORM_STORAGE_ROOTS: z.string().optional(),
  PLATFORM_ADMIN_STORAGE_ROOTS: z.string().optional(),
  PLATFORM_REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(600_000),
  PLATFORM_DRAIN_TIMEOUT_MS: z.coerce.number().int().nonnegative().default(30_000),
  PLATFORM_REDIS_GRACE_MS: z.coerce.number().int().positive().default(5_000),
  PLATFORM_MAX_REQUEST_BYTES: z.coerce.number().int().positive().optional(),
  /** The old name of PLATFORM_MAX_REQUEST_BYTES, still honoured when the new one is unset. */
  PLATFORM_MAX_BODY_BYTES: z.coerce.number().int().positive().optional(),
  PLATFORM_MAX_FILE_BYTES: z.coerce.number().int().positive().default(512 * 1024 * 1024),
  PLATFORM_MAX_MODEL_BYTES: z.coerce.number().int().positive().default(64 * 1024 ** 3),
  PLATFORM_SOURCES_ALLOW_HTTP: Flag,
  PLATFORM_SOURCES_ALLOW_PRIVATE: Flag,
  PLATFORM_SOURCES_ALLOWED_HOSTS: z.string().default("").transform((text, ctx) => {
    const items = text.split(",").map((t) => t.trim()).filter((t) => t !== "");
    const bad = items.filter((t) => !parseCidr(t));
    if (bad.length > 0) ctx.addIssue({ code: "custom", message: `expected comma-separated addresses or CIDRs (10.0.0.0/8, fd00::/8), got "${bad.join(", ")}"` });
    return items.map((t) => parseCidr(t)!).filter((c) => c !== undefined);
  }),
  PLATFORM_SOURCES_TIMEOUT_MS: z.coerce.number().int().positive().default(4 * 3600_000),
  PLATFORM_SOURCES_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(60_000),
  /** Sent with hf:// downloads, to HF_ENDPOINT's origin only. */
  HF_TOKEN: z.string().min(1).optional(),
  /** huggingface_hub's name and meaning: the Hub or a mirror; hf:// sources resolve there, and HF_TOKEN goes only there. */
  HF_ENDPOINT: z
    .string()
    .default(DEFAULT_HF_ENDPOINT)
    .refine((text) => {
      const u = URL.canParse(text) ? new URL(text) : undefined;
      return u !== undefined && (u.protocol === "https:" || u.protocol === "http:") && !u.username && !u.password && !u.search && !u.hash;
    }, "expected the http(s) base URL of the Hugging Face Hub or a mirror, without credentials, query or fragment (https://huggingface.co)")
    .transform((text) => text.replace(/\/+$/, "")),
});

export type Settings = {
  redisUrl: string | undefined;
  prefix: string;
  dataDir: string;
  /** Artifact store root: a file:// URL or s3://bucket/prefix. */
  artifactsUrl: string;
  /** Where client-named batch URIs may point (PLATFORM_STORAGE_ROOTS); a user key gets `<root>/<key id>/` of each. */
  storageRoots: StorageRoot[];
  /** Further roots for admin keys only (PLATFORM_ADMIN_STORAGE_ROOTS). */
  adminStorageRoots: StorageRoot[];
  requestTimeoutMs: number;
  /** How long a stopping worker may finish its generations before they are aborted and requeued. */
  drainTimeoutMs: number;
  /** How long a worker started by `up` waits for an unreachable Redis before it exits. */
  redisGraceMs: number;
  /** Body limit of the JSON API routes (chat, completions, generate, embeddings, management). */
  maxRequestBytes: number;
  /** Body limit of `POST /v1/files` uploads. */
  maxFileBytes: number;
  /** Size limit of a model artifact, uploaded or downloaded from a remote source. */
  maxModelBytes: number;
  /** What remote model sources may reach, how big and how slow they may be (PLATFORM_SOURCES_*). */
  sources: SourcePolicy;
  /** The operator's first admin key (a Secret), registered by its hash at start: `platform keys bootstrap`. */
  bootstrapAdminKey: string | undefined;
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
    redisUrl: e.REDIS_URL && e.REDIS_PASSWORD ? withPassword(e.REDIS_URL, e.REDIS_PASSWORD) : e.REDIS_URL,
    prefix: e.PLATFORM_PREFIX,
    dataDir,
    artifactsUrl: e.PLATFORM_ARTIFACTS_URL ?? `file://${join(dataDir, "artifacts")}`,
    storageRoots: parseStorageRoots(e.PLATFORM_STORAGE_ROOTS, "PLATFORM_STORAGE_ROOTS"),
    adminStorageRoots: parseStorageRoots(e.PLATFORM_ADMIN_STORAGE_ROOTS, "PLATFORM_ADMIN_STORAGE_ROOTS"),
    requestTimeoutMs: e.PLATFORM_REQUEST_TIMEOUT_MS,
    drainTimeoutMs: e.PLATFORM_DRAIN_TIMEOUT_MS,
    redisGraceMs: e.PLATFORM_REDIS_GRACE_MS,
    // Small by default: a JSON request holds a prompt, and whatever it holds is copied into Redis.
    maxRequestBytes: e.PLATFORM_MAX_REQUEST_BYTES ?? e.PLATFORM_MAX_BODY_BYTES ?? 2 * 1024 * 1024,
    maxFileBytes: e.PLATFORM_MAX_FILE_BYTES,
    maxModelBytes: e.PLATFORM_MAX_MODEL_BYTES,
    sources: {
      allowHttp: e.PLATFORM_SOURCES_ALLOW_HTTP,
      allowPrivate: e.PLATFORM_SOURCES_ALLOW_PRIVATE,
      allowedCidrs: e.PLATFORM_SOURCES_ALLOWED_HOSTS,
      maxBytes: e.PLATFORM_MAX_MODEL_BYTES,
      totalTimeoutMs: e.PLATFORM_SOURCES_TIMEOUT_MS,
      idleTimeoutMs: e.PLATFORM_SOURCES_IDLE_TIMEOUT_MS,
      maxRedirects: 5,
      hfEndpoint: e.HF_ENDPOINT,
      hfToken: e.HF_TOKEN,
    },
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
