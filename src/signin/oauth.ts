/**
 * The OAuth 2.0 pieces the gateway and the CLI agree on (docs/signin.md): the CLI's client id, the
 * loopback redirect URIs a native app may use (RFC 8252 §7.3), PKCE S256 (RFC 7636), and the user
 * codes of the device flow (RFC 8628 §6.1). Pure functions of node:crypto, so the CLI loads them
 * without the stores.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** The one client of the gateway's authorization server: the platform CLI, a public client (RFC 8252). */
export const CLI_CLIENT_ID = "platform-cli";

export const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";

/** The path of the CLI's loopback listener. */
export const CALLBACK_PATH = "/callback";

/** 256 random bits, base64url: states, verifiers, codes, flow cookies. */
export function randomSecret(): string {
  return randomBytes(32).toString("base64url");
}

/** RFC 7636 §4.1: 43-128 characters of [A-Z a-z 0-9 - . _ ~]; a challenge (S256: 43) takes the same form. */
export const PKCE_PATTERN = /^[A-Za-z0-9._~-]{43,128}$/;

/** The S256 challenge of `verifier`: BASE64URL(SHA-256(verifier)). */
export function pkceChallenge(verifier: string): string {
  return createHash("sha256").update(verifier, "ascii").digest("base64url");
}

/** Compares two secrets without telling a timer how much of them matched. */
export function sameSecret(a: string, b: string): boolean {
  const x = createHash("sha256").update(a).digest();
  const y = createHash("sha256").update(b).digest();
  return timingSafeEqual(x, y);
}

const LOOPBACK = new Set(["127.0.0.1", "[::1]", "localhost"]);

/**
 * `uri` as a loopback redirect URI of the CLI, or undefined: `http://127.0.0.1:<port>/callback`
 * (or `[::1]`, `localhost`), a port given, nothing else — no user, query or fragment. Anything
 * else would send the code off this machine or to a page an attacker could read it from.
 */
export function loopbackRedirect(uri: string): URL | undefined {
  if (!URL.canParse(uri)) return undefined;
  const url = new URL(uri);
  const ok =
    url.protocol === "http:" &&
    LOOPBACK.has(url.hostname) &&
    url.port !== "" &&
    url.username === "" &&
    url.password === "" &&
    url.pathname === CALLBACK_PATH &&
    url.search === "" &&
    url.hash === "" &&
    // The text as given, not a spelling the parser tidied (`HTTP://127.0.0.1:1/a/../callback`).
    url.href === uri;
  return ok ? url : undefined;
}

/** RFC 8628 §6.1's alphabet: consonants only (no vowels to spell words, no 0/O or 1/I to confuse). */
const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LENGTH = 8;

/** A fresh user code, shown as `WDJB-MJHT`: 8 letters of 20, about 34.5 bits. */
export function newUserCode(): string {
  const bytes = randomBytes(USER_CODE_LENGTH * 2);
  let code = "";
  // Rejection sampling (256 is not a multiple of 20): every letter equally likely.
  for (let i = 0; code.length < USER_CODE_LENGTH; i++) {
    const byte = i < bytes.length ? (bytes[i] as number) : (randomBytes(1)[0] as number);
    if (byte < 240) code += USER_CODE_ALPHABET[byte % 20];
  }
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/** A user code as typed (`wdjb mjht`, `WDJB-MJHT`) in its one stored form, or undefined when it cannot be one. */
export function normalizeUserCode(typed: string): string | undefined {
  const letters = typed.toUpperCase().replace(/[\s-]/g, "");
  return letters.length === USER_CODE_LENGTH && [...letters].every((ch) => USER_CODE_ALPHABET.includes(ch))
    ? letters
    : undefined;
}
