/**
 * Sign-in's stores against a real Redis (src/signin/): a code is good once and only for what it
 * was bound to, a device code answers each poll as RFC 8628 says and hands its token out once,
 * a flow counts its attempts, the open sign-ins are capped, and Redis holds no secret (only
 * SHA-256 names) and no key without an expiry.
 */
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { exchangeCode, issueCode } from "../../src/signin/codes.ts";
import {
  DEVICE_TTL_MS,
  decideDevice,
  findDevice,
  POLL_INTERVAL_MS,
  pollDevice,
  startDevice,
} from "../../src/signin/devices.ts";
import {
  closeFlow,
  countAttempt,
  csrfMatches,
  FLOW_TTL_MS,
  openFlow,
  readFlow,
  updateFlow,
} from "../../src/signin/flows.ts";
import { CLI_CLIENT_ID, pkceChallenge, randomSecret } from "../../src/signin/oauth.ts";
import { admitOpen, MAX_OPEN } from "../../src/signin/open.ts";
import { verifyToken } from "../../src/tokens/store.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const LIFETIMES = { ttlMs: 60_000, refreshTtlMs: 3_600_000 };
const REDIRECT = "http://127.0.0.1:43210/callback";
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

let redis: PrivateRedis;
let ctl: Control;
let subject: { kind: "key"; id: string };

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "si");
  await createOrg(ctl, "acme", "Acme");
  const { record } = await createApiKey(ctl, "acme-admin", "admin", undefined, "acme");
  subject = { kind: "key", id: record.id };
});

afterAll(async () => {
  await ctl?.redis.quit();
  await redis?.stop();
});

/** Every sign-in key in Redis with its TTL (ms) and whether its name or value holds `secret`. */
async function signinKeys(secrets: string[]) {
  const names = await ctl.redis.keys("si:{signin}:*");
  return Promise.all(
    names.map(async (name) => {
      const type = await ctl.redis.type(name);
      const value =
        type === "hash"
          ? JSON.stringify(await ctl.redis.hgetall(name))
          : type === "zset"
            ? JSON.stringify(await ctl.redis.zrange(name, 0, -1))
            : String(await ctl.redis.get(name));
      return {
        name,
        ttl: await ctl.redis.pttl(name),
        leaks: secrets.some((s) => name.includes(s) || value.includes(s)),
      };
    }),
  );
}

describe("authorization codes", () => {
  it("trade once, for the client, redirect URI and verifier they were issued to; a replay revokes the token", async () => {
    const verifier = randomSecret();
    const code = await issueCode(ctl, { redirect_uri: REDIRECT, code_challenge: pkceChallenge(verifier), subject });
    const request = { code, client_id: CLI_CLIENT_ID, redirect_uri: REDIRECT, code_verifier: verifier };
    const first = await exchangeCode(ctl, request, LIFETIMES);
    if (!first.ok) throw new Error(first.reason);
    expect(first.grant.record).toMatchObject({ subject, org: "acme", role: "admin" });
    expect(await verifyToken(ctl, first.grant.token)).toBeDefined();
    expect(await exchangeCode(ctl, request, LIFETIMES)).toEqual({ ok: false, reason: "reused" });
    expect(await verifyToken(ctl, first.grant.token)).toBeUndefined();

    const cases: [Partial<typeof request>, string][] = [
      [{ client_id: "other" }, "client_mismatch"],
      [{ redirect_uri: "http://127.0.0.1:43211/callback" }, "redirect_mismatch"],
      [{ code_verifier: undefined }, "verifier_missing"],
      [{ code_verifier: randomSecret() }, "verifier_mismatch"],
      [{ code_verifier: "short" }, "verifier_mismatch"],
    ];
    for (const [change, reason] of cases) {
      const fresh = await issueCode(ctl, { redirect_uri: REDIRECT, code_challenge: pkceChallenge(verifier), subject });
      expect(await exchangeCode(ctl, { ...request, code: fresh, ...change }, LIFETIMES)).toEqual({ ok: false, reason });
      // Spent by the failed try: the right request after it is a replay.
      expect(await exchangeCode(ctl, { ...request, code: fresh }, LIFETIMES)).toEqual({ ok: false, reason: "reused" });
    }
    expect(await exchangeCode(ctl, { ...request, code: randomSecret() }, LIFETIMES)).toEqual({
      ok: false,
      reason: "unknown",
    });
  });

  it("expire after 60 s", async () => {
    const verifier = randomSecret();
    const past = Date.now() - 61_000;
    const code = await issueCode(
      ctl,
      { redirect_uri: REDIRECT, code_challenge: pkceChallenge(verifier), subject },
      past,
    );
    expect(
      await exchangeCode(
        ctl,
        { code, client_id: CLI_CLIENT_ID, redirect_uri: REDIRECT, code_verifier: verifier },
        LIFETIMES,
      ),
    ).toEqual({ ok: false, reason: "unknown" });
  });
});

describe("device codes", () => {
  it("answer pending, slow_down (a longer interval), then the token once approved, and nothing after", async () => {
    const t0 = Date.now();
    const started = await startDevice(ctl, t0);
    if (!started) throw new Error("refused");
    expect(started).toMatchObject({ expires_in: DEVICE_TTL_MS / 1000, interval: POLL_INTERVAL_MS / 1000 });
    const poll = (at: number) => pollDevice(ctl, started.device_code, LIFETIMES, at);
    expect(await poll(t0)).toEqual({ status: "authorization_pending" });
    expect(await poll(t0 + 1_000)).toEqual({ status: "slow_down", intervalMs: POLL_INTERVAL_MS + 5_000 });
    expect(await poll(t0 + 1_000 + POLL_INTERVAL_MS + 5_000)).toEqual({ status: "authorization_pending" });

    const found = await findDevice(ctl, started.user_code.toLowerCase());
    expect(found?.userCode).toBe(started.user_code);
    expect(await decideDevice(ctl, found?.id as string, { subject })).toBe(true);
    // Decided once: the user code is gone, a second decision changes nothing.
    expect(await findDevice(ctl, started.user_code)).toBeUndefined();
    expect(await decideDevice(ctl, found?.id as string, "denied")).toBe(false);
    const approved = await poll(t0 + 60_000);
    expect(approved.status).toBe("approved");
    if (approved.status === "approved") expect(approved.grant.record.subject).toEqual(subject);
    expect(await poll(t0 + 120_000)).toEqual({ status: "unknown" });
  });

  it("answer access_denied once denied, and expired_token past their 10 minutes", async () => {
    const denied = await startDevice(ctl);
    const found = await findDevice(ctl, denied?.user_code as string);
    expect(await decideDevice(ctl, found?.id as string, "denied")).toBe(true);
    expect(await pollDevice(ctl, denied?.device_code as string, LIFETIMES)).toEqual({ status: "access_denied" });

    const t0 = Date.now();
    const late = await startDevice(ctl, t0);
    expect(await findDevice(ctl, late?.user_code as string, t0 + DEVICE_TTL_MS)).toBeUndefined();
    expect(await pollDevice(ctl, late?.device_code as string, LIFETIMES, t0 + DEVICE_TTL_MS)).toEqual({
      status: "expired_token",
    });
  });
});

describe("flows", () => {
  it("are found by their cookie, take their CSRF secret, and close after 5 failed attempts", async () => {
    const opened = await openFlow(ctl, { kind: "code", redirect_uri: REDIRECT, state: "s", code_challenge: "c" });
    if (!opened) throw new Error("refused");
    const flow = await readFlow(ctl, opened.secret);
    expect(flow).toMatchObject({ kind: "code", redirect_uri: REDIRECT, attempts: 0 });
    expect(await readFlow(ctl, randomSecret())).toBeUndefined();
    expect(csrfMatches(flow!, flow!.csrf)).toBe(true);
    expect(csrfMatches(flow!, randomSecret())).toBe(false);
    expect(csrfMatches(flow!, undefined)).toBe(false);
    await updateFlow(ctl, flow!, { subject_kind: "key", subject_id: subject.id, oidc_state: "x" });
    await updateFlow(ctl, flow!, { oidc_state: undefined });
    const updated = await readFlow(ctl, opened.secret);
    expect([updated?.subject_id, updated?.oidc_state]).toEqual([subject.id, undefined]);
    const tries = [];
    for (let i = 0; i < 5; i++) tries.push(await countAttempt(ctl, flow!));
    expect(tries).toEqual([true, true, true, true, false]);
    expect(await readFlow(ctl, opened.secret)).toBeUndefined();
    // A flow that ended is not brought back by a late update.
    await updateFlow(ctl, flow!, { name: "late" });
    expect(await readFlow(ctl, opened.secret)).toBeUndefined();
    expect(await ctl.redis.exists(ctl.keys.signinFlow(flow!.id))).toBe(0);
  });

  it("are capped with device codes: past the cap new ones are refused until some end", async () => {
    const now = Date.now();
    const filler = Array.from({ length: MAX_OPEN }, (_, i) => [now + 60_000, `filler:${i}`]).flat();
    await ctl.redis.zadd(ctl.keys.signinOpen, ...filler);
    expect(await openFlow(ctl, { kind: "device" })).toBeUndefined();
    expect(await startDevice(ctl)).toBeUndefined();
    await ctl.redis.zrem(ctl.keys.signinOpen, "filler:0", "filler:1");
    expect(await admitOpen(ctl, "test:1", now + 1_000)).toBe(true);
    // Members past their expiry no longer count.
    expect(await admitOpen(ctl, "test:2", now + 120_000, now + 61_000)).toBe(true);
    expect(await ctl.redis.zcard(ctl.keys.signinOpen)).toBeLessThan(10);
    await ctl.redis.del(ctl.keys.signinOpen);
  });
});

describe("what sign-in keeps in Redis", () => {
  it("only SHA-256 of codes, device codes and flow cookies, and every key expires within minutes", async () => {
    const verifier = randomSecret();
    const code = await issueCode(ctl, { redirect_uri: REDIRECT, code_challenge: pkceChallenge(verifier), subject });
    const device = await startDevice(ctl);
    const flow = await openFlow(ctl, { kind: "device" });
    const secrets = [
      code,
      device?.device_code as string,
      device?.user_code.replace("-", "") as string,
      flow?.secret as string,
    ];
    const found = await signinKeys(secrets);
    expect(found.map((k) => k.name)).toEqual(
      expect.arrayContaining([
        ctl.keys.authCode(sha256(code)),
        ctl.keys.deviceCode(sha256(device?.device_code as string)),
        ctl.keys.signinFlow(sha256(flow?.secret as string)),
      ]),
    );
    expect(found.filter((k) => k.leaks)).toEqual([]);
    for (const k of found) {
      expect(k.ttl, k.name).toBeGreaterThan(0);
      expect(k.ttl, k.name).toBeLessThanOrEqual(Math.max(FLOW_TTL_MS, DEVICE_TTL_MS + 60_000, 15 * 60_000));
    }
    await closeFlow(ctl, (await readFlow(ctl, flow?.secret))!);
  });
});
