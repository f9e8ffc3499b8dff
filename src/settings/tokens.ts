/**
 * The tokens section: how long a CLI token works (PLATFORM_TOKEN_TTL_MS, 12 h) and how long after
 * its sign-in a session may still be refreshed (PLATFORM_REFRESH_TOKEN_TTL_MS, 30 days), as
 * `gcloud` and `gh` sessions behave: short-lived bearers, a sign-in that lasts.
 */
import type { z } from "zod";
import { positiveMs } from "./parse.ts";

export const tokensShape = {
  PLATFORM_TOKEN_TTL_MS: positiveMs(12 * 3_600_000),
  PLATFORM_REFRESH_TOKEN_TTL_MS: positiveMs(30 * 86_400_000),
};

type TokensEnv = z.infer<z.ZodObject<typeof tokensShape>>;

export type TokenSettings = { ttlMs: number; refreshTtlMs: number };

/** A session that ends before its first token expires would make refreshing pointless: refused at start. */
export function checkTokens(e: TokensEnv, ctx: z.RefinementCtx): void {
  if (e.PLATFORM_REFRESH_TOKEN_TTL_MS < e.PLATFORM_TOKEN_TTL_MS)
    ctx.addIssue({
      code: "custom",
      path: ["PLATFORM_REFRESH_TOKEN_TTL_MS"],
      message: `expected at least PLATFORM_TOKEN_TTL_MS (${e.PLATFORM_TOKEN_TTL_MS})`,
    });
}

export function tokenSettings(e: TokensEnv): TokenSettings {
  return { ttlMs: e.PLATFORM_TOKEN_TTL_MS, refreshTtlMs: e.PLATFORM_REFRESH_TOKEN_TTL_MS };
}
