/** Bearer-token authentication and the admin check for management routes. */
import type { MiddlewareHandler } from "hono";
import type { ApiKeyRecord } from "../contracts/records.ts";
import { verifyApiKey } from "../control/apikeys.ts";
import type { Control } from "../control/redis.ts";
import { PlatformError } from "../errors.ts";
import type { GatewayEnv } from "./env.ts";

/**
 * Verified keys are remembered briefly so the hot path skips two Redis round
 * trips; a revoked key therefore stops working within KEY_CACHE_MS.
 */
const KEY_CACHE_MS = 5000;

export function requireApiKey(ctl: Control): MiddlewareHandler<GatewayEnv> {
  const cache = new Map<string, { record: ApiKeyRecord; until: number }>();
  const verify = async (token: string) => {
    const hit = cache.get(token);
    if (hit && hit.until > Date.now()) return hit.record;
    const record = await verifyApiKey(ctl, token);
    if (record) {
      if (cache.size > 10_000) cache.clear();
      cache.set(token, { record, until: Date.now() + KEY_CACHE_MS });
    } else cache.delete(token);
    return record;
  };
  return async (c, next) => {
    const header = c.req.header("authorization");
    const match = header?.match(/^Bearer\s+(.+)$/i);
    if (!match?.[1]) {
      throw new PlatformError(401, "invalid_api_key", "You didn't provide an API key. Send it as `Authorization: Bearer <key>`; `platform keys create` makes one.");
    }
    const record = await verify(match[1].trim());
    if (!record) throw new PlatformError(401, "invalid_api_key", "Incorrect API key provided. `platform keys list` shows the keys that exist.");
    c.set("apiKey", record);
    await next();
  };
}

export const requireAdmin: MiddlewareHandler<GatewayEnv> = async (c, next) => {
  if (c.get("apiKey").role !== "admin") {
    throw new PlatformError(403, "permission_denied", "this operation needs an admin API key");
  }
  await next();
};
