/**
 * The pure parts of publishing (docs/publish.md): when TLS is skipped (loopback and the platform's
 * own http:// host only), how a builder's stored session is read (never shown), what a registry
 * token grants (the caller's organization's repositories, nothing else), and the libtrust key id
 * distribution 2.x finds the signing key by.
 */
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isAuthFailure } from "../../src/container-images/build.ts";
import { isLoopback, isPlainHttp, storedSession } from "../../src/container-images/session.ts";
import { grantedAccess, libtrustKeyId, signRegistryToken } from "../../src/container-images/registry-token.ts";

describe("TLS is skipped only where the registry is this machine's or the platform's own http:// host", () => {
  it.each([
    ["127.0.0.1:5000", true],
    ["127.9.9.9", true],
    ["localhost:5000", true],
    ["[::1]:5000", true],
    ["registry.example.com", false],
    ["127.0.0.1.example.com:5000", false],
    ["10.0.0.1:5000", false],
  ])("%s → %s", (host, expected) => {
    expect(isLoopback(host)).toBe(expected);
    expect(isPlainHttp(host)).toBe(expected);
  });
  it("the platform's host when its URL is http://, never https://", () => {
    expect(isPlainHttp("platform.internal:8080", "http://platform.internal:8080")).toBe(true);
    expect(isPlainHttp("platform.internal:8080", "https://platform.internal:8080")).toBe(false);
    expect(isPlainHttp("other.internal:8080", "http://platform.internal:8080")).toBe(false);
  });
});

describe("stored sessions", () => {
  it("reads auth.json's base64 entry for the host (a URL key too), a credential helper, or says where it looked", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-auth-"));
    try {
      const a = join(dir, "auth.json");
      const b = join(dir, "config.json");
      await writeFile(
        a,
        JSON.stringify({ auths: { "https://reg.example.com/v1/": { auth: Buffer.from("u:p:w").toString("base64") } } }),
      );
      await writeFile(b, JSON.stringify({ auths: {}, credHelpers: { "ecr.example.com": "ecr-login" } }));
      expect(await storedSession("reg.example.com", [join(dir, "missing.json"), a, b])).toEqual({
        kind: "basic",
        file: a,
        username: "u",
        password: "p:w",
      });
      expect(await storedSession("ecr.example.com", [a, b])).toEqual({ kind: "helper", file: b, helper: "ecr-login" });
      expect(await storedSession("none.example.com", [a, b])).toEqual({ kind: "none", searched: [a, b] });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
  it("recognises each builder's wording of a refused session", () => {
    expect(isAuthFailure("Error: ... unauthorized: authentication required")).toBe(true);
    expect(isAuthFailure('Error: logging into "h": invalid username/password')).toBe(true);
    expect(isAuthFailure("denied: requested access to the resource is denied")).toBe(true);
    expect(isAuthFailure("Error: no space left on device")).toBe(false);
  });
});

describe("registry tokens", () => {
  it("grant pull and push under the caller's organization, no actions elsewhere, and skip malformed scopes", () => {
    expect(
      grantedAccess(
        [
          "repository:acme/items:pull,push",
          "repository:acme/team/items:pull,delete,*",
          "repository:rival/items:pull",
          "repository:acmex/items:pull",
          "registry:catalog:*",
          "repository:ACME/x:pull",
        ],
        "acme",
      ),
    ).toEqual([
      { type: "repository", name: "acme/items", actions: ["pull", "push"] },
      { type: "repository", name: "acme/team/items", actions: ["pull"] },
      { type: "repository", name: "rival/items", actions: [] },
      { type: "repository", name: "acmex/items", actions: [] },
    ]);
  });
  it("are ES256 JWTs whose kid is the key's libtrust id (12 groups of 4 base32 characters)", () => {
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
    const kid = libtrustKeyId(privateKey);
    expect(kid).toMatch(/^[A-Z2-7]{4}(?::[A-Z2-7]{4}){11}$/);
    const { token, expiresIn } = signRegistryToken({
      key: privateKey,
      issuer: "platform",
      service: "reg",
      subject: "acme/dev",
      access: [],
      ttlMs: 300_000,
    });
    const [header, claims, signature] = token.split(".").map((p) => Buffer.from(p, "base64url"));
    expect(JSON.parse(String(header))).toEqual({ typ: "JWT", alg: "ES256", kid });
    expect(JSON.parse(String(claims))).toMatchObject({ iss: "platform", aud: "reg", sub: "acme/dev", access: [] });
    expect(signature?.length).toBe(64);
    expect(expiresIn).toBe(300);
    const { privateKey: rsa } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    expect(() =>
      signRegistryToken({ key: rsa, issuer: "p", service: "r", subject: "s", access: [], ttlMs: 1 }),
    ).toThrow(/EC P-256/);
  });
});
