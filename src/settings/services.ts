/**
 * The services section (docs/services.md): the key secrets are sealed with, where the local
 * backend keeps pulled images, the credentials it pulls them with, and how long a rollout's new
 * replicas may take to become ready.
 */
import { join } from "node:path";
import { z } from "zod";
import { Flag, optional, positiveMs } from "./parse.ts";

export const servicesShape = {
  /**
   * 32 bytes, base64 or 64 hex digits: seals services' secrets (AES-256-GCM). Unset: a key
   * generated once into `<data dir>/secrets.key` (mode 0600), which every process of one install shares.
   */
  PLATFORM_SECRETS_KEY: optional(
    z
      .string()
      .refine(
        (v) => /^[0-9a-fA-F]{64}$/.test(v) || Buffer.from(v, "base64").length === 32,
        "expected 32 bytes as base64 (openssl rand -base64 32) or 64 hex digits",
      ),
  ),
  /** Where the local backend keeps pulled images and their unpacked root filesystems. */
  PLATFORM_IMAGE_CACHE_DIR: optional(z.string().min(1)),
  /** A containers auth file (auth.json, as `buildah login` writes) the local backend pulls with. */
  PLATFORM_IMAGE_PULL_AUTH_FILE: optional(z.string().min(1)),
  /** How long a rollout's new replicas may take to become ready before it fails. */
  PLATFORM_ROLLOUT_DEADLINE_MS: positiveMs(120_000),
  /**
   * How the local backend runs images: `auto` (docker or podman where one answers `info`, else
   * unshare), or one of them outright.
   */
  PLATFORM_SERVICE_RUNTIME: z
    .enum(["auto", "unshare", "docker", "podman"], { message: 'expected "auto", "unshare", "docker" or "podman"' })
    .default("auto"),
  /**
   * Whether an image that names root (or no user) runs as root, in its own user namespace, still
   * without capabilities; by default it runs as the unprivileged id 65534 (docs/security.md).
   */
  PLATFORM_SERVICE_ALLOW_ROOT: Flag,
  /**
   * Ports of the host's loopback that services on the local backend may reach (a local database,
   * say), comma-separated; none by default: a replica's network has its loopback alone.
   */
  PLATFORM_SERVICE_HOST_PORTS: z
    .string()
    .default("")
    .transform((text, ctx) => {
      const items = text
        .split(",")
        .map((t) => t.trim())
        .filter((t) => t !== "");
      const bad = items.filter((t) => !/^\d{1,5}$/.test(t) || Number(t) < 1 || Number(t) > 65535);
      if (bad.length > 0)
        ctx.addIssue({
          code: "custom",
          message: `expected ports from 1 to 65535, comma-separated; not ${bad.join(", ")}`,
        });
      return [...new Set(items.map(Number))];
    }),
};

export type ServicesSettings = {
  /** The raw key, when given; else `keyFile`. */
  secretsKey: Buffer | undefined;
  secretsKeyFile: string;
  imageCacheDir: string;
  pullAuthFile: string | undefined;
  rolloutDeadlineMs: number;
  runtime: "auto" | "unshare" | "docker" | "podman";
  allowRoot: boolean;
  hostPorts: number[];
  /**
   * In a pod (POD_NAME set, as deploy/ sets it), a key must be given: each pod's data directory is
   * its own, so generated keys would differ between the gateways that seal and the scaler that opens.
   */
  keyRequired: boolean;
};

export function servicesSettings(
  e: z.infer<z.ZodObject<typeof servicesShape>>,
  dataDir: string,
  inPod: boolean,
): ServicesSettings {
  const raw = e.PLATFORM_SECRETS_KEY;
  return {
    secretsKey:
      raw === undefined
        ? undefined
        : /^[0-9a-fA-F]{64}$/.test(raw)
          ? Buffer.from(raw, "hex")
          : Buffer.from(raw, "base64"),
    secretsKeyFile: join(dataDir, "secrets.key"),
    imageCacheDir: e.PLATFORM_IMAGE_CACHE_DIR ?? join(dataDir, "images"),
    pullAuthFile: e.PLATFORM_IMAGE_PULL_AUTH_FILE,
    rolloutDeadlineMs: e.PLATFORM_ROLLOUT_DEADLINE_MS,
    runtime: e.PLATFORM_SERVICE_RUNTIME,
    allowRoot: e.PLATFORM_SERVICE_ALLOW_ROOT,
    hostPorts: e.PLATFORM_SERVICE_HOST_PORTS,
    keyRequired: inPod,
  };
}
