/**
 * `GET /v1/usage`: the usage counters (src/usage/counters.ts) for any caller. An operator sees
 * every key's usage; an organization's admin its organization's keys' and users' (naming one of
 * another organization is the same 404 as naming none that exists); a user only its own, so it
 * may leave `key` out or name itself. This gateway's own requests show at once; other gateways'
 * within a second (they write theirs once a second).
 */
import { Hono } from "hono";
import { listApiKeys } from "../../keys/store.ts";
import { listUsers } from "../../users/store.ts";
import type { Control } from "../../redis/connection.ts";
import { queryUsage } from "../../usage/counters.ts";
import { UsageQuery, type UsageReport, type UsageRow } from "../../usage/query.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { GatewayEnv } from "../env.ts";

export type UsageRoutesOptions = {
  /** Writes the counts this gateway has summed but not yet written (ratelimit.ts), so a caller reads its own requests at once. */
  flush?: () => Promise<void>;
};

export function usageRoutes(ctl: Control, options: UsageRoutesOptions = {}) {
  const app = new Hono<GatewayEnv>();

  app.get("/", async (c) => {
    const q = UsageQuery.parse(c.req.query());
    await options.flush?.();
    const me = c.get("caller");
    if (me.role !== "admin" && q.key !== undefined && q.key !== me.id) {
      throw new PlatformError(
        403,
        "permission_denied",
        "a user key sees only its own usage; leave `key` out or name this key's id",
        "key",
      );
    }
    // Whose rows an organization's admin may read, and names to help people read the table. A
    // revoked key's usage stays, under its id alone (and, its organization no longer known, for
    // operators alone). An operator needs the names only to show them.
    const org = me.operator ? undefined : me.org;
    const named: { id: string; name: string }[] =
      me.role !== "admin"
        ? [me]
        : org !== undefined || q.by.includes("key")
          ? [...(await listApiKeys(ctl, org)), ...(await listUsers(ctl, org))]
          : [];
    const names = new Map(named.map((k) => [k.id, k.name]));
    if (!me.operator && q.key !== undefined && !names.has(q.key))
      throw new PlatformError(404, "key_not_found", `no API key or user with id "${q.key}"`, "key");
    const { from, to, rows } = await queryUsage(ctl, {
      sinceMs: q.since.ms,
      key: me.role === "admin" ? q.key : me.id,
      ...(me.operator ? {} : { keys: new Set(names.keys()) }),
      model: q.model,
      version: q.version,
      by: q.by,
      interval: q.interval,
    });
    const data: UsageRow[] = rows.map(({ start, ...r }) => ({
      ...(r.key !== undefined ? { key: r.key, key_name: names.get(r.key) } : {}),
      ...(r.model !== undefined ? { model: r.model } : {}),
      ...(r.version !== undefined ? { version: r.version } : {}),
      ...(start !== undefined ? { start: new Date(start).toISOString() } : {}),
      requests: r.requests,
      prompt_tokens: r.prompt_tokens,
      cached_tokens: r.cached_tokens,
      completion_tokens: r.completion_tokens,
      total_tokens: r.prompt_tokens + r.completion_tokens,
      errors: r.errors,
      rate_limited: r.rate_limited,
      images: r.images,
      steps: r.steps,
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
