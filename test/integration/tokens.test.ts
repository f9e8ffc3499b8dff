/**
 * CLI tokens against a real Redis (src/tokens/): issued for a key or a user, verified, expired,
 * refreshed with rotation, a spent refresh token ending the session, revoked, dead with their key
 * or a user's changed role; Redis holding only hashes, and every token key expiring.
 */
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey, revokeApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import {
  issueToken,
  listTokens,
  refreshToken,
  revokeToken,
  revokeTokensOf,
  verifyToken,
} from "../../src/tokens/store.ts";
import { upsertUser } from "../../src/users/store.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const LIFETIMES = { ttlMs: 60_000, refreshTtlMs: 3_600_000 };
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

let redis: PrivateRedis;
let ctl: Control;

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "tok");
  await createOrg(ctl, "acme", "Acme");
});

afterAll(async () => {
  await ctl?.redis.quit();
  await redis?.stop();
});

async function keyOf(org = "acme", role: "admin" | "user" = "user") {
  return createApiKey(ctl, `k-${Math.random().toString(16).slice(2, 8)}`, role, { rpm: 7 }, org);
}

describe("CLI tokens", () => {
  it("issues a token bound to a key: it verifies as that key, with its organization, role and limits", async () => {
    const { record: key } = await keyOf();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES);
    expect(grant.token).toMatch(/^pt_[A-Za-z0-9_-]{43}$/);
    expect(grant.refresh_token).toMatch(/^ptr_[A-Za-z0-9_-]{43}$/);
    expect(grant.id).toMatch(/^tok_[0-9a-f]{16}$/);
    const verified = await verifyToken(ctl, grant.token);
    expect(verified?.principal).toEqual({ id: key.id, name: key.name, org: "acme", role: "user", limits: { rpm: 7 } });
    expect(verified?.record).toMatchObject({ id: grant.id, subject: { kind: "key", id: key.id }, org: "acme" });
    // The refresh token is no bearer, and a made-up token verifies as nobody.
    expect(await verifyToken(ctl, grant.refresh_token)).toBeUndefined();
    expect(await verifyToken(ctl, `pt_${"A".repeat(43)}`)).toBeUndefined();
  });

  it("keeps only hashes in Redis, and every key it writes expires", async () => {
    const { record: key } = await keyOf();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES);
    const keys = await ctl.redis.keys("tok:*token*");
    expect(keys.length).toBeGreaterThan(0);
    for (const k of keys) expect(await ctl.redis.pttl(k), k).toBeGreaterThan(0);
    const dump: string[] = [];
    for (const k of keys) {
      const type = await ctl.redis.type(k);
      if (type === "string") dump.push((await ctl.redis.get(k)) ?? "");
      if (type === "hash") dump.push(JSON.stringify(await ctl.redis.hgetall(k)));
      if (type === "zset") dump.push(JSON.stringify(await ctl.redis.zrange(k, 0, -1)));
      dump.push(k);
    }
    const all = dump.join("\n");
    expect(all).toContain(sha256(grant.token));
    expect(all).not.toContain(grant.token.slice(3));
    expect(all).not.toContain(grant.refresh_token.slice(4));
  });

  it("stops working when it expires; a refresh rotates both tokens and spends the old refresh token", async () => {
    const { record: key } = await keyOf();
    const t0 = Date.now();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES, t0);
    expect(grant.expires).toBe(t0 + LIFETIMES.ttlMs);
    expect(await verifyToken(ctl, grant.token, t0 + LIFETIMES.ttlMs + 1)).toBeUndefined();
    const refreshed = await refreshToken(ctl, grant.refresh_token, LIFETIMES);
    if (!refreshed.ok) throw new Error(refreshed.reason);
    expect(refreshed.grant.id).toBe(grant.id);
    expect(refreshed.grant.token).not.toBe(grant.token);
    expect(refreshed.grant.refresh_token).not.toBe(grant.refresh_token);
    expect(refreshed.grant.refresh_expires).toBe(grant.refresh_expires);
    expect((await verifyToken(ctl, refreshed.grant.token))?.principal.id).toBe(key.id);
    // The old access token died with the rotation.
    expect(await verifyToken(ctl, grant.token)).toBeUndefined();
    // The session is not extended by refreshing: past its end, no refresh.
    const late = await refreshToken(ctl, refreshed.grant.refresh_token, LIFETIMES, grant.refresh_expires + 1);
    expect(late).toMatchObject({ ok: false, reason: "expired" });
  });

  it("a spent refresh token presented again revokes the whole session (reuse detection)", async () => {
    const { record: key } = await keyOf();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES);
    const first = await refreshToken(ctl, grant.refresh_token, LIFETIMES);
    if (!first.ok) throw new Error(first.reason);
    // Someone else replays the stolen, already used refresh token:
    expect(await refreshToken(ctl, grant.refresh_token, LIFETIMES)).toMatchObject({ ok: false, reason: "reused" });
    // ...and the legitimate holder's newer tokens are dead too.
    expect(await verifyToken(ctl, first.grant.token)).toBeUndefined();
    expect(await refreshToken(ctl, first.grant.refresh_token, LIFETIMES)).toMatchObject({ ok: false });
    expect((await listTokens(ctl, { subject: { kind: "key", id: key.id } })).map((t) => t.id)).toEqual([]);
  });

  it("two refreshes racing with one refresh token: one wins, the other is reuse and ends the session", async () => {
    const { record: key } = await keyOf();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES);
    const both = await Promise.all([
      refreshToken(ctl, grant.refresh_token, LIFETIMES),
      refreshToken(ctl, grant.refresh_token, LIFETIMES),
    ]);
    const [won] = both.filter((r) => r.ok);
    expect(both.filter((r) => !r.ok)).toEqual([{ ok: false, reason: "reused", id: grant.id }]);
    // The race looks like theft from here, so the winner's pair is revoked with the session.
    if (!won?.ok) throw new Error("no refresh won");
    expect(await verifyToken(ctl, won.grant.token)).toBeUndefined();
  });

  it("is listed per organization and subject, and revocable", async () => {
    const { record: a } = await keyOf();
    const { record: b } = await keyOf("default", "admin");
    const ta = await issueToken(ctl, { kind: "key", id: a.id }, LIFETIMES);
    const tb = await issueToken(ctl, { kind: "key", id: b.id }, LIFETIMES);
    const acme = (await listTokens(ctl, { org: "acme" })).map((t) => t.id);
    expect(acme).toContain(ta.id);
    expect(acme).not.toContain(tb.id);
    expect((await listTokens(ctl, { subject: { kind: "key", id: b.id } })).map((t) => t.id)).toEqual([tb.id]);
    const all = (await listTokens(ctl)).map((t) => t.id);
    expect(all).toEqual(expect.arrayContaining([ta.id, tb.id]));
    expect((await revokeToken(ctl, ta.id))?.id).toBe(ta.id);
    expect(await verifyToken(ctl, ta.token)).toBeUndefined();
    expect(await refreshToken(ctl, ta.refresh_token, LIFETIMES)).toMatchObject({ ok: false, reason: "unknown" });
    expect(await revokeToken(ctl, ta.id)).toBeUndefined();
    expect((await listTokens(ctl, { org: "acme" })).map((t) => t.id)).not.toContain(ta.id);
  });

  it("a token bound to a key dies when the key is revoked, even before its sessions are cleaned up", async () => {
    const { record: key } = await keyOf();
    const grant = await issueToken(ctl, { kind: "key", id: key.id }, LIFETIMES);
    await revokeApiKey(ctl, key.id);
    expect(await verifyToken(ctl, grant.token)).toBeUndefined();
    expect(await refreshToken(ctl, grant.refresh_token, LIFETIMES)).toMatchObject({
      ok: false,
      reason: "subject_gone",
    });
    const other = await keyOf();
    const t1 = await issueToken(ctl, { kind: "key", id: other.record.id }, LIFETIMES);
    await issueToken(ctl, { kind: "key", id: other.record.id }, LIFETIMES);
    expect(await revokeTokensOf(ctl, { kind: "key", id: other.record.id })).toBe(2);
    expect(await verifyToken(ctl, t1.token)).toBeUndefined();
  });

  it("a user's token follows the user: a changed role or organization ends it", async () => {
    const who = { issuer: "https://idp.test", subject: "alice", name: "Alice", org: "acme", role: "user" as const };
    const user = await upsertUser(ctl, who);
    expect(user.id).toMatch(/^usr_[0-9a-f]{12}$/);
    const grant = await issueToken(ctl, { kind: "user", id: user.id }, LIFETIMES);
    expect((await verifyToken(ctl, grant.token))?.principal).toEqual({
      id: user.id,
      name: "Alice",
      org: "acme",
      role: "user",
    });
    // The same person signing in again is the same user.
    expect((await upsertUser(ctl, { ...who, name: "Alice A." })).id).toBe(user.id);
    expect((await verifyToken(ctl, grant.token))?.principal.name).toBe("Alice A.");
    await upsertUser(ctl, { ...who, role: "admin" });
    expect(await verifyToken(ctl, grant.token)).toBeUndefined();
    await expect(upsertUser(ctl, { ...who, subject: "bob", org: "nowhere" })).rejects.toMatchObject({
      code: "org_not_found",
    });
    await expect(issueToken(ctl, { kind: "user", id: "usr_000000000000" }, LIFETIMES)).rejects.toMatchObject({
      status: 404,
    });
  });
});
