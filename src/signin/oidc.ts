/**
 * The gateway as a relying party of the operator's OpenID Connect provider (openid-client): the
 * authorization code flow with PKCE (S256), a state and a nonce, the client authenticated with its
 * secret (client_secret_basic, OpenID Connect's default). The provider is discovered on first use
 * and remembered; a failed discovery is not, so the next sign-in tries again rather than the
 * gateway failing to start while the provider is away. openid-client is loaded only then too.
 */
import type { Configuration } from "openid-client";
import type { OidcSettings } from "../settings/signin.ts";

/** What the callback must match: kept in the browser's flow between the two legs. */
export type OidcChecks = { state: string; nonce: string; verifier: string };

const LOOPBACK_HTTP = /^http:\/\/(127\.0\.0\.1|\[::1\]|localhost)[:/]/;

export class OidcProvider {
  readonly settings: OidcSettings;
  private discovered: Promise<Configuration> | undefined;

  constructor(settings: OidcSettings) {
    this.settings = settings;
  }

  /** The provider's authorization URL for one sign-in, and what its callback will be checked against. */
  async start(redirectUri: string): Promise<{ url: string; checks: OidcChecks }> {
    const client = await import("openid-client");
    const config = await this.configuration();
    const checks = {
      state: client.randomState(),
      nonce: client.randomNonce(),
      verifier: client.randomPKCECodeVerifier(),
    };
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: this.settings.scopes,
      state: checks.state,
      nonce: checks.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(checks.verifier),
      code_challenge_method: "S256",
    });
    return { url: url.href, checks };
  }

  /**
   * Trades the callback's code for tokens and resolves the ID token's claims: `callbackUrl` is the
   * redirect URI with the callback's query. Throws when anything does not match (state, issuer,
   * nonce, the ID token's signature, audience or age), or the provider refused.
   */
  async finish(callbackUrl: URL, checks: OidcChecks): Promise<Record<string, unknown>> {
    const client = await import("openid-client");
    const tokens = await client.authorizationCodeGrant(await this.configuration(), callbackUrl, {
      pkceCodeVerifier: checks.verifier,
      expectedState: checks.state,
      expectedNonce: checks.nonce,
      idTokenExpected: true,
    });
    const claims = tokens.claims();
    if (!claims) throw new Error("the provider's token response has no ID token");
    return claims as Record<string, unknown>;
  }

  /**
   * Where the sign-in button's form leads: the authorization endpoint's origin, which the page's
   * policy must allow (src/gateway/page-headers.ts); the issuer's while the provider cannot be reached.
   */
  async authorizationOrigin(): Promise<string> {
    const endpoint = await this.configuration().then(
      (config) => config.serverMetadata().authorization_endpoint,
      () => undefined,
    );
    return new URL(endpoint ?? this.settings.issuer).origin;
  }

  private configuration(): Promise<Configuration> {
    this.discovered ??= (async () => {
      const client = await import("openid-client");
      const { issuer, clientId, clientSecret } = this.settings;
      return client.discovery(new URL(issuer), clientId, undefined, client.ClientSecretBasic(clientSecret), {
        // Settings admit plain http for a provider on loopback only (src/settings/signin.ts).
        execute: LOOPBACK_HTTP.test(issuer) ? [client.allowInsecureRequests] : [],
        timeout: 10,
      });
    })().catch((e: unknown) => {
      this.discovered = undefined;
      throw e;
    });
    return this.discovered;
  }
}
