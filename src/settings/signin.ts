/**
 * The sign-in section (docs/signin.md): the URL browsers and CLIs reach the gateway at
 * (PLATFORM_PUBLIC_URL), and the operator's OpenID Connect provider, if any (PLATFORM_OIDC_*):
 * where it is, the gateway's client there, the button's name, and which ID-token claims carry a
 * person's organization and role.
 */
import { z } from "zod";
import { optional } from "./parse.ts";

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

const httpUrl = (message: string, https: (url: URL) => boolean) =>
  z.string().refine((text) => URL.canParse(text) && https(new URL(text)) && new URL(text).hash === "", message);

/** A claim name as providers spell them: `org`, `roles`, `https://example.com/claims/org`. */
const claimName = z
  .string()
  .regex(/^[\x21-\x7e]{1,200}$/, "expected a claim name: 1-200 visible ASCII characters, no spaces");

export const signinShape = {
  PLATFORM_PUBLIC_URL: optional(
    httpUrl(
      "expected the gateway's http(s) URL as browsers reach it, e.g. https://platform.example.com",
      (u) => /^https?:$/.test(u.protocol) && u.search === "",
    ),
  ),
  // A provider on plain http is accepted on loopback only (a provider run beside the gateway, or a
  // test's): anywhere else the ID token and the client secret would cross the network in clear.
  PLATFORM_OIDC_ISSUER: optional(
    httpUrl(
      "expected the provider's https URL (its issuer, e.g. https://id.example.com/realms/acme); http only on 127.0.0.1, [::1] or localhost",
      (u) => u.protocol === "https:" || (u.protocol === "http:" && LOOPBACK_HOSTS.has(u.hostname)),
    ),
  ),
  PLATFORM_OIDC_CLIENT_ID: optional(z.string().max(500, "expected at most 500 characters")),
  PLATFORM_OIDC_CLIENT_SECRET: optional(z.string().max(2000, "expected at most 2000 characters")),
  PLATFORM_OIDC_NAME: optional(z.string().max(60, "expected a display name of at most 60 characters")),
  PLATFORM_OIDC_SCOPES: optional(
    z
      .string()
      .regex(/(^|\s)openid(\s|$)/, 'expected space-separated scopes including "openid", e.g. "openid profile email"'),
  ),
  PLATFORM_OIDC_ORG_CLAIM: optional(claimName),
  PLATFORM_OIDC_ROLE_CLAIM: optional(claimName),
  PLATFORM_OIDC_GROUPS_CLAIM: optional(claimName),
  /** Sign-ins (browser flows, device codes) one client address may open a minute (src/signin/per-client.ts). */
  PLATFORM_SIGNIN_OPENS_PER_MINUTE: z.coerce
    .number({ message: "expected a whole number of sign-ins a minute" })
    .int("expected a whole number of sign-ins a minute")
    .positive("expected a whole number of sign-ins a minute, at least 1")
    .default(30),
  /** Trusted proxies in front of the gateway (an ingress: 1): the client address is read from X-Forwarded-For that many hops from the right. */
  PLATFORM_TRUSTED_PROXY_HOPS: z.coerce
    .number({ message: "expected the number of trusted proxies in front of the gateway (0: none)" })
    .int("expected the number of trusted proxies in front of the gateway (0: none)")
    .min(0, "expected the number of trusted proxies in front of the gateway (0: none)")
    .max(10, "expected at most 10 trusted proxies")
    .default(0),
};

type SigninEnv = z.infer<z.ZodObject<typeof signinShape>>;

/** Which ID-token claims say where a person belongs (src/signin/claims.ts reads them). */
export type ClaimNames = { org: string; role: string; groups: string | undefined };

export type OidcSettings = {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** What the sign-in button says after "Sign in with": PLATFORM_OIDC_NAME, else the issuer's host. */
  name: string;
  scopes: string;
  claims: ClaimNames;
};

export type SigninSettings = {
  /** Where the OpenID Connect redirect URI and the device flow's URL point; unset: each request's own origin. */
  publicUrl: string | undefined;
  /** Undefined: no identity provider, people sign in with an API key. */
  oidc: OidcSettings | undefined;
  /** Sign-ins one client address may open a minute. */
  opensPerMinute: number;
  /** Trusted proxies in front of the gateway, whose X-Forwarded-For names the client. */
  proxyHops: number;
};

const CLIENT = ["PLATFORM_OIDC_ISSUER", "PLATFORM_OIDC_CLIENT_ID", "PLATFORM_OIDC_CLIENT_SECRET"] as const;

/** A provider needs all three of its variables: one or two set is a mistake, named at start. */
export function checkSignin(e: SigninEnv, ctx: z.RefinementCtx): void {
  if (!CLIENT.some((name) => e[name] !== undefined)) return;
  for (const name of CLIENT)
    if (e[name] === undefined)
      ctx.addIssue({
        code: "custom",
        path: [name],
        message: `expected with the other OpenID Connect variables (${CLIENT.join(", ")}: all three or none)`,
      });
}

export function signinSettings(e: SigninEnv): SigninSettings {
  const { PLATFORM_OIDC_ISSUER: issuer, PLATFORM_OIDC_CLIENT_ID: clientId } = e;
  const clientSecret = e.PLATFORM_OIDC_CLIENT_SECRET;
  return {
    publicUrl: e.PLATFORM_PUBLIC_URL?.replace(/\/+$/, ""),
    opensPerMinute: e.PLATFORM_SIGNIN_OPENS_PER_MINUTE,
    proxyHops: e.PLATFORM_TRUSTED_PROXY_HOPS,
    oidc:
      issuer && clientId && clientSecret
        ? {
            issuer,
            clientId,
            clientSecret,
            name: e.PLATFORM_OIDC_NAME ?? new URL(issuer).host,
            scopes: e.PLATFORM_OIDC_SCOPES ?? "openid profile email",
            claims: {
              org: e.PLATFORM_OIDC_ORG_CLAIM ?? "org",
              role: e.PLATFORM_OIDC_ROLE_CLAIM ?? "role",
              groups: e.PLATFORM_OIDC_GROUPS_CLAIM,
            },
          }
        : undefined,
  };
}
