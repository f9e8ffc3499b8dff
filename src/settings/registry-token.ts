/**
 * The registry-token section (docs/publish.md, "Registry tokens"): the key the gateway signs image
 * registry tokens with (Docker Distribution's token authentication), the issuer the registry is
 * told to trust, and how long a token lives. Without a key, the gateway issues none.
 */
import { z } from "zod";
import { optional, positiveMs } from "./parse.ts";
import { looksLikeKeyMaterial } from "./secrets.ts";

export const registryTokenShape = {
  /** A PEM EC P-256 private key; the registry's `auth.token.rootcertbundle` holds a certificate of its public key. */
  // The key's path, never the key: a value holding key material is refused without being shown.
  PLATFORM_REGISTRY_TOKEN_KEY: optional(
    z
      .string()
      .min(1, "expected the path of a PEM EC P-256 private key")
      .refine(
        (v) => !looksLikeKeyMaterial(v) && !/[\r\n]/.test(v) && v.length <= 4096,
        "expected the path of a PEM EC P-256 private key file, not the key itself (the value is not shown); mount the key as a file and name its path",
      ),
  ),
  PLATFORM_REGISTRY_TOKEN_ISSUER: z.string().min(1, "expected the issuer name the registry trusts").default("platform"),
  PLATFORM_REGISTRY_TOKEN_TTL_MS: positiveMs(5 * 60_000),
};

export type RegistryTokenSettings = { keyFile: string | undefined; issuer: string; ttlMs: number };

export function registryTokenSettings(e: z.infer<z.ZodObject<typeof registryTokenShape>>): RegistryTokenSettings {
  return {
    keyFile: e.PLATFORM_REGISTRY_TOKEN_KEY,
    issuer: e.PLATFORM_REGISTRY_TOKEN_ISSUER,
    ttlMs: e.PLATFORM_REGISTRY_TOKEN_TTL_MS,
  };
}
