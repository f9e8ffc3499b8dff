/**
 * CLI tokens in Redis (record.ts says what they are). Per session: a hash (TTL: the session's end),
 * the access token's hash → id (TTL: its expiry), the refresh token's hash → id (TTL: the end), and
 * a member in its organization's and subject's index; a refresh token once traded stays as
 * `used:<id>` until the end, so presenting it again is recognised as reuse and ends the session
 * (RFC 6749 §10.4, OAuth 2.0 Security BCP §4.14: one of its two holders stole it).
 *
 * A token verifies only while its subject does, as the same organization and role: revoking the
 * API key it is bound to, or a user's organization or role changing, ends it at once.
 */
import { randomBytes } from "node:crypto";
import { listOrgs } from "../orgs/store.ts";
import type { KeyLimits } from "../ratelimit/limits.ts";
import { findApiKey, hashSecret } from "../keys/store.ts";
import { announceCallerChange } from "../keys/changes.ts";
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { LuaScript } from "../redis/scripts.ts";
import { findUser } from "../users/store.ts";
import type { Role } from "../contracts/orgs.ts";
import { PlatformError } from "../contracts/errors.ts";
import { ACCESS_PREFIX, REFRESH_PREFIX, type TokenGrant, TokenRecord, type TokenSubject } from "./record.ts";
import { logger } from "../telemetry/log.ts";

const issueScript = new LuaScript(import.meta.url, "issue");
const refreshScript = new LuaScript(import.meta.url, "refresh");
const log = logger("tokens");

/** How long an access token works and how long its session may be refreshed (settings: PLATFORM_TOKEN_TTL_MS, PLATFORM_REFRESH_TOKEN_TTL_MS). */
export type TokenLifetimes = { ttlMs: number; refreshTtlMs: number };

/** Who a verified token acts as, read from its subject now: what the gateway makes its caller of. */
export type TokenPrincipal = { id: string; name: string; org: string; role: Role; limits?: KeyLimits };

export type VerifiedToken = { record: TokenRecord; principal: TokenPrincipal };

/** Why a refresh was refused (logged by the caller; the client hears only that its session expired). */
export type RefreshRefusal = "unknown" | "expired" | "reused" | "subject_gone";

const subjectKey = (s: TokenSubject) => `${s.kind}:${s.id}`;

/** The subject as it is now, undefined once it is gone (a revoked key, a removed user). */
async function principalOf(ctl: Control, subject: TokenSubject): Promise<TokenPrincipal | undefined> {
  if (subject.kind === "key") {
    const key = await findApiKey(ctl, subject.id);
    if (!key) return undefined;
    return { id: key.id, name: key.name, org: key.org, role: key.role, ...(key.limits ? { limits: key.limits } : {}) };
  }
  const user = await findUser(ctl, subject.id);
  return user && { id: user.id, name: user.name, org: user.org, role: user.role };
}

/** The session still stands for its subject: the same organization and role it was issued for. */
const bound = (record: TokenRecord, now: TokenPrincipal | undefined): now is TokenPrincipal =>
  now !== undefined && now.org === record.org && now.role === record.role;

function mint(prefix: string): { secret: string; hash: string } {
  const secret = prefix + randomBytes(32).toString("base64url");
  return { secret, hash: hashSecret(secret) };
}

/** A new session for `subject`, after it signed in; 404 when the subject does not exist. */
export async function issueToken(
  ctl: Control,
  subject: TokenSubject,
  lifetimes: TokenLifetimes,
  now = Date.now(),
): Promise<TokenGrant & { record: TokenRecord }> {
  const principal = await principalOf(ctl, subject);
  if (!principal)
    throw new PlatformError(
      404,
      "subject_not_found",
      `no ${subject.kind === "key" ? "API key" : "user"} "${subject.id}"`,
    );
  const access = mint(ACCESS_PREFIX);
  const refresh = mint(REFRESH_PREFIX);
  const ends = now + lifetimes.refreshTtlMs;
  const record: TokenRecord = {
    id: `tok_${randomBytes(8).toString("hex")}`,
    subject,
    name: principal.name,
    org: principal.org,
    role: principal.role,
    created: now,
    expires: Math.min(now + lifetimes.ttlMs, ends),
    refresh_expires: ends,
    refreshed: 0,
  };
  const fields = {
    id: record.id,
    subject_kind: subject.kind,
    subject_id: subject.id,
    name: record.name,
    org: record.org,
    role: record.role,
    created: record.created,
    expires: record.expires,
    ends,
    refreshed: 0,
    access: access.hash,
    refresh: refresh.hash,
  };
  await issueScript.run(
    ctl.redis,
    [
      ctl.keys.token(record.id),
      ctl.keys.tokenAccess(access.hash),
      ctl.keys.tokenRefresh(refresh.hash),
      ctl.keys.tokensOfOrg(record.org),
      ctl.keys.tokensOfSubject(subjectKey(subject)),
    ],
    [record.id, now, record.expires, ends, ...Object.entries(fields).flat()],
  );
  return {
    id: record.id,
    token: access.secret,
    refresh_token: refresh.secret,
    expires: record.expires,
    refresh_expires: ends,
    record,
  };
}

type Session = { record: TokenRecord; access: string; refresh: string };

async function readSession(ctl: Control, id: string): Promise<Session | undefined> {
  const h = await ctl.redis.hgetall(ctl.keys.token(id));
  if (!h.id) return undefined;
  const raw = JSON.stringify({
    id: h.id,
    subject: { kind: h.subject_kind, id: h.subject_id },
    name: h.name,
    org: h.org,
    role: h.role,
    created: Number(h.created),
    expires: Number(h.expires),
    refresh_expires: Number(h.ends),
    refreshed: Number(h.refreshed ?? 0),
  });
  const parsed = parseStored(TokenRecord, raw, "token", id);
  return parsed.ok ? { record: parsed.value, access: h.access ?? "", refresh: h.refresh ?? "" } : undefined;
}

/** Who an access token acts as, or undefined: unknown, expired, revoked, or its subject gone or changed. */
export async function verifyToken(ctl: Control, token: string, now = Date.now()): Promise<VerifiedToken | undefined> {
  if (!token.startsWith(ACCESS_PREFIX)) return undefined;
  const hash = hashSecret(token);
  const id = await ctl.redis.get(ctl.keys.tokenAccess(hash));
  if (!id) return undefined;
  const session = await readSession(ctl, id);
  if (!session || session.access !== hash || session.record.expires <= now) return undefined;
  const principal = await principalOf(ctl, session.record.subject);
  return bound(session.record, principal) ? { record: session.record, principal } : undefined;
}

/**
 * Trades a refresh token for a new pair (both rotate; the old refresh token is spent). A spent one
 * presented again ends the whole session, the legitimate holder's copy with it.
 */
export async function refreshToken(
  ctl: Control,
  refreshTokenText: string,
  lifetimes: TokenLifetimes,
  now = Date.now(),
): Promise<
  { ok: true; grant: TokenGrant & { record: TokenRecord } } | { ok: false; reason: RefreshRefusal; id?: string }
> {
  if (!refreshTokenText.startsWith(REFRESH_PREFIX)) return { ok: false, reason: "unknown" };
  const presented = hashSecret(refreshTokenText);
  const stored = await ctl.redis.get(ctl.keys.tokenRefresh(presented));
  if (!stored) return { ok: false, reason: "unknown" };
  const id = stored.replace(/^used:/, "");
  const session = await readSession(ctl, id);
  if (!session) return { ok: false, reason: "unknown", id };
  if (stored.startsWith("used:")) return reused(ctl, id);
  if (!bound(session.record, await principalOf(ctl, session.record.subject))) {
    await revokeToken(ctl, id);
    return { ok: false, reason: "subject_gone", id };
  }
  const access = mint(ACCESS_PREFIX);
  const refresh = mint(REFRESH_PREFIX);
  const [outcome, expires] = (await refreshScript.run(
    ctl.redis,
    [
      ctl.keys.tokenRefresh(presented),
      ctl.keys.token(id),
      ctl.keys.tokenAccess(session.access),
      ctl.keys.tokenAccess(access.hash),
      ctl.keys.tokenRefresh(refresh.hash),
    ],
    [id, presented, session.access, access.hash, refresh.hash, now, lifetimes.ttlMs],
  )) as [string, string?];
  if (outcome === "reused") return reused(ctl, id);
  if (outcome !== "ok") return { ok: false, reason: outcome as RefreshRefusal, id };
  // The traded access token no longer works: gateways that remember it forget it.
  await announceCallerChange(ctl, { kind: "token", id });
  const record: TokenRecord = { ...session.record, expires: Number(expires), refreshed: session.record.refreshed + 1 };
  return {
    ok: true,
    grant: {
      id,
      token: access.secret,
      refresh_token: refresh.secret,
      expires: record.expires,
      refresh_expires: record.refresh_expires,
      record,
    },
  };
}

async function reused(ctl: Control, id: string): Promise<{ ok: false; reason: "reused"; id: string }> {
  log.warn({ token_id: id }, `refresh token of ${id} presented again after it was traded: the session is revoked`);
  await revokeToken(ctl, id);
  return { ok: false, reason: "reused", id };
}

export async function getToken(ctl: Control, id: string): Promise<TokenRecord | undefined> {
  return (await readSession(ctl, id))?.record;
}

/**
 * Sessions not yet ended, newest first: a subject's, an organization's, or (neither) every
 * organization's. Each index is trimmed of ended sessions as it is read.
 */
export async function listTokens(
  ctl: Control,
  filter: { org?: string; subject?: TokenSubject } = {},
): Promise<TokenRecord[]> {
  const indexes = filter.subject
    ? [ctl.keys.tokensOfSubject(subjectKey(filter.subject))]
    : filter.org !== undefined
      ? [ctl.keys.tokensOfOrg(filter.org)]
      : (await listOrgs(ctl)).map((o) => ctl.keys.tokensOfOrg(o.id));
  const now = Date.now();
  const ids = new Set<string>();
  for (const index of indexes) {
    await ctl.redis.zremrangebyscore(index, "-inf", now);
    for (const id of await ctl.redis.zrange(index, 0, -1)) ids.add(id);
  }
  const records: TokenRecord[] = [];
  for (const id of ids) {
    const record = await getToken(ctl, id);
    if (record && (filter.org === undefined || record.org === filter.org)) records.push(record);
  }
  return records.sort((a, b) => b.created - a.created);
}

/** Ends a session: its access and refresh tokens stop working at once, on every gateway (src/keys/changes.ts). Undefined when there was none. */
export async function revokeToken(ctl: Control, id: string): Promise<TokenRecord | undefined> {
  const session = await readSession(ctl, id);
  if (!session) return undefined;
  const { record } = session;
  await ctl.redis
    .multi()
    .del(ctl.keys.token(id), ctl.keys.tokenAccess(session.access), ctl.keys.tokenRefresh(session.refresh))
    .zrem(ctl.keys.tokensOfOrg(record.org), id)
    .zrem(ctl.keys.tokensOfSubject(subjectKey(record.subject)), id)
    .exec();
  await announceCallerChange(ctl, { kind: "token", id });
  return record;
}

/** Ends every session of `subject` (an API key being revoked): resolves how many there were. */
export async function revokeTokensOf(ctl: Control, subject: TokenSubject): Promise<number> {
  let n = 0;
  for (const record of await listTokens(ctl, { subject })) if (await revokeToken(ctl, record.id)) n++;
  return n;
}
