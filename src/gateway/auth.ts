/**
 * Who the bearer is: an API key (`sk-plat-…`) or a CLI token (`pt_…`, src/tokens/), one caller
 * either way (env.ts); and the checks management routes make of it: an organization's admin, an
 * operator.
 */
import type { Context, MiddlewareHandler } from "hono";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { isOperator } from "../contracts/orgs.ts";
import { verifyApiKey } from "../keys/store.ts";
import type { Control } from "../redis/connection.ts";
import { withinRedisWait } from "../redis/wait.ts";
import { isCliToken } from "../tokens/record.ts";
import { verifyToken } from "../tokens/store.ts";
import { CallerCache } from "./callers.ts";
import type { Caller, GatewayEnv } from "./env.ts";

/** The message an expired or revoked CLI token gets; the CLI shows it as it is. */
export function sessionExpired(c: Context): PlatformError {
  return new PlatformError(
    401,
    "token_expired",
    `session expired for ${new URL(c.req.url).origin}: run platform auth login`,
  );
}

/** The caller a bearer (API key or CLI token) is, or undefined; exported for the registry token route, whose credential comes in Basic auth. */
export async function verifyBearer(ctl: Control, bearer: string): Promise<Caller | undefined> {
  if (isCliToken(bearer)) {
    const verified = await verifyToken(ctl, bearer);
    if (!verified) return undefined;
    const { principal, record } = verified;
    return {
      kind: "token",
      ...principal,
      operator: isOperator(principal),
      token: { id: record.id, expires: record.expires },
    };
  }
  const key = await verifyApiKey(ctl, bearer);
  if (!key) return undefined;
  return {
    kind: "key",
    id: key.id,
    name: key.name,
    org: key.org,
    role: key.role,
    operator: isOperator(key),
    ...(key.limits ? { limits: key.limits } : {}),
  };
}

/**
 * verifyBearer, answered within REDIS_WAIT_MS: while Redis is away (and the gateway remembers no
 * caller, having lost its subscription: callers.ts), a request gets a 503 rather than waiting.
 */
async function verifyAnswering(ctl: Control, bearer: string): Promise<Caller | undefined> {
  try {
    return await withinRedisWait(verifyBearer(ctl, bearer), ctl.redis);
  } catch (e) {
    // ioredis' message names the Redis address: it stays in the gateway log.
    throw withDetail(
      new PlatformError(
        503,
        "queue_unavailable",
        "could not check the credential: Redis is unavailable, retry shortly",
        null,
        1,
      ),
      e,
    );
  }
}

/**
 * `callers`: the gateway's memory of verified callers, which revocations clear at once (callers.ts);
 * without one (or before it is started), every request is verified against Redis.
 */
export function requireCaller(ctl: Control, callers = new CallerCache(ctl)): MiddlewareHandler<GatewayEnv> {
  return async (c, next) => {
    const header = c.req.header("authorization");
    // Anthropic's clients send the key as `x-api-key`: the same platform keys.
    const bearer = (header?.match(/^Bearer\s+(.+)$/i)?.[1] ?? c.req.header("x-api-key"))?.trim();
    if (!bearer) {
      throw new PlatformError(
        401,
        "invalid_api_key",
        "You didn't provide an API key. Send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`); `platform keys create` makes one.",
      );
    }
    const caller = await callers.verify(bearer, () => verifyAnswering(ctl, bearer));
    if (!caller) {
      // Unknown, expired and revoked tokens read the same: nothing tells a guesser which.
      if (isCliToken(bearer)) throw sessionExpired(c);
      throw new PlatformError(
        401,
        "invalid_api_key",
        "Incorrect API key provided. `platform keys list` shows the keys that exist.",
      );
    }
    c.set("caller", caller);
    await next();
  };
}

/** An admin of its organization: manages that organization's keys, tokens, jobs and files. */
export function requireAdmin(): MiddlewareHandler<GatewayEnv> {
  return async (c, next) => {
    if (c.get("caller").role !== "admin") {
      throw new PlatformError(403, "permission_denied", "this operation needs an admin API key");
    }
    await next();
  };
}

/**
 * An operator (an admin of the install's own organization): what the install shares — models,
 * endpoints, autoscaling, A/B tests, scrape targets — and organizations themselves.
 */
export function requireOperator(): MiddlewareHandler<GatewayEnv> {
  return async (c, next) => {
    if (!c.get("caller").operator) {
      throw new PlatformError(
        403,
        "permission_denied",
        "this operation needs an operator: an admin key of the install's own organization (`default`)",
      );
    }
    await next();
  };
}
