/**
 * Pull grants (docs/services.md, "Pulling from a private registry"): where the image registry
 * trusts the platform's token server (PLATFORM_REGISTRY_TOKEN_KEY, docs/publish.md), the scaler
 * mints its own short-lived grant to pull one organization's repository and hands it to the puller
 * (skopeo, the kubelet) as the password of user `platform-pull-grant`. The puller trades it at the
 * token server (src/gateway/routes/registry-token.ts) for a registry token, as a builder trades a
 * CLI token: the registry never sees the grant, and the grant opens nothing but pulls of the
 * repositories it names, under its organization, until it expires. A grant is an ES256 JWT signed
 * with the token key; its audience is GRANT_AUDIENCE, never a registry's, so no registry accepts
 * one, and the registry tokens the server issues are not grants, so none can be renewed into
 * another.
 */
import { createPrivateKey, createPublicKey, type KeyObject, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { type Access, signRegistryToken } from "../container-images/registry-token.ts";

/** The username a grant is sent under; the token server verifies such a password as a grant. */
export const GRANT_USERNAME = "platform-pull-grant";
export const GRANT_AUDIENCE = "platform-pull-grant";

/** The token key, read once: a missing or wrong key is an error naming PLATFORM_REGISTRY_TOKEN_KEY. */
export function loadTokenKey(file: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey(readFileSync(file));
  } catch (e) {
    throw new Error(`PLATFORM_REGISTRY_TOKEN_KEY: cannot read a private key from ${file} (${(e as Error).message})`);
  }
  if (key.asymmetricKeyType !== "ec" || key.asymmetricKeyDetails?.namedCurve !== "prime256v1")
    throw new Error(
      `PLATFORM_REGISTRY_TOKEN_KEY: ${file} is not an EC P-256 key (openssl ecparam -name prime256v1 -genkey -noout)`,
    );
  return key;
}

/** A grant to pull `repositories` (paths without the host, each under `<org>/`) for `ttlMs`. */
export function mintPullGrant(options: {
  key: KeyObject;
  issuer: string;
  org: string;
  repositories: string[];
  ttlMs: number;
}): { token: string; expires: number } {
  const access: Access[] = options.repositories
    .filter((name) => name.startsWith(`${options.org}/`))
    .map((name) => ({ type: "repository", name, actions: ["pull"] }));
  const signed = signRegistryToken({
    key: options.key,
    issuer: options.issuer,
    service: GRANT_AUDIENCE,
    subject: options.org,
    access,
    ttlMs: options.ttlMs,
  });
  return { token: signed.token, expires: Date.now() + signed.expiresIn * 1000 };
}

export type PullGrant = { org: string; repositories: string[]; expires: number };

/** The grant a password holds, verified (signature, issuer, audience, time); undefined for anything else. */
export function verifyPullGrant(key: KeyObject, issuer: string, token: string): PullGrant | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || token.length > 8192) return undefined;
  const [header, claims, signature] = parts as [string, string, string];
  const ok = verify(
    "sha256",
    Buffer.from(`${header}.${claims}`),
    { key: createPublicKey(key), dsaEncoding: "ieee-p1363" },
    Buffer.from(signature, "base64url"),
  );
  if (!ok) return undefined;
  let c: { iss?: unknown; aud?: unknown; sub?: unknown; exp?: unknown; nbf?: unknown; access?: unknown };
  try {
    c = JSON.parse(Buffer.from(claims, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  const now = Date.now() / 1000;
  if (c.iss !== issuer || c.aud !== GRANT_AUDIENCE || typeof c.sub !== "string") return undefined;
  if (typeof c.exp !== "number" || c.exp <= now || (typeof c.nbf === "number" && c.nbf > now + 60)) return undefined;
  const org = c.sub;
  const repositories = (Array.isArray(c.access) ? (c.access as Access[]) : [])
    .filter((a) => a?.type === "repository" && typeof a.name === "string" && a.name.startsWith(`${org}/`))
    .filter((a) => Array.isArray(a.actions) && a.actions.includes("pull"))
    .map((a) => a.name);
  return { org, repositories, expires: c.exp * 1000 };
}

/** What a grant lets the token server issue for `asked` (scopes already parsed): pull, on its repositories only. */
export function grantAccess(grant: PullGrant, asked: Access[]): Access[] {
  return asked.map((a) => ({
    ...a,
    actions: grant.repositories.includes(a.name) ? a.actions.filter((x) => x === "pull") : [],
  }));
}
