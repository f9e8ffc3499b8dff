/**
 * Revocation holds at once on every gateway (src/keys/changes.ts, src/gateway/callers.ts): two
 * gateways on one Redis, each remembering verified callers; a revoked key, a logged-out token, a
 * key's changed limits and a user's changed role take effect on both within half a second, and a
 * gateway whose subscription drops forgets every caller it remembered.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey, hashSecret } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { issueToken } from "../../src/tokens/store.ts";
import { upsertUser } from "../../src/users/store.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";

const LIFETIMES = { ttlMs: 600_000, refreshTtlMs: 3_600_000 };
/** The requirement itself: both gateways answer the new state within half a second. */
const AT_ONCE = { timeout: 500, interval: 10 };

let one: TinyGateway;
let twoCtl: Control;
let two: RunningGateway;
let admin: string;

const call = async (gateway: { url: string }, bearer: string, path = "/v1/models", init: RequestInit = {}) =>
  fetch(`${gateway.url}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
  });
const statuses = async (bearer: string, path = "/v1/models") =>
  Promise.all([one.gateway, two].map(async (g) => (await call(g, bearer, path)).status));

beforeAll(async () => {
  one = await startTinyGateway();
  twoCtl = connectControl(one.redis.url, one.settings.prefix);
  two = await startGateway({ ctl: twoCtl, settings: one.settings, host: "127.0.0.1", port: 0 });
  admin = (await createApiKey(one.ctl, "admin", "admin")).key;
});

afterAll(async () => {
  await two?.close();
  await twoCtl?.redis.quit().catch(() => undefined);
  await one?.stop();
});

describe("revocation on two gateways", () => {
  it("a revoked key gets 401 from both gateways at once", async () => {
    const { key, record } = await createApiKey(one.ctl, "doomed", "user");
    // Both gateways verify it, and so remember it.
    expect(await statuses(key)).toEqual([200, 200]);
    const revoked = await call(one.gateway, admin, `/admin/v1/keys/${record.id}`, { method: "DELETE" });
    expect(revoked.status).toBe(200);
    await vi.waitFor(async () => expect(await statuses(key)).toEqual([401, 401]), AT_ONCE);
  });

  it("a logged-out CLI token gets 401 from both gateways at once, and its key still works", async () => {
    const { key, record } = await createApiKey(one.ctl, "cli-user", "user");
    const grant = await issueToken(one.ctl, { kind: "key", id: record.id }, LIFETIMES);
    expect(await statuses(grant.token)).toEqual([200, 200]);
    // What `platform auth logout` does: the token revokes itself, here on the second gateway.
    const me = (await (await call(two, grant.token, "/admin/v1/whoami")).json()) as { token: { id: string } };
    expect(me.token.id).toBe(grant.id);
    const out = await call(two, grant.token, `/admin/v1/tokens/${grant.id}`, { method: "DELETE" });
    expect(out.status).toBe(200);
    await vi.waitFor(async () => expect(await statuses(grant.token)).toEqual([401, 401]), AT_ONCE);
    expect(await statuses(key)).toEqual([200, 200]);
  });

  it("a key's changed limits apply on both gateways at once, to the key and to its tokens", async () => {
    const { key, record } = await createApiKey(one.ctl, "limited", "user");
    const grant = await issueToken(one.ctl, { kind: "key", id: record.id }, LIFETIMES);
    const limitsOn = async (bearer: string) =>
      Promise.all(
        [one.gateway, two].map(
          async (g) => ((await (await call(g, bearer, "/admin/v1/whoami")).json()) as { limits?: unknown }).limits,
        ),
      );
    expect(await limitsOn(key)).toEqual([undefined, undefined]);
    expect(await limitsOn(grant.token)).toEqual([undefined, undefined]);
    const patched = await call(two, admin, `/admin/v1/keys/${record.id}`, {
      method: "PATCH",
      body: JSON.stringify({ limits: { rpm: 7 } }),
    });
    expect(patched.status).toBe(200);
    await vi.waitFor(async () => expect(await limitsOn(key)).toEqual([{ rpm: 7 }, { rpm: 7 }]), AT_ONCE);
    await vi.waitFor(async () => expect(await limitsOn(grant.token)).toEqual([{ rpm: 7 }, { rpm: 7 }]), AT_ONCE);
  });

  it("a user's changed role ends the user's tokens on both gateways at once", async () => {
    const who = { issuer: "https://idp.example", subject: "ada", name: "Ada", org: "default", role: "admin" as const };
    const user = await upsertUser(one.ctl, who);
    const grant = await issueToken(one.ctl, { kind: "user", id: user.id }, LIFETIMES);
    expect(await statuses(grant.token)).toEqual([200, 200]);
    // Her next sign-in brings a claim of a lesser role: the session issued as an admin is over.
    await upsertUser(one.ctl, { ...who, role: "user" });
    await vi.waitFor(async () => expect(await statuses(grant.token)).toEqual([401, 401]), AT_ONCE);
  });

  it("a gateway whose subscription drops forgets every caller it remembered", async () => {
    const { key, record } = await createApiKey(one.ctl, "silent", "user");
    expect(await statuses(key)).toEqual([200, 200]);
    // The key's hash goes with no announcement (a message missed): the gateways still remember it.
    await one.ctl.redis.hdel(one.ctl.keys.apiKeyByHash, hashSecret(key));
    expect(await statuses(key)).toEqual([200, 200]);
    expect(record.hash).toBe(hashSecret(key));
    // Every subscriber connection is cut (as a Redis restart or a network blip would): both forget.
    expect(await one.ctl.redis.client("KILL", "TYPE", "pubsub")).toBeGreaterThan(0);
    await vi.waitFor(async () => expect(await statuses(key)).toEqual([401, 401]), AT_ONCE);
    // Once subscribed again, they remember callers again, and still hear revocations.
    const { key: next, record: nextRecord } = await createApiKey(one.ctl, "after", "user");
    await vi.waitFor(async () => expect(await statuses(next)).toEqual([200, 200]), { timeout: 10_000 });
    await call(one.gateway, admin, `/admin/v1/keys/${nextRecord.id}`, { method: "DELETE" });
    await vi.waitFor(async () => expect(await statuses(next)).toEqual([401, 401]), AT_ONCE);
  });
});
