/**
 * The registry-token section (docs/publish.md, "Registry tokens"): the key the gateway signs image
 * registry tokens with (Docker Distribution's token authentication), the issuer the registry is
 * told to trust, and how long a token lives. Without a key, the gateway issues none.
 */
import { z } from "zod";
import { optional, positiveMs } from "./parse.ts";

export const registryTokenShape = {
  /** A PEM EC P-256 private key; the registry's `auth.token.rootcertbundle` holds a certificate of its public key. */
  PLATFORM_REGISTRY_TOKEN_KEY: optional(z.string().min(1, "expected the path of a PEM EC P-256 private key")),
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
