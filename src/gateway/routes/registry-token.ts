/**
 * The image registry's token server (docs/publish.md, "Registry tokens"): Docker Distribution's
 * token authentication, for a registry configured with `auth.token.realm` pointing here. Builders
 * send Basic auth whose password is a platform credential (a CLI token, as `platform registry
 * login` stores it, or an API key); the answer is a short-lived JWT granting pull and push under
 * the caller's organization's repositories (`<org>/...`) only (src/container-images/registry-token.ts).
 *
 *   GET /auth/registry-token?service=<registry>&scope=repository:<org>/<name>:pull,push[&scope=…]
 *     → {token, access_token, expires_in, issued_at}; 401 with a Basic challenge for no or bad credentials
 *
 * The scaler's pull grants (user `platform-pull-grant`, src/registry-credentials/grant.ts) are the
 * other credential: they get pull, on the repositories they name, and nothing else.
 *
 * Without PLATFORM_REGISTRY_TOKEN_KEY the route answers 404 registry_tokens_off.
 */
import { Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import { grantedAccess, signRegistryToken } from "../../container-images/registry-token.ts";
import {
  GRANT_AUDIENCE,
  GRANT_USERNAME,
  grantAccess,
  loadTokenKey,
  verifyPullGrant,
} from "../../registry-credentials/grant.ts";
import type { Control } from "../../redis/connection.ts";
import type { RegistryTokenSettings } from "../../settings/registry-token.ts";
import { verifyBearer } from "../auth.ts";
import type { GatewayEnv } from "../env.ts";

export function registryTokenRoutes(ctl: Control, settings: RegistryTokenSettings) {
  const app = new Hono<GatewayEnv>();
  // Read once at start: a missing or wrong key stops the gateway, not the first push.
  const key = settings.keyFile === undefined ? undefined : loadTokenKey(settings.keyFile);

  app.get("/", async (c) => {
    if (!key)
      throw new PlatformError(
        404,
        "registry_tokens_off",
        "this platform issues no registry tokens: the operator sets PLATFORM_REGISTRY_TOKEN_KEY (docs/publish.md)",
      );
    const refuse = () => {
      c.header("www-authenticate", 'Basic realm="platform registry tokens"');
      return new PlatformError(
        401,
        "invalid_api_key",
        "send a platform CLI token or API key as the Basic auth password (`platform registry login` does)",
      );
    };
    const basic = /^Basic\s+(.+)$/i.exec(c.req.header("authorization") ?? "")?.[1];
    if (!basic) throw refuse();
    const decoded = Buffer.from(basic, "base64").toString("utf8");
    const username = decoded.slice(0, Math.max(0, decoded.indexOf(":")));
    const password = decoded.slice(decoded.indexOf(":") + 1);
    // The scaler's own pull grant (src/registry-credentials/grant.ts), or a platform credential.
    const grant = username === GRANT_USERNAME ? verifyPullGrant(key, settings.issuer, password) : undefined;
    const caller = grant ? undefined : password ? await verifyBearer(ctl, password) : undefined;
    if (!grant && !caller) throw refuse();
    const org = grant ? grant.org : (caller?.org as string);
    const service = c.req.query("service");
    if (!service || service.length > 255)
      throw new PlatformError(
        400,
        "invalid_request",
        "service: expected the registry's service name, as its challenge names it",
        "service",
      );
    // A token for the grant audience would pass the grant check: a pull grant of the caller's own
    // making, not the scaler's (docs/security.md, "Anonymous callers"). No registry is named so.
    if (service.toLowerCase() === GRANT_AUDIENCE)
      throw new PlatformError(
        400,
        "invalid_request",
        `service: "${GRANT_AUDIENCE}" is the platform's own pull-grant audience, not a registry's; name the registry's service as its challenge does`,
        "service",
      );
    const scopes = c.req.queries("scope") ?? [];
    if (scopes.length > 20)
      throw new PlatformError(400, "invalid_request", "scope: at most 20 scopes per request", "scope");
    const access = grantedAccess(
      scopes.flatMap((s) => s.split(" ")),
      org,
    );
    const signed = signRegistryToken({
      key,
      issuer: settings.issuer,
      service,
      subject: `${org}/${grant ? GRANT_USERNAME : caller?.name}`,
      access: grant ? grantAccess(grant, access) : access,
      // A token from a grant lives no longer than the grant.
      ttlMs: grant ? Math.min(settings.ttlMs, grant.expires - Date.now()) : settings.ttlMs,
    });
    return c.json({
      token: signed.token,
      access_token: signed.token,
      expires_in: signed.expiresIn,
      issued_at: signed.issuedAt,
    });
  });

  return app;
}
