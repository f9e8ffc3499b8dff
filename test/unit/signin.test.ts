/**
 * Sign-in's pure parts (docs/signin.md): which redirect URIs count as the CLI's loopback listener,
 * PKCE S256 against RFC 7636's own example, user codes, how ID-token claims place a person, the
 * PLATFORM_OIDC_* settings, and the pages' escaping and headers.
 */
import { clientAddress, clientBucket } from "../../src/signin/per-client.ts";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { pageHeaders } from "../../src/gateway/page-headers.ts";
import { describeLifetime } from "../../src/gateway/routes/signin.ts";
import { consentPage, messagePage } from "../../src/gateway/signin-pages.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { placementOf } from "../../src/signin/claims.ts";
import { loopbackRedirect, newUserCode, normalizeUserCode, pkceChallenge } from "../../src/signin/oauth.ts";

describe("loopback redirect URIs (RFC 8252 §7.3)", () => {
  it("takes 127.0.0.1, [::1] and localhost with a port and the path /callback", () => {
    for (const uri of ["http://127.0.0.1:49152/callback", "http://[::1]:8080/callback", "http://localhost:1/callback"])
      expect(loopbackRedirect(uri)?.href, uri).toBe(uri);
  });

  it("refuses anything that could take the code off this machine or to another page", () => {
    for (const uri of [
      "https://127.0.0.1:8080/callback",
      "http://127.0.0.1/callback",
      "http://127.0.0.1:80/callback",
      "http://127.0.0.2:8080/callback",
      "http://127.0.0.1.evil.example:8080/callback",
      "http://localhost.evil.example:8080/callback",
      "http://evil.example:8080/callback",
      "http://127.0.0.1:8080/",
      "http://127.0.0.1:8080/callback/",
      "http://127.0.0.1:8080/a/../callback",
      "http://127.0.0.1:8080/callback?next=x",
      "http://127.0.0.1:8080/callback#x",
      "http://user:pw@127.0.0.1:8080/callback",
      "HTTP://127.0.0.1:8080/callback",
      "http://0x7f.1:8080/callback",
      "javascript:alert(1)//127.0.0.1:8080/callback",
      "not a url",
    ])
      expect(loopbackRedirect(uri), uri).toBeUndefined();
  });
});

describe("PKCE and user codes", () => {
  it("computes S256 as RFC 7636 appendix B does", () => {
    expect(pkceChallenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")).toBe(
      "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    );
  });

  it("makes user codes of 8 unambiguous consonants, read back however they are typed", () => {
    const codes = new Set(Array.from({ length: 200 }, newUserCode));
    expect(codes.size).toBe(200);
    for (const code of codes) {
      expect(code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
      expect(normalizeUserCode(code.toLowerCase().replace("-", " "))).toBe(code.replace("-", ""));
    }
    for (const typed of ["BCDF-GHJ", "BCDF-GHJKL", "BCDF-GHJA", "BCDF-GHJ0", ""])
      expect(normalizeUserCode(typed), typed).toBeUndefined();
  });
});

describe("placing a person from the ID token's claims", () => {
  const names = { org: "org", role: "role", groups: undefined };

  it("reads the organization and role claims; no role claim means user", () => {
    expect(placementOf({ sub: "1", name: "Ann", org: "acme", role: "admin" }, names)).toEqual({
      ok: true,
      org: "acme",
      role: "admin",
      name: "Ann",
    });
    expect(placementOf({ sub: "1", preferred_username: "ann", org: ["acme"] }, names)).toMatchObject({
      ok: true,
      role: "user",
      name: "ann",
    });
    expect(
      placementOf(
        { sub: "1", "https://example.com/org": "acme", roles: "user" },
        { ...names, org: "https://example.com/org", role: "roles" },
      ),
    ).toMatchObject({ ok: true, org: "acme", role: "user" });
  });

  it("refuses a missing organization, one that cannot be an id, and a role other than admin or user, saying which", () => {
    expect(placementOf({ sub: "1" }, names)).toMatchObject({
      ok: false,
      message: expect.stringContaining('no "org" claim'),
    });
    expect(placementOf({ sub: "1", org: "Acme Corp" }, names)).toMatchObject({
      ok: false,
      message: expect.stringContaining('"Acme Corp", is not an organization id'),
    });
    expect(placementOf({ sub: "1", org: "acme", role: "owner" }, names)).toMatchObject({
      ok: false,
      message: expect.stringContaining('"owner", is neither admin nor user'),
    });
    expect(placementOf({ sub: "1", org: ["acme", "rival"] }, names).ok).toBe(false);
  });

  it("maps platform:<org>:<role> groups when a groups claim is named, else falls back to the claims", () => {
    const groups = { ...names, groups: "groups" };
    expect(placementOf({ sub: "1", groups: ["staff", "/platform:acme:user"] }, groups)).toMatchObject({
      ok: true,
      org: "acme",
      role: "user",
    });
    // In both groups of one organization: the broader role.
    expect(placementOf({ sub: "1", groups: ["platform:acme:user", "platform:acme:admin"] }, groups)).toMatchObject({
      role: "admin",
    });
    expect(placementOf({ sub: "1", groups: ["platform:acme:admin", "platform:rival:user"] }, groups)).toMatchObject({
      ok: false,
      message: expect.stringContaining("several organizations (acme, rival)"),
    });
    expect(placementOf({ sub: "1", groups: ["platform:acme:viewer"] }, groups)).toMatchObject({ ok: false });
    expect(placementOf({ sub: "1", groups: ["staff"], org: "acme", role: "admin" }, groups)).toMatchObject({
      ok: true,
      org: "acme",
      role: "admin",
    });
  });
});

describe("the sign-in settings", () => {
  const oidc = {
    PLATFORM_OIDC_ISSUER: "https://id.example.com/realms/acme",
    PLATFORM_OIDC_CLIENT_ID: "platform",
    PLATFORM_OIDC_CLIENT_SECRET: "s3cret",
  };

  it("has no provider by default, and reads one with its defaults", () => {
    expect(loadSettings({}).signin).toEqual({
      publicUrl: undefined,
      oidc: undefined,
      opensPerMinute: 30,
      proxyHops: 0,
    });
    expect(loadSettings({ ...oidc, PLATFORM_PUBLIC_URL: "https://platform.example.com/" }).signin).toEqual({
      publicUrl: "https://platform.example.com",
      oidc: {
        issuer: oidc.PLATFORM_OIDC_ISSUER,
        clientId: "platform",
        clientSecret: "s3cret",
        name: "id.example.com",
        scopes: "openid profile email",
        claims: { org: "org", role: "role", groups: undefined },
      },
      opensPerMinute: 30,
      proxyHops: 0,
    });
    expect(
      loadSettings({
        ...oidc,
        PLATFORM_OIDC_NAME: "Okta",
        PLATFORM_OIDC_ORG_CLAIM: "tenant",
        PLATFORM_OIDC_ROLE_CLAIM: "platform_role",
        PLATFORM_OIDC_GROUPS_CLAIM: "groups",
        PLATFORM_OIDC_SCOPES: "openid profile groups",
      }).signin.oidc,
    ).toMatchObject({
      name: "Okta",
      scopes: "openid profile groups",
      claims: { org: "tenant", role: "platform_role", groups: "groups" },
    });
  });

  it("names what is wrong: a partial client, plain http off loopback, scopes without openid, a bad claim name", () => {
    expect(() => loadSettings({ PLATFORM_OIDC_ISSUER: oidc.PLATFORM_OIDC_ISSUER })).toThrow(
      /PLATFORM_OIDC_CLIENT_ID: expected with the other OpenID Connect variables.*PLATFORM_OIDC_CLIENT_SECRET: expected/,
    );
    expect(() => loadSettings({ ...oidc, PLATFORM_OIDC_ISSUER: "http://id.example.com" })).toThrow(
      /PLATFORM_OIDC_ISSUER: expected the provider's https URL/,
    );
    expect(loadSettings({ ...oidc, PLATFORM_OIDC_ISSUER: "http://127.0.0.1:9000" }).signin.oidc?.issuer).toBe(
      "http://127.0.0.1:9000",
    );
    expect(() => loadSettings({ ...oidc, PLATFORM_OIDC_SCOPES: "profile email" })).toThrow(/PLATFORM_OIDC_SCOPES: /);
    expect(() => loadSettings({ ...oidc, PLATFORM_OIDC_ORG_CLAIM: "my org" })).toThrow(/PLATFORM_OIDC_ORG_CLAIM: /);
    expect(() => loadSettings({ PLATFORM_PUBLIC_URL: "ftp://x" })).toThrow(/PLATFORM_PUBLIC_URL: /);
  });
});

describe("the sign-in pages", () => {
  it("escape every value they show", async () => {
    const page = String(
      await consentPage({
        csrf: '"><script>alert(1)</script>',
        requester: { kind: "device", userCode: "<b>" },
        name: "<img src=x onerror=alert(1)>",
        org: "acme",
        role: "admin",
        lifetime: "12 hours",
        session: "30 days",
      }),
    );
    expect(page).not.toMatch(/<script>|<img|<b>/);
    expect(page).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(String(await messagePage("t", "<script>"))).not.toContain("<script>");
  });

  it("are sent with a policy that allows no script, no framing and forms to this origin only", async () => {
    const app = new Hono();
    app.use(pageHeaders({ scripts: false }));
    app.get("/", (c) => c.html("<p>hi</p>"));
    const res = await app.request("/");
    expect(res.headers.get("content-security-policy")).toBe(
      "default-src 'self'; script-src 'none'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    );
    expect(res.headers.get("x-frame-options")).toBe("DENY");
    expect(res.headers.get("referrer-policy")).toBe("no-referrer");
  });

  it("say lifetimes in words", () => {
    expect([43_200_000, 2_592_000_000, 90 * 60_000, 3_600_000, 1_500].map(describeLifetime)).toEqual([
      "12 hours",
      "30 days",
      "90 minutes",
      "1 hour",
      "2 seconds",
    ]);
  });
});

describe("client addresses for sign-in limits (src/signin/per-client.ts)", () => {
  it("counts an IPv6 client by its /64 and an IPv4-mapped one as IPv4", () => {
    expect(clientBucket("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(clientBucket("2001:db8:1:2:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64");
    expect(clientBucket("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(clientBucket("::1")).toBe("0:0:0:0::/64");
    expect(clientBucket("::ffff:10.1.2.3")).toBe("10.1.2.3");
    expect(clientBucket("10.1.2.3")).toBe("10.1.2.3");
    expect(clientBucket("not an address")).toBe("unknown");
  });

  it("believes X-Forwarded-For only as far as the trusted proxies go", () => {
    expect(clientAddress("10.0.0.9", "1.2.3.4", 0)).toBe("10.0.0.9");
    expect(clientAddress("10.0.0.9", "6.6.6.6, 1.2.3.4", 1)).toBe("1.2.3.4");
    expect(clientAddress("10.0.0.9", "6.6.6.6, 1.2.3.4, 10.0.0.8", 2)).toBe("1.2.3.4");
    expect(clientAddress("10.0.0.9", undefined, 1)).toBe("10.0.0.9");
  });
});
