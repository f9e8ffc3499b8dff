/**
 * Rate limits and usage against a real Redis: the limiter's scripts on their own (sliding window,
 * token reservation and settlement, leases a crashed gateway leaves, expiries), the requests'
 * ends written after their turn (Settlements), and an in-process gateway
 * with a deployed endpoint but no replica, so admitted requests wait in the queue for as long as
 * a test holds them: the 429s, the headers, slots freed when a client leaves, the key routes and
 * who may read which usage.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { RateLimiter, type Scope, stateKey } from "../../src/ratelimit/limiter.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { queryUsage, recordUsage } from "../../src/usage/counters.ts";
import type { RunningGateway } from "../../src/gateway/server/app.ts";
import { Allowances } from "../../src/ratelimit/allowances.ts";
import { Settlements } from "../../src/ratelimit/settlements.ts";
import { startRedisCluster } from "../helpers/cluster.ts";
import { type TinyGateway, startTinyGateway } from "../helpers/gateway.ts";
import { waitUntil } from "../helpers/wait.ts";

let tiny: TinyGateway;
let ctl: Control;
let other: Control;
let gateway: RunningGateway;
let admin: string;

beforeAll(async () => {
  // A replica wanted but none running: admitted requests wait in the queue until the test lets go.
  tiny = await startTinyGateway({ settings: { requestTimeoutMs: 120_000 } });
  ({ ctl, gateway } = tiny);
  // A second connection stands for a second gateway process: the budget is Redis's, not a process's.
  other = connectControl(tiny.redis.url, tiny.settings.prefix);
  admin = (await createApiKey(ctl, "admin", "admin")).key;
});

afterAll(async () => {
  await other?.redis.quit();
  await tiny?.stop();
});

const call = (path: string, key: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}) =>
  fetch(`${gateway.url}${path}`, {
    method: init.method ?? "POST",
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    signal: init.signal,
  });

const scope = (name: string, limits: Scope["limits"]): Scope => ({ name, limits });

describe("the limiter's scripts", () => {
  it("admits exactly rpm requests in the window across connections, each seeing a distinct remainder", async () => {
    const a = new RateLimiter(ctl);
    const b = new RateLimiter(other);
    const scopes = [scope("key", { rpm: 30 })];
    const verdicts = await Promise.all(
      Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).admit("key_aaaaaaaaaaaa", scopes, `m${i}`, 0)),
    );
    const admitted = verdicts.filter((v) => v.admitted);
    expect(admitted).toHaveLength(30);
    expect(new Set(admitted.map((v) => v.scopes[0]?.requests))).toEqual(
      new Set(Array.from({ length: 30 }, (_, i) => i + 1)),
    );
    for (const v of verdicts.filter((v) => !v.admitted)) {
      expect(v.exceeded.map((e) => e.kind)).toEqual(["requests"]);
      expect(v.retry_after_ms).toBeGreaterThan(0);
      expect(v.retry_after_ms).toBeLessThanOrEqual(60_000);
    }
    // The window slides: entries older than 60 s leave it. Aged by hand rather than waited for.
    const log = stateKey(ctl, "key_aaaaaaaaaaaa", scopes[0] as Scope, "w");
    const members = await ctl.redis.zrange(log, 0, 9);
    for (const m of members) await ctl.redis.zadd(log, "XX", 1, m);
    const again = await Promise.all(
      Array.from({ length: 20 }, (_, i) => a.admit("key_aaaaaaaaaaaa", scopes, `n${i}`, 0)),
    );
    expect(again.filter((v) => v.admitted)).toHaveLength(10);
    a.close();
    b.close();
  });

  it("counts an admission as several requests when asked (an image request's images), all or none", async () => {
    const limiter = new RateLimiter(ctl);
    const allowances = new Allowances(limiter);
    const id = "key_wwwwwwwwwwww";
    const scopes = [scope("key", { rpm: 5, max_concurrency: 10 })];
    const three = (await allowances.admit(id, scopes, 0, 3)).verdict;
    expect(three).toMatchObject({ admitted: true, scopes: [{ requests: 3, in_flight: 1 }] });
    // 3 + 3 > 5: refused whole, with the wait until the entries that make room have left.
    const again = await limiter.admit(id, scopes, "x2", 0, undefined, 3);
    expect(again).toMatchObject({ admitted: false, never: false, scopes: [{ requests: 3 }] });
    expect(again.exceeded.map((e) => e.kind)).toEqual(["requests"]);
    expect(again.retry_after_ms).toBeGreaterThan(50_000);
    expect((await limiter.admit(id, scopes, "x3", 0, undefined, 2)).admitted).toBe(true);
    expect((await limiter.admit(id, scopes, "x4", 0)).admitted).toBe(false);
    // More than the limit at once can never fit: no wait helps.
    expect(await limiter.admit("key_wwwwwwwwwww2", scopes, "x5", 0, undefined, 6)).toMatchObject({
      admitted: false,
      never: true,
    });
    limiter.close();
  });

  it("reserves tokens at admission, settles them to the real count, and says when a request would fit", async () => {
    const limiter = new RateLimiter(ctl);
    const scopes = [scope("key", { tpm: 1000 })];
    const id = "key_bbbbbbbbbbbb";
    const first = await limiter.admit(id, scopes, "r1", 300);
    expect(first.admitted).toBe(true);
    expect(first.scopes[0]?.tokens).toBe(300);
    await limiter.finish(id, scopes, "r1", 120);
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(120);
    const tooMany = await limiter.admit(id, scopes, "r2", 900);
    expect(tooMany).toMatchObject({ admitted: false, never: false, exceeded: [{ kind: "tokens" }] });
    expect(tooMany.retry_after_ms).toBeGreaterThan(0);
    expect(tooMany.retry_after_ms).toBeLessThanOrEqual(60_000);
    expect((await limiter.admit(id, scopes, "r3", 880)).admitted).toBe(true);
    // Larger than the whole budget: it can never fit.
    expect(await limiter.admit(id, scopes, "r4", 1001)).toMatchObject({ admitted: false, never: true });
    // A reservation kept (no real count known) stands; a late count still settles it.
    await limiter.finish(id, scopes, "r3", undefined);
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(1000);
    await limiter.settle(id, scopes, "r3", 80);
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(200);
    limiter.close();
  });

  it("checks a key's scope and a model's together, all or nothing", async () => {
    const limiter = new RateLimiter(ctl);
    const id = "key_cccccccccccc";
    const scopes = [scope("key", { rpm: 5 }), scope("model:tiny", { rpm: 2 })];
    const verdicts = [];
    for (let i = 0; i < 4; i++) verdicts.push(await limiter.admit(id, scopes, `t${i}`, 0));
    expect(verdicts.map((v) => v.admitted)).toEqual([true, true, false, false]);
    expect(verdicts[2]?.exceeded).toEqual([{ scope: scopes[1], kind: "requests" }]);
    // The refused ones took nothing from the key's own budget.
    const other = [scope("key", { rpm: 5 }), scope("model:small", { rpm: 10 })];
    const rest = [];
    for (let i = 0; i < 4; i++) rest.push((await limiter.admit(id, other, `s${i}`, 0)).admitted);
    expect(rest).toEqual([true, true, true, false]);
    limiter.close();
  });

  it("drops the tokens of entries leaving the window with them, a thousand and more at once", async () => {
    const limiter = new RateLimiter(ctl);
    const id = "key_ffffffffffff";
    const scopes = [scope("key", { rpm: 5000, tpm: 3000 })];
    const log = stateKey(ctl, id, scopes[0] as Scope, "w");
    const tokens = stateKey(ctl, id, scopes[0] as Scope, "t");
    const first = await Promise.all(Array.from({ length: 1200 }, (_, i) => limiter.admit(id, scopes, `old${i}`, 2)));
    expect(first.every((v) => v.admitted)).toBe(true);
    await limiter.finish(id, scopes, "old0", 1);
    expect((await limiter.peek(id, scopes)).scopes[0]).toMatchObject({ requests: 1200, tokens: 2399 });
    expect((await limiter.admit(id, scopes, "big", 700)).admitted).toBe(false);
    // Aged by hand: all 1200 leave the window at the next check, and their 2399 tokens with them.
    const members = await ctl.redis.zrange(log, 0, -1);
    await Promise.all(members.map((m) => ctl.redis.zadd(log, "XX", 1, m)));
    const big = await limiter.admit(id, scopes, "big", 700);
    expect(big).toMatchObject({ admitted: true, scopes: [{ requests: 1, tokens: 700 }] });
    expect(await ctl.redis.hlen(tokens)).toBe(3); // big, sum and armed
    expect(await ctl.redis.hget(tokens, "sum")).toBe("700");
    // Aged again with nothing admitted after: a peek drops it and writes the sum down.
    await ctl.redis.zadd(log, "XX", 1, "big");
    expect((await limiter.peek(id, scopes)).scopes[0]).toMatchObject({ requests: 0, tokens: 0 });
    expect(await ctl.redis.hget(tokens, "sum")).toBe("0");
    limiter.close();
  });

  it("re-arms expiries at most every tenth of a window: each key still outlives its last admission by a window", async () => {
    const windowMs = 10_000;
    const limiter = new RateLimiter(ctl, { windowMs, leaseMs: 5_000 });
    const id = "key_gggggggggggg";
    const scopes = [scope("key", { rpm: 100, tpm: 1000, max_concurrency: 10 })];
    const [w, t, s] = (["w", "t", "s"] as const).map((part) => stateKey(ctl, id, scopes[0] as Scope, part)) as [
      string,
      string,
      string,
    ];
    await limiter.admit(id, scopes, "a1", 1);
    for (const key of [w, t]) expect(await ctl.redis.pttl(key)).toBeGreaterThan(windowMs);
    expect(await ctl.redis.pttl(s)).toBeGreaterThan(4_000);
    // Armed a moment ago (made to look recent, so no clock decides the test): not re-armed.
    await ctl.redis.hset(t, "armed", String(Date.now() + 60_000));
    const before = await ctl.redis.pttl(w);
    await new Promise((r) => setTimeout(r, 20));
    await limiter.admit(id, scopes, "a2", 1);
    expect(await ctl.redis.pttl(w)).toBeLessThan(before);
    // Armed more than a tenth of a window ago: re-armed to a window and a tenth, and a crashed
    // gateway's lease, long expired, is swept with it.
    await ctl.redis.hset(t, "armed", "1");
    await ctl.redis.zadd(s, 1, "crashed");
    const aged = await ctl.redis.pttl(w);
    await new Promise((r) => setTimeout(r, 20));
    await limiter.admit(id, scopes, "a3", 1);
    for (const key of [w, t]) expect(await ctl.redis.pttl(key)).toBeGreaterThan(aged);
    expect(await ctl.redis.zscore(s, "crashed")).toBeNull();
    expect((await limiter.peek(id, scopes)).scopes[0]).toMatchObject({ requests: 3, tokens: 3, in_flight: 3 });
    // A key with only a concurrency limit keeps no log and no tokens.
    const slotsOnly = [scope("key", { max_concurrency: 2 })];
    await limiter.admit("key_hhhhhhhhhhhh", slotsOnly, "c1", 0);
    expect(
      await ctl.redis.exists(
        stateKey(ctl, "key_hhhhhhhhhhhh", slotsOnly[0] as Scope, "w"),
        stateKey(ctl, "key_hhhhhhhhhhhh", slotsOnly[0] as Scope, "t"),
      ),
    ).toBe(0);
    limiter.close();
  });

  it("writes the ends of requests after their turn, all in one pipeline: released, settled and counted, none lost", async () => {
    const limiter = new RateLimiter(ctl);
    const settlements = new Settlements(ctl, limiter);
    const id = "key_iiiiiiiiiiii";
    const scopes = [scope("key", { tpm: 10_000, max_concurrency: 50 })];
    const slots = stateKey(ctl, id, scopes[0] as Scope, "s");
    const members = Array.from({ length: 20 }, (_, i) => `e${i}`);
    for (const m of members) expect((await limiter.admit(id, scopes, m, 100)).admitted).toBe(true);
    expect(limiter.holding).toBe(20);
    const labels = { key: id, model: "tiny", version: "v9" };
    for (const [i, m] of members.entries()) {
      // Every third one's count is not known: its reservation stands.
      const actual = i % 3 === 0 ? undefined : 10;
      settlements.add(
        { keyId: id, scopes, member: m, actual, release: true },
        {
          ...labels,
          requests: 1,
          prompt_tokens: actual === undefined ? undefined : 4,
          completion_tokens: actual === undefined ? undefined : 6,
        },
      );
    }
    // Nothing is written before the turn ends.
    expect(await ctl.redis.zcard(slots)).toBe(20);
    await settlements.drain();
    expect(limiter.holding).toBe(0);
    expect(await ctl.redis.zcard(slots)).toBe(0);
    const known = members.filter((_, i) => i % 3 !== 0).length;
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(known * 10 + (20 - known) * 100);
    const usage = await queryUsage(ctl, { sinceMs: 60_000, key: id, by: ["version"] });
    expect(usage.rows).toEqual([
      {
        version: "v9",
        requests: 20,
        prompt_tokens: known * 4,
        cached_tokens: 0,
        completion_tokens: known * 6,
        errors: 0,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
    ]);

    // A Redis that lost its scripts answers the pipeline's copy with NOSCRIPT: it is sent again, whole.
    expect((await limiter.admit(id, scopes, "after-flush", 100)).admitted).toBe(true);
    await ctl.redis.script("FLUSH");
    settlements.add({ keyId: id, scopes, member: "after-flush", actual: 1, release: true }, { ...labels, requests: 1 });
    await settlements.drain();
    expect(await ctl.redis.zcard(slots)).toBe(0);
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(known * 10 + (20 - known) * 100 + 1);
    expect((await queryUsage(ctl, { sinceMs: 60_000, key: id, by: ["key"] })).rows[0]?.requests).toBe(21);
    limiter.close();
  });

  it("holds concurrency slots by lease: renewed while held, released at the end, lapsed when their gateway is gone", async () => {
    const limiter = new RateLimiter(ctl, { leaseMs: 600 });
    const id = "key_dddddddddddd";
    const scopes = [scope("key", { max_concurrency: 1 })];
    const slots = stateKey(ctl, id, scopes[0] as Scope, "s");
    expect((await limiter.admit(id, scopes, "c1", 0)).admitted).toBe(true);
    expect(await limiter.admit(id, scopes, "c2", 0)).toMatchObject({
      admitted: false,
      exceeded: [{ kind: "concurrency" }],
    });
    // The holder renews: the lease moves forward while the request lives.
    const leased = Number(await ctl.redis.zscore(slots, "c1"));
    await waitUntil("the lease to be renewed", async () => Number(await ctl.redis.zscore(slots, "c1")) > leased);
    await limiter.finish(id, scopes, "c1", undefined);
    expect(await ctl.redis.zcard(slots)).toBe(0);
    expect(limiter.holding).toBe(0);
    // A gateway that crashed holding a slot: nobody renews it, and once its lease is over it is free.
    const crashed = new RateLimiter(other);
    expect((await crashed.admit(id, scopes, "c3", 0)).admitted).toBe(true);
    crashed.close();
    expect((await limiter.admit(id, scopes, "c4", 0)).admitted).toBe(false);
    await ctl.redis.zadd(slots, "XX", 1, "c3"); // its lease, expired
    expect((await limiter.admit(id, scopes, "c4", 0)).admitted).toBe(true);
    await limiter.finish(id, scopes, "c4", undefined);
    limiter.close();
  });
});

describe("usage counters", () => {
  it("counts by key, model and version over exact spans, by minute or hour", async () => {
    const now = Date.UTC(2030, 0, 10, 12, 30, 15);
    const min = 60_000;
    const a = { key: "key_111111111111", model: "m1", version: "v1" };
    await recordUsage(ctl, { ...a, requests: 1, prompt_tokens: 10, completion_tokens: 5 }, now - 90 * min);
    await recordUsage(ctl, { ...a, requests: 1, prompt_tokens: 7, completion_tokens: 3, errors: 1 }, now - 30 * min);
    await recordUsage(ctl, { ...a, version: "v2", requests: 2, prompt_tokens: 4, completion_tokens: 4 }, now - 5 * min);
    await recordUsage(ctl, { key: "key_222222222222", model: "m2", version: "v1", rate_limited: 3 }, now - 2 * min);
    await recordUsage(ctl, { ...a, requests: 1, prompt_tokens: 100, completion_tokens: 100 }, now - 3 * 86_400_000);

    const hour = await queryUsage(ctl, { sinceMs: 60 * min, by: ["key", "model", "version"], now });
    expect(hour.rows).toEqual([
      {
        key: a.key,
        model: "m1",
        version: "v1",
        requests: 1,
        prompt_tokens: 7,
        cached_tokens: 0,
        completion_tokens: 3,
        errors: 1,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
      {
        key: a.key,
        model: "m1",
        version: "v2",
        requests: 2,
        prompt_tokens: 4,
        cached_tokens: 0,
        completion_tokens: 4,
        errors: 0,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
      {
        key: "key_222222222222",
        model: "m2",
        version: "v1",
        requests: 0,
        prompt_tokens: 0,
        cached_tokens: 0,
        completion_tokens: 0,
        errors: 0,
        rate_limited: 3,
        images: 0,
        steps: 0,
      },
    ]);
    expect(hour.from).toBe(Math.floor((now - 60 * min) / min) * min);
    const twoHours = await queryUsage(ctl, { sinceMs: 120 * min, by: ["model"], key: a.key, now });
    expect(twoHours.rows).toEqual([
      {
        model: "m1",
        requests: 4,
        prompt_tokens: 21,
        cached_tokens: 0,
        completion_tokens: 12,
        errors: 1,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
    ]);
    const week = await queryUsage(ctl, { sinceMs: 7 * 86_400_000, by: ["version"], model: "m1", now });
    expect(week.rows.map((r) => [r.version, r.requests, r.prompt_tokens])).toEqual([
      ["v1", 3, 117],
      ["v2", 2, 4],
    ]);
    expect(week.from % 3_600_000).toBe(0); // beyond 48 h a span starts at its hour
    const byMinute = await queryUsage(ctl, { sinceMs: 10 * min, by: ["key"], interval: "minute", now });
    expect(
      byMinute.rows.map((r) => [new Date(r.start as number).toISOString(), r.key, r.requests, r.rate_limited]),
    ).toEqual([
      ["2030-01-10T12:25:00.000Z", a.key, 2, 0],
      ["2030-01-10T12:28:00.000Z", "key_222222222222", 0, 3],
    ]);
    const byHour = await queryUsage(ctl, { sinceMs: 120 * min, by: ["key"], key: a.key, interval: "hour", now });
    expect(byHour.rows.map((r) => [new Date(r.start as number).toISOString(), r.requests])).toEqual([
      ["2030-01-10T11:00:00.000Z", 1],
      ["2030-01-10T12:00:00.000Z", 3],
    ]);
    // Bounded: every bucket expires after its retention.
    const ttl = await ctl.redis.pttl(ctl.keys.usage(`m:${Math.floor((now - 5 * min) / min) * 60}`));
    expect(ttl).toBeGreaterThan(0);
  });

  it("a gateway sums its requests' usage and writes it within a second, one HINCRBY per counter and bucket", async () => {
    const settlements = new Settlements(ctl, new RateLimiter(ctl));
    const labels = { key: "key_333333333333", model: "m3", version: "v1" };
    const hincrbys = async () =>
      Number(((await ctl.redis.info("commandstats")).match(/^cmdstat_hincrby:calls=(\d+)/m) ?? [])[1] ?? 0);
    const before = await hincrbys();
    for (let i = 0; i < 50; i++)
      settlements.add(undefined, {
        ...labels,
        requests: 1,
        prompt_tokens: 3,
        completion_tokens: 2,
        errors: i % 10 === 0 ? 1 : 0,
      });
    const read = async () => (await queryUsage(ctl, { sinceMs: 60_000, key: labels.key, by: ["model"] })).rows;
    // Not before the turn ends...
    expect(await read()).toEqual([]);
    // ...and without a drain: the gateway's own timer writes it.
    let rows: Awaited<ReturnType<typeof read>> = [];
    for (
      const until = Date.now() + 10_000;
      rows.length === 0 && Date.now() < until;
      await new Promise((r) => setTimeout(r, 50))
    )
      rows = await read();
    expect(rows).toEqual([
      {
        model: "m3",
        requests: 50,
        prompt_tokens: 150,
        cached_tokens: 0,
        completion_tokens: 100,
        errors: 5,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
    ]);
    // Four counters in its minute's hash and its hour's (one each per request would be 310).
    expect((await hincrbys()) - before).toBeLessThanOrEqual(16);
    await settlements.drain();
  });
});

describe("on a Redis Cluster", () => {
  it("runs every script and pipeline within one slot: limits per key on whichever node, usage in one slot", async () => {
    const cluster = await startRedisCluster();
    const one = connectControl(cluster.url, "platform");
    const two = connectControl(cluster.url, "platform");
    try {
      const a = new RateLimiter(one);
      const b = new RateLimiter(two);
      const scopes = [scope("key", { rpm: 5, tpm: 100, max_concurrency: 10 }), scope("model:tiny", { rpm: 4 })];
      for (const id of ["key_aaaaaaaaaaa1", "key_bbbbbbbbbbb2", "key_ccccccccccc3"]) {
        const verdicts = await Promise.all(
          Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).admit(id, scopes, `r${i}`, 10)),
        );
        const admitted = verdicts.flatMap((v, i) => (v.admitted ? [`r${i}`] : []));
        expect(admitted).toHaveLength(4);
        for (const m of admitted) await a.finish(id, scopes, m, 3);
        expect((await b.peek(id, scopes)).scopes[0]).toMatchObject({ requests: 4, tokens: 12, in_flight: 0 });
      }
      await recordUsage(one, { key: "key_aaaaaaaaaaa1", model: "tiny", version: "v1", requests: 2, prompt_tokens: 5 });
      await recordUsage(two, { key: "key_bbbbbbbbbbb2", model: "tiny", version: "v1", requests: 1, errors: 1 });
      // Requests' ends: the finishes per key (each on its node), the usage in one pipeline.
      const settlements = new Settlements(one, a);
      const held = ["key_ddddddddddd4", "key_eeeeeeeeeee5", "key_fffffffffff6"].map((id, i) => ({
        id,
        member: `h${i}`,
      }));
      for (const h of held) expect((await a.admit(h.id, scopes, h.member, 10)).admitted).toBe(true);
      for (const h of held)
        settlements.add(
          { keyId: h.id, scopes, member: h.member, actual: 1, release: true },
          { key: h.id, model: "tiny", version: "v1", requests: 1 },
        );
      await settlements.drain();
      for (const h of held)
        expect((await b.peek(h.id, scopes)).scopes[0]).toMatchObject({ requests: 1, tokens: 1, in_flight: 0 });
      const report = await queryUsage(one, { sinceMs: 3_600_000, by: ["key"] });
      expect(report.rows.map((r) => [r.key, r.requests, r.prompt_tokens, r.errors])).toEqual([
        ["key_aaaaaaaaaaa1", 2, 5, 0],
        ["key_bbbbbbbbbbb2", 1, 0, 1],
        ["key_ddddddddddd4", 1, 0, 0],
        ["key_eeeeeeeeeee5", 1, 0, 0],
        ["key_fffffffffff6", 1, 0, 0],
      ]);
      // Grants (gateway/allowances.ts): taken, spent, settled and given back within the key's slot.
      const large = [scope("key", { rpm: 100_000, tpm: 10_000_000, max_concurrency: 1000 })];
      const allowances = new Allowances(a);
      const spent = [];
      for (let i = 0; i < 10; i++) spent.push(await allowances.admit("key_ggggggggggg7", large, 5));
      expect(spent.filter((x) => x.grant).length).toBeGreaterThan(0);
      for (const x of spent) await a.end({ keyId: "key_ggggggggggg7", scopes: large, ...allowances.finishOf(x, 2) });
      await allowances.close();
      expect((await b.peek("key_ggggggggggg7", large)).scopes[0]).toMatchObject({
        requests: 10,
        tokens: 20,
        in_flight: 0,
      });
      a.close();
      b.close();
    } finally {
      one.redis.disconnect();
      two.redis.disconnect();
      await cluster.stop();
    }
  });
});

describe("through the gateway", () => {
  async function keyWith(limits: unknown, role = "user"): Promise<{ id: string; key: string; limits?: unknown }> {
    const res = await call("/admin/v1/keys", admin, {
      body: { name: `k-${Math.random().toString(36).slice(2, 8)}`, role, limits },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    return (await res.json()) as { id: string; key: string };
  }

  it("creates keys with limits and changes them: a number sets, null removes, models merge", async () => {
    const k = await keyWith({ rpm: 60, models: { tiny: { tpm: 500 } } });
    expect(k.limits).toEqual({ rpm: 60, models: { tiny: { tpm: 500 } } });
    const patch = (body: unknown) => call(`/admin/v1/keys/${k.id}`, admin, { method: "PATCH", body });
    let res = await patch({
      limits: { rpm: null, tpm: 1000, models: { tiny: { rpm: 5 }, other: { max_concurrency: 2 } } },
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { limits: unknown }).limits).toEqual({
      tpm: 1000,
      models: { tiny: { tpm: 500, rpm: 5 }, other: { max_concurrency: 2 } },
    });
    res = await patch({ limits: { tpm: null, models: { tiny: null, other: { max_concurrency: null } } } });
    expect((await res.json()) as object).not.toHaveProperty("limits");
    const read = await call(`/admin/v1/keys/${k.id}`, admin, { method: "GET" });
    const record = (await read.json()) as object;
    expect(record).toMatchObject({ id: k.id, role: "user" });
    expect(record).not.toHaveProperty("hash");

    for (const [body, param] of [
      [{ limits: { rpm: 0 } }, "limits.rpm"],
      [{ limits: { rpm: 1.5 } }, "limits.rpm"],
      [{ limits: { rpn: 5 } }, "limits"],
      [{ limits: { models: { "bad name!": { rpm: 1 } } } }, "limits.models"],
    ] as const) {
      const bad = await patch(body);
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(((await bad.json()) as { error: { param: string } }).error.param).toContain(param);
    }
    expect(
      (await call("/admin/v1/keys/key_000000000000", admin, { method: "PATCH", body: { limits: { rpm: 1 } } })).status,
    ).toBe(404);
    expect((await call("/admin/v1/keys/nope", admin, { method: "PATCH", body: { limits: { rpm: 1 } } })).status).toBe(
      400,
    );
    const created = await call("/admin/v1/keys", admin, { body: { name: "x", limits: { rpm: -1 } } });
    expect(created.status).toBe(400);
  });

  it("a key without limits sends no rate-limit headers and leaves no limiter state", async () => {
    const k = await keyWith(undefined);
    const res = await call("/v1/models", k.key, { method: "GET" });
    expect(res.status).toBe(200);
    expect([...res.headers.keys()].filter((h) => h.startsWith("x-ratelimit"))).toEqual([]);
    const bad = await call("/v1/completions", k.key, { body: { model: "tiny", prompt: 5 } });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("x-ratelimit-limit-requests")).toBeNull();
    expect(await ctl.redis.keys(`${ctl.keys.rateLimit(k.id)}*`)).toEqual([]);
  });

  it("holds a concurrency slot while a request waits and frees it when the client leaves", async () => {
    const k = await keyWith({ max_concurrency: 1, rpm: 100 });
    const slots = `${ctl.keys.rateLimit(k.id)}:key:s`;
    const first = new AbortController();
    const pending = call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 3 },
      signal: first.signal,
    }).catch((e: unknown) => e);
    await waitUntil("the first request to hold the slot", async () => (await ctl.redis.zcard(slots)) === 1);

    const second = await call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 3 },
    });
    expect(second.status).toBe(429);
    expect(second.headers.get("retry-after")).toBe("1");
    const body = (await second.json()) as {
      error: { message: string; type: string; param: string | null; code: string };
    };
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded", param: null });
    expect(body.error.message).toMatch(/requests in flight: limit 1, used 1/);
    // Its rpm headers count the admitted request only: a refusal spends nothing.
    expect(second.headers.get("x-ratelimit-limit-requests")).toBe("100");
    expect(second.headers.get("x-ratelimit-remaining-requests")).toBe("99");

    first.abort();
    await pending;
    // Only the release removes it: a lease lapses after 30 s, and no admission ran to clear it.
    await waitUntil("the slot to be released", async () => (await ctl.redis.zcard(slots)) === 0);
    const third = new AbortController();
    const next = call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 3 },
      signal: third.signal,
    }).catch((e: unknown) => e);
    await waitUntil("the next request to be admitted", async () => (await ctl.redis.zcard(slots)) === 1);
    third.abort();
    await next;
    await waitUntil("its slot to be released too", async () => (await ctl.redis.zcard(slots)) === 0);
  });

  it("puts the headers on every response of a limited key, the 429 in OpenAI's envelope with Retry-After", async () => {
    const k = await keyWith({ rpm: 2, tpm: 100 });
    const listing = await call("/v1/models", k.key, { method: "GET" });
    expect(listing.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect(listing.headers.get("x-ratelimit-remaining-requests")).toBe("2");
    expect(listing.headers.get("x-ratelimit-reset-requests")).toBe("0ms");
    expect(listing.headers.get("x-ratelimit-limit-tokens")).toBe("100");
    expect(listing.headers.get("x-ratelimit-remaining-tokens")).toBe("100");
    const invalid = await call("/v1/completions", k.key, { body: { model: "tiny", prompt: 5 } });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get("x-ratelimit-remaining-requests")).toBe("2");

    // Reserved: prompt estimate (16 bytes / 4) + max_tokens. Held in the queue, then let go.
    const held = new AbortController();
    const waiting = call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 30 },
      signal: held.signal,
    }).catch((e: unknown) => e);
    const w = `${ctl.keys.rateLimit(k.id)}:key:w`;
    await waitUntil("the request to be admitted", async () => (await ctl.redis.zcard(w)) === 1);
    const after = await call("/v1/models", k.key, { method: "GET" });
    expect(after.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect(after.headers.get("x-ratelimit-remaining-tokens")).toBe(String(100 - 34));
    expect(after.headers.get("x-ratelimit-reset-requests")).toMatch(/^(\d+(\.\d+)?s|1m0s)$/);

    const tooLarge = await call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 500 },
    });
    expect(tooLarge.status).toBe(429);
    expect(
      ((await tooLarge.json()) as { error: { code: string; param: string; message: string } }).error,
    ).toMatchObject({ code: "rate_limit_exceeded", param: "max_tokens" });
    const overTokens = await call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 80 },
    });
    expect(overTokens.status).toBe(429);
    expect(((await overTokens.json()) as { error: { message: string } }).error.message).toMatch(
      /tokens per minute: limit 100, used 34, requested 84/,
    );
    expect(Number(overTokens.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(Number(overTokens.headers.get("retry-after"))).toBeLessThanOrEqual(60);
    held.abort();
    await waiting;
    // The client left before any count: the reservation stands for the window (conservative).
    expect((await call("/v1/models", k.key, { method: "GET" })).headers.get("x-ratelimit-remaining-tokens")).toBe("66");
  });

  it("counts a request in /v1/usage as soon as it is answered, on the gateway that served it", async () => {
    const k = await keyWith({ tpm: 10 });
    // Refused at once (it could never fit the key's tokens per minute): counted as rate_limited.
    const refused = await call("/v1/completions", k.key, {
      body: { model: "tiny", prompt: "Once upon a time", max_tokens: 100 },
    });
    expect(refused.status).toBe(429);
    // No wait: the gateway writes what it has summed before it reads (it otherwise writes once a second).
    const report = (await (await call("/v1/usage?since=1h", k.key, { method: "GET" })).json()) as {
      data: { requests: number; rate_limited: number }[];
    };
    expect(report.data).toEqual([expect.objectContaining({ requests: 0, rate_limited: 1 })]);
  });

  it("lets a user key read only its own usage, an admin every key's", async () => {
    const mine = await keyWith(undefined);
    const theirs = await keyWith(undefined);
    await recordUsage(ctl, {
      key: mine.id,
      model: "tiny",
      version: "v1",
      requests: 2,
      prompt_tokens: 9,
      completion_tokens: 4,
    });
    await recordUsage(ctl, { key: theirs.id, model: "tiny", version: "v1", requests: 1, errors: 1 });
    const own = await call("/v1/usage?since=1h", mine.key, { method: "GET" });
    expect(own.status).toBe(200);
    const report = (await own.json()) as {
      data: { key: string; key_name: string; requests: number; total_tokens: number }[];
    };
    expect(report.data).toEqual([
      expect.objectContaining({
        key: mine.id,
        model: "tiny",
        version: "v1",
        requests: 2,
        prompt_tokens: 9,
        completion_tokens: 4,
        total_tokens: 13,
        errors: 0,
      }),
    ]);
    expect((await call(`/v1/usage?key=${theirs.id}`, mine.key, { method: "GET" })).status).toBe(403);
    const all = (await (await call("/v1/usage?since=1h&by=key", admin, { method: "GET" })).json()) as {
      data: { key: string; requests: number }[];
    };
    expect(
      all.data
        .filter((r) => r.key === mine.id || r.key === theirs.id)
        .map((r) => r.requests)
        .sort(),
    ).toEqual([1, 2]);
    const bad = await call("/v1/usage?since=5x", admin, { method: "GET" });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe("since");
  });
});
