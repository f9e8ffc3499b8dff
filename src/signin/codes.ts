/**
 * Authorization codes of the loopback flow (RFC 6749 §4.1, RFC 7636, RFC 8252): 256 random bits,
 * kept in Redis by SHA-256 for 60 s, bound to the client, the redirect URI and the PKCE challenge
 * they were issued for, and good once. A code presented again is refused and the token it was
 * traded for revoked (RFC 6749 §4.1.2): two holders of one code means one of them stole it.
 */
import { z } from "zod";
import { PlatformError } from "../contracts/errors.ts";
import { hashSecret } from "../keys/store.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { issueToken, revokeToken, type TokenLifetimes } from "../tokens/store.ts";
import type { TokenGrant, TokenRecord, TokenSubject } from "../tokens/record.ts";
import { CLI_CLIENT_ID, PKCE_PATTERN, pkceChallenge, randomSecret, sameSecret } from "./oauth.ts";

const redeemScript = new LuaScript(import.meta.url, "redeem");

export const CODE_TTL_MS = 60_000;

/** Why a code was refused: for the operator's log; the client hears `invalid_grant` whatever it was. */
export type CodeRefusal =
  | "unknown"
  | "reused"
  | "client_mismatch"
  | "redirect_mismatch"
  | "verifier_missing"
  | "verifier_mismatch"
  | "subject_gone";

const Binding = z.object({
  client_id: z.string(),
  redirect_uri: z.string(),
  code_challenge: z.string(),
  subject_kind: z.enum(["key", "user"]),
  subject_id: z.string(),
  expires: z.coerce.number(),
});

/** A code for `subject`, to be traded by the client that asked at `redirect_uri` with the verifier of `code_challenge`. */
export async function issueCode(
  ctl: Control,
  binding: { redirect_uri: string; code_challenge: string; subject: TokenSubject },
  now = Date.now(),
): Promise<string> {
  const code = randomSecret();
  const key = ctl.keys.authCode(hashSecret(code));
  const expires = now + CODE_TTL_MS;
  const fields: z.input<typeof Binding> = {
    client_id: CLI_CLIENT_ID,
    redirect_uri: binding.redirect_uri,
    code_challenge: binding.code_challenge,
    subject_kind: binding.subject.kind,
    subject_id: binding.subject.id,
    expires,
  };
  await ctl.redis.multi().hset(key, fields).pexpireat(key, expires).exec();
  return code;
}

export type CodeExchange = { code: string; client_id: string; redirect_uri: string; code_verifier: string | undefined };

/**
 * Trades a code for a new token session: the first presentation only, by the client and redirect
 * URI it was issued to, with the verifier of its challenge. Any refusal spends the code too.
 */
export async function exchangeCode(
  ctl: Control,
  request: CodeExchange,
  lifetimes: TokenLifetimes,
  now = Date.now(),
): Promise<{ ok: true; grant: TokenGrant & { record: TokenRecord } } | { ok: false; reason: CodeRefusal }> {
  const key = ctl.keys.authCode(hashSecret(request.code));
  const [outcome, ...rest] = (await redeemScript.run(ctl.redis, [key], [])) as string[];
  if (outcome === "used") {
    const tokenId = rest[0];
    if (tokenId) await revokeToken(ctl, tokenId);
    return { ok: false, reason: "reused" };
  }
  const parsed = Binding.safeParse(Object.fromEntries(pairs(rest)));
  if (outcome !== "ok" || !parsed.success || parsed.data.expires <= now) return { ok: false, reason: "unknown" };
  const binding = parsed.data;
  const reason: CodeRefusal | undefined =
    request.client_id !== binding.client_id
      ? "client_mismatch"
      : request.redirect_uri !== binding.redirect_uri
        ? "redirect_mismatch"
        : request.code_verifier === undefined
          ? "verifier_missing"
          : !PKCE_PATTERN.test(request.code_verifier) ||
              !sameSecret(pkceChallenge(request.code_verifier), binding.code_challenge)
            ? "verifier_mismatch"
            : undefined;
  if (reason) return { ok: false, reason };
  const grant = await issueFor(ctl, { kind: binding.subject_kind, id: binding.subject_id }, lifetimes, now);
  if (!grant) return { ok: false, reason: "subject_gone" };
  // Remembered while the code lives, so a replay of it ends this session; at the code's own expiry
  // (an HSET on a record that expired meanwhile makes a new key, which then goes at once).
  await ctl.redis.multi().hset(key, "used", grant.id).pexpireat(key, binding.expires).exec();
  return { ok: true, grant };
}

/** A new session for `subject`; undefined when it is gone (a key revoked, a user removed) since it signed in. */
export async function issueFor(
  ctl: Control,
  subject: TokenSubject,
  lifetimes: TokenLifetimes,
  now = Date.now(),
): Promise<(TokenGrant & { record: TokenRecord }) | undefined> {
  try {
    return await issueToken(ctl, subject, lifetimes, now);
  } catch (e) {
    if (e instanceof PlatformError && e.status === 404) return undefined;
    throw e;
  }
}

function pairs(flat: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i] as string, flat[i + 1] as string]);
  return out;
}
