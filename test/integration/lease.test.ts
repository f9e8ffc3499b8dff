import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Lease } from "../../src/redis/lease.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PREFIX = `test-lease-${randomUUID()}`;
let server: PrivateRedis;
let redis: Redis;
let other: Redis;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.url);
  // The second scaler has its own connection, as a separate process would.
  other = new Redis(server.url);
});

afterAll(async () => {
  redis.disconnect();
  other.disconnect();
  await server.stop();
});

const keyFor = (name: string) => `${PREFIX}:${name}`;

/** Polls until the key is gone: the lease expired in Redis. Waits on Redis itself, not a guessed duration. */
async function untilExpired(key: string): Promise<void> {
  while ((await redis.exists(key)) === 1) await new Promise((r) => setTimeout(r, 20));
}

describe("Lease", () => {
  it("goes to exactly one of two scalers", async () => {
    const key = keyFor("one-of-two");
    const a = new Lease(redis, key, "scaler-a", 30_000);
    const b = new Lease(other, key, "scaler-b", 30_000);
    const [gotA, gotB] = await Promise.all([a.tryAcquire(), b.tryAcquire()]);
    expect([gotA, gotB].filter(Boolean)).toHaveLength(1);
    const [winner, loser] = gotA ? [a, b] : [b, a];
    expect(await Lease.holder(redis, key)).toBe(winner.holderId);
    // Trying again changes nothing: the holder keeps it, the other still cannot take it.
    expect(await winner.tryAcquire()).toBe(true);
    expect(await loser.tryAcquire()).toBe(false);
    expect(await Lease.holder(redis, key)).toBe(winner.holderId);
  });

  it("is renewed only by its holder", async () => {
    const key = keyFor("renew");
    const a = new Lease(redis, key, "scaler-a", 30_000);
    const b = new Lease(other, key, "scaler-b", 30_000);
    expect(await a.tryAcquire()).toBe(true);
    await redis.pexpire(key, 10_000);
    expect(await b.renew()).toBe(false);
    expect(await redis.pttl(key)).toBeLessThanOrEqual(10_000);
    expect(await a.renew()).toBe(true);
    expect(await redis.pttl(key)).toBeGreaterThan(10_000);
  });

  it("is not the lease of a restarted scaler that reuses the holder id", async () => {
    const key = keyFor("same-id");
    const before = new Lease(redis, key, "scaler-pod-0", 30_000);
    const after = new Lease(other, key, "scaler-pod-0", 30_000);
    expect(await before.tryAcquire()).toBe(true);
    expect(await after.tryAcquire()).toBe(false);
    expect(await after.renew()).toBe(false);
  });

  it("is released only by its holder, and then free at once", async () => {
    const key = keyFor("release");
    const a = new Lease(redis, key, "scaler-a", 30_000);
    const b = new Lease(other, key, "scaler-b", 30_000);
    expect(await a.tryAcquire()).toBe(true);
    await b.release();
    expect(await Lease.holder(redis, key)).toBe("scaler-a");
    await a.release();
    expect(await Lease.holder(redis, key)).toBeNull();
    expect(await b.tryAcquire()).toBe(true);
  });

  it("passes to the other scaler once the holder stops renewing, and the old holder cannot win it back", async () => {
    const key = keyFor("takeover");
    const a = new Lease(redis, key, "scaler-a", 300);
    const b = new Lease(other, key, "scaler-b", 30_000);
    expect(await a.tryAcquire()).toBe(true);
    expect(await b.tryAcquire()).toBe(false);
    // a stops renewing (it died); its lease runs out in Redis.
    await untilExpired(key);
    expect(await b.tryAcquire()).toBe(true);
    expect(await Lease.holder(redis, key)).toBe("scaler-b");
    // a comes back late: it must notice it lost leadership and leave b's lease alone.
    expect(await a.renew()).toBe(false);
    await a.release();
    expect(await Lease.holder(redis, key)).toBe("scaler-b");
    expect(await a.tryAcquire()).toBe(false);
  });

  it("refuses a TTL that is not a positive whole number of milliseconds", () => {
    expect(() => new Lease(redis, keyFor("bad"), "x", 0)).toThrow("lease ttlMs");
    expect(() => new Lease(redis, keyFor("bad"), "x", 1.5)).toThrow("lease ttlMs");
  });
});
