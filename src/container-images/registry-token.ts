/**
 * Image registry tokens (docs/publish.md, "Registry tokens"): the JWTs Docker Distribution's token
 * authentication asks a token server for. A caller of an organization gets pull and push on the
 * repositories under `<org>/` and nothing else: a scope it may not have is granted with no actions,
 * as the protocol wants (the registry then answers 401 for it). Signed ES256 with the gateway's
 * key; the header's `kid` is the key's libtrust fingerprint, which is how distribution 2.x finds
 * the trusted key among its `rootcertbundle`'s certificates.
 */
import { createHash, createPublicKey, type KeyObject, randomBytes, sign } from "node:crypto";

export type Access = { type: "repository"; name: string; actions: string[] };

/** The distribution spec's repository name (path components), as a scope names it. */
const REPOSITORY = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;

/**
 * What `scope` parameters (`repository:acme/items:pull,push`, one or more) grant a caller of `org`:
 * pull and push (the only actions a publish needs) under `<org>/`; a scope of another kind, or a
 * malformed one, is left out.
 */
export function grantedAccess(scopes: string[], org: string): Access[] {
  const granted: Access[] = [];
  for (const scope of scopes) {
    const m = /^repository(?:\([a-z0-9]+\))?:([^:]+):([a-z*,]*)$/.exec(scope);
    if (!m) continue;
    const name = m[1] as string;
    if (!REPOSITORY.test(name)) continue;
    const asked = (m[2] as string).split(",").filter(Boolean);
    const allowed = name.startsWith(`${org}/`) ? asked.filter((a) => a === "pull" || a === "push") : [];
    granted.push({ type: "repository", name, actions: [...new Set(allowed)] });
  }
  return granted;
}

/** libtrust's key id: SHA-256 of the DER public key, its first 240 bits in base32, in 12 groups of 4. */
export function libtrustKeyId(key: KeyObject): string {
  const der = createPublicKey(key).export({ type: "spki", format: "der" });
  const digest = createHash("sha256").update(der).digest().subarray(0, 30);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let bits = "";
  for (const byte of digest) bits += byte.toString(2).padStart(8, "0");
  let text = "";
  for (let i = 0; i < bits.length; i += 5) text += alphabet[Number.parseInt(bits.slice(i, i + 5), 2)];
  return (text.match(/.{4}/g) as string[]).join(":");
}

const b64url = (data: Buffer | string) => Buffer.from(data).toString("base64url");

export type TokenRequest = {
  key: KeyObject;
  issuer: string;
  /** The registry's `service`, as its challenge named it: the token's audience. */
  service: string;
  subject: string;
  access: Access[];
  ttlMs: number;
};

/** The signed token and when it expires (epoch seconds). */
export function signRegistryToken(req: TokenRequest): { token: string; expiresIn: number; issuedAt: string } {
  if (req.key.asymmetricKeyType !== "ec" || req.key.asymmetricKeyDetails?.namedCurve !== "prime256v1")
    throw new Error("the registry token key must be an EC P-256 private key");
  const now = Math.floor(Date.now() / 1000);
  const expiresIn = Math.max(60, Math.floor(req.ttlMs / 1000));
  const header = { typ: "JWT", alg: "ES256", kid: libtrustKeyId(req.key) };
  const claims = {
    iss: req.issuer,
    sub: req.subject,
    aud: req.service,
    exp: now + expiresIn,
    nbf: now - 10,
    iat: now,
    jti: randomBytes(16).toString("hex"),
    access: req.access,
  };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  // JWS wants r‖s (IEEE P1363), not the DER that node signs by default.
  const signature = sign("sha256", Buffer.from(input), { key: req.key, dsaEncoding: "ieee-p1363" });
  return { token: `${input}.${b64url(signature)}`, expiresIn, issuedAt: new Date(now * 1000).toISOString() };
}
