/**
 * Who the bearer is, and CLI tokens (src/tokens/), under /admin/v1 for any caller:
 *
 *   GET    /whoami          → the caller: kind, id, name, org, role, operator (a token's id and expiry too)
 *   GET    /tokens          → {data: [sessions]}: a user's own, an organization admin's organization's, an operator's all
 *   DELETE /tokens/:id      → {revoked: record}: one it could list; any other is a 404
 *   POST   /tokens/refresh  {refresh_token} → a new pair (no bearer: the refresh token is the credential)
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { OrgId } from "../../contracts/orgs.ts";
import type { Control } from "../../redis/connection.ts";
import { getToken, listTokens, refreshToken, revokeToken, type TokenLifetimes } from "../../tokens/store.ts";
import { TokenId, type TokenRecord } from "../../tokens/record.ts";
import { logger } from "../../telemetry/log.ts";
import { sessionExpired } from "../auth.ts";
import type { Caller, GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

const log = logger("gateway");

export const RefreshBody = z.object({ refresh_token: z.string().min(1).max(200) }).strict();
const ListQuery = z.object({ org: OrgId.optional() }).strict();

export type TokenRouteDeps = { ctl: Control; lifetimes: TokenLifetimes };

/** The sessions `me` may see and revoke: its own; its organization's for an admin; all for an operator. */
function mayManage(me: Caller, token: TokenRecord): boolean {
  return me.operator || (token.org === me.org && (me.role === "admin" || token.subject.id === me.id));
}

export function tokenRoutes({ ctl }: TokenRouteDeps) {
  const app = new Hono<GatewayEnv>();

  app.get("/whoami", (c) => c.json({ object: "caller", ...c.get("caller") }));

  app.get("/tokens", async (c) => {
    const me = c.get("caller");
    const query = ListQuery.parse(c.req.query());
    const org = me.operator ? query.org : me.org;
    const data = (await listTokens(ctl, org === undefined ? {} : { org })).filter((t) => mayManage(me, t));
    return c.json({ data });
  });

  app.delete("/tokens/:id", async (c) => {
    const id = pathParam(c, "id", TokenId);
    const found = await getToken(ctl, id);
    if (!found || !mayManage(c.get("caller"), found))
      throw new PlatformError(404, "token_not_found", `no token "${id}"; GET /admin/v1/tokens lists yours`, "id");
    const revoked = await revokeToken(ctl, id);
    return c.json({ revoked: revoked ?? found });
  });

  return app;
}

/** Mounted before authentication: whoever holds a live refresh token may trade it, and no one else. */
export function tokenRefreshRoutes({ ctl, lifetimes }: TokenRouteDeps) {
  const app = new Hono<GatewayEnv>();
  app.post("/", async (c) => {
    const body = await parseBody(c, RefreshBody);
    const result = await refreshToken(ctl, body.refresh_token, lifetimes);
    if (!result.ok) {
      // The reason is for the operator's log; the client hears only that its session is over.
      log.info(
        { request_id: c.get("requestId"), reason: result.reason, token_id: result.id },
        `token refresh refused: ${result.reason}`,
      );
      throw sessionExpired(c);
    }
    const { record, ...grant } = result.grant;
    return c.json({ object: "token", ...grant, org: record.org, role: record.role, subject: record.subject });
  });
  return app;
}
