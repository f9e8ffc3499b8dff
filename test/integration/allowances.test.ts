/**
 * Budget held ahead (src/ratelimit/allowances.ts) against a real Redis: two gateways' grants never
 * spend more than one budget between them, what a grant did not use comes back, tokens settle
 * exactly through grants, granted slots are held and released, and small budgets are never
 * granted (every request checked, as the e2e headers test needs).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RateLimiter, type Scope, stateKey } from "../../src/ratelimit/limiter.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { Allowances, GRANT_REQUESTS, GRANT_SLOTS, type Ticket } from "../../src/ratelimit/allowances.ts";
import { privateRedis } from "../helpers/redis.ts";

let redis: { url: string; stop: () => Promise<void> };
let a: Control;
let b: Control;

beforeAll(async () => {
  redis = await privateRedis();
  // Two connections stand for two gateway processes.
  a = connectControl(redis.url, "allowances");
  b = connectControl(redis.url, "allowances");
});

afterAll(async () => {
  await a?.redis.quit();
  await b?.redis.quit();
  await redis?.stop();
});

const scope = (limits: Scope["limits"]): Scope[] => [{ name: "key", limits }];

/** Script calls Redis has run so far (each admission through the script is one). */
async function scriptCalls(ctl: Control): Promise<number> {
  const stats = await ctl.redis.info("commandstats");
  return [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
}

function gateway(ctl: Control, lifetimeMs?: number) {
  const limiter = new RateLimiter(ctl);
  return { limiter, allowances: new Allowances(limiter, { lifetimeMs }) };
}

describe("grants", () => {
  it("lets two gateways admit most requests of a large budget without a round trip, and never more than the budget", async () => {
    const id = "key_grant0000001";
    const scopes = scope({ rpm: 3000 });
    const log = stateKey(a, id, scopes[0] as Scope, "w");
    const [one, two] = [gateway(a), gateway(b)];
    const before = await scriptCalls(a);
    // Far from the limit: 1,000 requests, one at a time on each gateway in turn.
    for (let i = 0; i < 500; i++) {
      for (const g of [one, two]) expect((await g.allowances.admit(id, scopes, 0)).verdict.admitted).toBe(true);
    }
    const calls = (await scriptCalls(a)) - before;
    // One script per grant of up to 64, and its refill: far fewer than the requests.
    expect(calls).toBeLessThan(1000 / 8);

    // Then 4,000 more, all at once across both: together they get exactly what is left.
    const verdicts = await Promise.all(
      Array.from({ length: 4000 }, (_, i) => (i % 2 ? one : two).allowances.admit(id, scopes, 0)),
    );
    const admitted = 1000 + verdicts.filter((v) => v.verdict.admitted).length;
    expect(admitted).toBeLessThanOrEqual(3000);
    // The burst was sent all at once, so what each gateway was granted meanwhile had no later
    // request to spend it: at most one grant each (asked for one at a time, each at most 1/16 of
    // what was left), and at most half of the one before it, on its way back.
    expect(admitted).toBeGreaterThanOrEqual(3000 - 2 * (GRANT_REQUESTS + 1 + GRANT_REQUESTS / 2));
    await Promise.all([one.allowances.close(), two.allowances.close()]);
    // Everything unspent was given back: the log holds exactly the admitted requests.
    expect(await a.redis.zcard(log)).toBe(admitted);
    one.limiter.close();
    two.limiter.close();
  });

  it("gives back what a grant did not use within its lifetime, and logs what it granted as of its end", async () => {
    const id = "key_grant0000002";
    const scopes = scope({ rpm: 100_000, tpm: 10_000_000 });
    const [log, tokens] = [stateKey(a, id, scopes[0] as Scope, "w"), stateKey(a, id, scopes[0] as Scope, "t")];
    const { limiter, allowances } = gateway(a, 300);
    const t0 = Date.now();
    const first = await allowances.admit(id, scopes, 10);
    expect(first.grant).toBeUndefined();
    expect(await a.redis.zcard(log)).toBe(1 + GRANT_REQUESTS);
    // Every entry, the checked request's too, counts from the grant's end, a lifetime from now.
    const [, score] = await a.redis.zrange(log, 0, 0, "WITHSCORES");
    expect(Number(score)).toBeGreaterThanOrEqual(t0 + 300 - 50);
    // Its headers count the request alone, not what is held ahead.
    expect(first.verdict.scopes[0]).toMatchObject({ requests: 1, tokens: 10 });
    const second = await allowances.admit(id, scopes, 10);
    expect(second.grant).toBeDefined();
    expect(second.verdict.scopes[0]).toMatchObject({ requests: 2, tokens: 10 + 2 * 10 });
    // Past its lifetime (its timer gives it back), the 63 requests and their tokens not used are back.
    await expect.poll(() => a.redis.zcard(log)).toBe(2);
    expect(Number(await a.redis.hget(tokens, "sum"))).toBe(10 + 20);
    // A request that arrives then is checked again (and brings a new grant).
    expect((await allowances.admit(id, scopes, 10)).grant).toBeUndefined();
    await allowances.close();
    expect(await a.redis.zcard(log)).toBe(3);
    limiter.close();
  });

  it("settles every granted request's tokens to its real count, and lets larger requests through the script", async () => {
    const id = "key_grant0000003";
    const scopes = scope({ tpm: 50_000_000 });
    const { limiter, allowances } = gateway(a);
    const admissions: Ticket[] = [];
    for (let i = 0; i < 100; i++) admissions.push(await allowances.admit(id, scopes, 50));
    // Twice the first request's reservation per granted request: a request of more goes through the script.
    const big = await allowances.admit(id, scopes, 500);
    expect(big.grant).toBeUndefined();
    expect(admissions.filter((x) => x.grant).length).toBeGreaterThan(90);
    for (const x of [...admissions, big]) await limiter.end({ keyId: id, scopes, ...allowances.finishOf(x, 7) });
    await allowances.close();
    expect((await limiter.peek(id, scopes)).scopes[0]?.tokens).toBe(101 * 7);
    limiter.close();
  });

  it("never lets two gateways run more requests at once than the limit, and releases every slot at the end", async () => {
    const id = "key_grant0000004";
    const scopes = scope({ max_concurrency: 200 });
    const slots = stateKey(a, id, scopes[0] as Scope, "s");
    const [one, two] = [gateway(a), gateway(b)];
    const on = (i: number) => (i % 2 ? one : two);
    // Some requests first, so that both gateways hold grants; then 250 at once, none ending.
    const held: Ticket[] = [];
    for (let i = 0; i < 10; i++) held.push(await on(i).allowances.admit(id, scopes, 0));
    held.push(...(await Promise.all(Array.from({ length: 250 }, (_, i) => on(i).allowances.admit(id, scopes, 0)))));
    expect(held.filter((x) => x.grant).length).toBeGreaterThan(0);
    const running = held.filter((x) => x.verdict.admitted).length;
    expect(running).toBeLessThanOrEqual(200);
    expect(running).toBeGreaterThanOrEqual(200 - 2 * GRANT_SLOTS);
    expect(await a.redis.zcard(slots)).toBeLessThanOrEqual(200);
    for (const [i, x] of held.entries()) {
      if (x.verdict.admitted)
        await on(i >= 10 ? i - 10 : i).limiter.end({
          keyId: id,
          scopes,
          ...on(i >= 10 ? i - 10 : i).allowances.finishOf(x, undefined),
        });
    }
    await Promise.all([one.allowances.close(), two.allowances.close()]);
    expect(await a.redis.zcard(slots)).toBe(0);
    expect(one.limiter.holding + two.limiter.holding).toBe(0);
    one.limiter.close();
    two.limiter.close();
  });

  it("reuses a granted slot its request freed, and a request that outlives its grant releases its slot in Redis", async () => {
    const id = "key_grant0000005";
    const scopes = scope({ max_concurrency: 1000 });
    const slots = stateKey(a, id, scopes[0] as Scope, "s");
    const { limiter, allowances } = gateway(a, 200);
    const first = await allowances.admit(id, scopes, 0);
    expect(await a.redis.zcard(slots)).toBe(1 + GRANT_SLOTS);
    const second = await allowances.admit(id, scopes, 0);
    expect(second.slot).toBeDefined();
    // Ended while its grant lasts: the slot goes back to the grant, nothing to write.
    expect(allowances.finishOf(second, undefined)).toEqual({
      member: second.member,
      actual: undefined,
      release: false,
    });
    const third = await allowances.admit(id, scopes, 0);
    expect(third.slot).toBe(second.slot);
    // Once the grant is over (its timer gives it back): its free slots are back, the one its running
    // request holds is not.
    await expect.poll(() => a.redis.zcard(slots)).toBe(2);
    expect(allowances.finishOf(third, undefined)).toMatchObject({ release: true, slot: third.slot });
    await limiter.end({ keyId: id, scopes, member: third.member, actual: undefined, release: true, slot: third.slot });
    await limiter.end({ keyId: id, scopes, ...allowances.finishOf(first, undefined) });
    expect(await a.redis.zcard(slots)).toBe(0);
    await allowances.close();
    limiter.close();
  });

  it("grants nothing from small budgets: every request of a 60 rpm or a 10-slot key is checked", async () => {
    const { limiter, allowances } = gateway(a);
    for (const [id, limits] of [
      ["key_grant0000006", { rpm: 60 }],
      ["key_grant0000007", { max_concurrency: 10, rpm: 100_000 }],
    ] as const) {
      const scopes = scope(limits);
      for (let i = 0; i < 5; i++) expect((await allowances.admit(id, scopes, 0)).grant).toBeUndefined();
      expect(await a.redis.zcard(stateKey(a, id, scopes[0] as Scope, "w"))).toBe(5);
    }
    await allowances.close();
    limiter.close();
  });
});
