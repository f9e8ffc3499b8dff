/**
 * `GET /v1/usage`: the usage counters (src/control/usage.ts) for any key holder. An admin key
 * sees every key's usage; a user key only its own, so it may leave `key` out or name itself.
 * This gateway's own requests show at once; other gateways' within a second (they write theirs
 * once a second).
 */
import { Hono } from "hono";
import { listApiKeys } from "../control/apikeys.ts";
import type { Control } from "../control/redis.ts";
import { queryUsage } from "../control/usage.ts";
import { UsageQuery, type UsageReport, type UsageRow } from "../contracts/usage.ts";
import { PlatformError } from "../errors.ts";
import type { GatewayEnv } from "./env.ts";

export type UsageRoutesOptions = {
  /** Writes the counts this gateway has summed but not yet written (ratelimit.ts), so a caller reads its own requests at once. */
  flush?: () => Promise<void>;
};

export function usageRoutes(ctl: Control, options: UsageRoutesOptions = {}) {
  const app = new Hono<GatewayEnv>();

  app.get("/", async (c) => {
    const q = UsageQuery.parse(c.req.query());
    await options.flush?.();
    const me = c.get("apiKey");
    if (me.role !== "admin" && q.key !== undefined && q.key !== me.id) {
      throw new PlatformError(403, "permission_denied", "a user key sees only its own usage; leave `key` out or name this key's id", "key");
    }
    const key = me.role === "admin" ? q.key : me.id;
    const { from, to, rows } = await queryUsage(ctl, { sinceMs: q.since.ms, key, model: q.model, version: q.version, by: q.by, interval: q.interval });
    // Names help people read the table; a revoked key's usage stays, under its id alone.
    const names = q.by.includes("key") ? new Map((me.role === "admin" ? await listApiKeys(ctl) : [me]).map((k) => [k.id, k.name])) : new Map<string, string>();
    const data: UsageRow[] = rows.map(({ start, ...r }) => ({
      ...(r.key !== undefined ? { key: r.key, key_name: names.get(r.key) } : {}),
      ...(r.model !== undefined ? { model: r.model } : {}),
      ...(r.version !== undefined ? { version: r.version } : {}),
      ...(start !== undefined ? { start: new Date(start).toISOString() } : {}),
      requests: r.requests,
      prompt_tokens: r.prompt_tokens,
      completion_tokens: r.completion_tokens,
      total_tokens: r.prompt_tokens + r.completion_tokens,
      errors: r.errors,
      rate_limited: r.rate_limited,
    }));
    const report: UsageReport = {
      object: "usage",
      since: q.since.text,
      from: new Date(from).toISOString(),
      to: new Date(to).toISOString(),
      by: q.by,
      interval: q.interval ?? null,
      data,
    };
    return c.json(report);
  });

  return app;
}
