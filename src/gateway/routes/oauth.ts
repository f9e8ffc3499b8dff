/**
 * The gateway's authorization server endpoints for the CLI (docs/signin.md), without a bearer: the
 * sign-in is the credential.
 *
 *   POST /auth/token        grant_type=authorization_code (code, redirect_uri, code_verifier) or
 *                           urn:ietf:params:oauth:grant-type:device_code (device_code); client_id=platform-cli
 *                           → the platform's token pair (RFC 6749 §5.1 fields, and the platform's own)
 *   POST /auth/device/code  client_id=platform-cli → device_code, user_code, verification_uri, interval (RFC 8628 §3.2)
 *
 * Bodies are application/x-www-form-urlencoded and errors RFC 6749 §5.2's `{error, error_description}`.
 * A refused code says `invalid_grant` whatever the reason (unknown, spent, another client's, another
 * redirect URI's, a wrong verifier): the reason is logged with the request id, for the operator.
 */
import type { Context } from "hono";
import { Hono } from "hono";
import { exchangeCode } from "../../signin/codes.ts";
import { pollDevice, startDevice } from "../../signin/devices.ts";
import { CLI_CLIENT_ID, DEVICE_GRANT } from "../../signin/oauth.ts";
import { logger } from "../../telemetry/log.ts";
import type { TokenGrant, TokenRecord } from "../../tokens/record.ts";
import type { GatewayEnv } from "../env.ts";
import { allowOpenFrom } from "../../signin/per-client.ts";
import { baseUrlOf, formFields, requestAddress, type SigninDeps } from "./signin.ts";

const log = logger("signin");

const INVALID_GRANT =
  "the code is not valid: unknown, expired or already used, or not this client's, redirect URI's or code verifier's; run platform auth login again";

type OAuthError =
  | "invalid_request"
  | "invalid_client"
  | "invalid_grant"
  | "unsupported_grant_type"
  | "authorization_pending"
  | "slow_down"
  | "expired_token"
  | "access_denied"
  | "temporarily_unavailable";

function oauthError(c: Context, status: 400 | 401 | 429 | 503, error: OAuthError, description: string, extra = {}) {
  return c.json({ error, error_description: description, ...extra }, status);
}

/** A refusal the client hears as `error`, logged with its real reason. */
function refused(c: Context<GatewayEnv>, reason: string, what: string): void {
  log.warn({ request_id: c.get("requestId"), reason }, `${what} refused: ${reason}`);
}

function tokenResponse(c: Context, grant: TokenGrant & { record: TokenRecord }) {
  const { record } = grant;
  return c.json({
    access_token: grant.token,
    token_type: "Bearer",
    expires_in: Math.max(0, Math.floor((grant.expires - Date.now()) / 1000)),
    refresh_token: grant.refresh_token,
    id: grant.id,
    expires: grant.expires,
    refresh_expires: grant.refresh_expires,
    name: record.name,
    org: record.org,
    role: record.role,
    subject: record.subject,
  });
}

export function oauthRoutes(deps: SigninDeps) {
  const { ctl, lifetimes, publicUrl } = deps;
  const app = new Hono<GatewayEnv>();
  // RFC 6749 §5.1: nothing here is ever cached.
  app.use(async (c, next) => {
    await next();
    c.header("cache-control", "no-store");
    c.header("pragma", "no-cache");
  });

  app.post("/token", async (c) => {
    const form = await formFields(c);
    if (!form) return oauthError(c, 400, "invalid_request", "expected an application/x-www-form-urlencoded body");
    if (form.client_id !== CLI_CLIENT_ID) {
      refused(c, "unknown_client", "token request");
      return oauthError(c, 401, "invalid_client", `unknown client; the platform CLI is "${CLI_CLIENT_ID}"`);
    }
    if (form.grant_type === "authorization_code") {
      if (!form.code || !form.redirect_uri)
        return oauthError(c, 400, "invalid_request", "code and redirect_uri are required");
      const result = await exchangeCode(
        ctl,
        {
          code: form.code,
          client_id: form.client_id,
          redirect_uri: form.redirect_uri,
          code_verifier: form.code_verifier,
        },
        lifetimes,
      );
      if (!result.ok) {
        refused(c, result.reason, "token request");
        return oauthError(c, 400, "invalid_grant", INVALID_GRANT);
      }
      log.info(
        { request_id: c.get("requestId"), token_id: result.grant.id },
        `token ${result.grant.id} issued to the CLI for ${result.grant.record.subject.kind} ${result.grant.record.subject.id} (${result.grant.record.org})`,
      );
      return tokenResponse(c, result.grant);
    }
    if (form.grant_type === DEVICE_GRANT) {
      if (!form.device_code) return oauthError(c, 400, "invalid_request", "device_code is required");
      const poll = await pollDevice(ctl, form.device_code, lifetimes);
      switch (poll.status) {
        case "approved":
          log.info(
            { request_id: c.get("requestId"), token_id: poll.grant.id },
            `token ${poll.grant.id} issued to a device for ${poll.grant.record.subject.kind} ${poll.grant.record.subject.id} (${poll.grant.record.org})`,
          );
          return tokenResponse(c, poll.grant);
        case "authorization_pending":
          return oauthError(c, 400, "authorization_pending", "not approved yet: keep polling at the interval");
        case "slow_down":
          return oauthError(c, 400, "slow_down", "polled too soon: the interval is now longer", {
            interval: poll.intervalMs / 1000,
          });
        case "expired_token":
          return oauthError(c, 400, "expired_token", "the code expired before it was approved; start again");
        case "access_denied":
          return oauthError(c, 400, "access_denied", "the sign-in was denied in the browser");
        default:
          refused(c, poll.status === "unknown" ? "unknown_device_code" : poll.status, "device token request");
          return oauthError(c, 400, "invalid_grant", "the device code is not valid; start again");
      }
    }
    return oauthError(
      c,
      400,
      "unsupported_grant_type",
      `expected grant_type authorization_code or ${DEVICE_GRANT} (refreshing: POST /admin/v1/tokens/refresh)`,
    );
  });

  app.post("/device/code", async (c) => {
    const form = await formFields(c);
    if (!form) return oauthError(c, 400, "invalid_request", "expected an application/x-www-form-urlencoded body");
    if (form.client_id !== CLI_CLIENT_ID) {
      refused(c, "unknown_client", "device authorization");
      return oauthError(c, 401, "invalid_client", `unknown client; the platform CLI is "${CLI_CLIENT_ID}"`);
    }
    const verdict = await allowOpenFrom(ctl, requestAddress(c, deps.proxyHops), deps.opensPerMinute);
    if (verdict !== "allowed") {
      // Once per address and minute: a flood does not flood the log.
      if (verdict === "refused-first") refused(c, "too_many_from_client", "device authorization");
      c.header("retry-after", "60");
      return oauthError(
        c,
        429,
        "temporarily_unavailable",
        "too many sign-ins were started from this address; try again in a minute",
      );
    }
    const started = await startDevice(ctl);
    if (!started) {
      refused(c, "too_many_open", "device authorization");
      return oauthError(c, 503, "temporarily_unavailable", "too many sign-ins are in progress; try again in a minute");
    }
    const verification = `${baseUrlOf(c, publicUrl)}/auth/device`;
    return c.json({
      ...started,
      verification_uri: verification,
      verification_uri_complete: `${verification}?user_code=${encodeURIComponent(started.user_code)}`,
    });
  });

  return app;
}
