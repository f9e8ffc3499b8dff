/**
 * A lease in Redis: one holder at a time acts (the scaler that moves replica counts; the replica
 * that produces a derived file). The lease is a key holding the holder's token with a TTL; the
 * holder renews it well within the TTL, and when it dies the key expires and another's
 * tryAcquire succeeds.
 *
 * Renew and release compare the token inside Redis (Lua), so a holder whose
 * lease already expired and passed to someone else can neither extend nor
 * delete the new holder's lease.
 */
import { randomUUID } from "node:crypto";
import type { RedisClient } from "./connection.ts";
import { LuaScript } from "./scripts.ts";

const renewLease = new LuaScript(import.meta.url, "lease-renew");
const releaseLease = new LuaScript(import.meta.url, "lease-release");

/** Separates the readable holder id from the per-lease nonce in the stored token. */
const NONCE_SEPARATOR = "|";

export class Lease {
  readonly redis: RedisClient;
  readonly key: string;
  readonly holderId: string;
  readonly ttlMs: number;
  /**
   * Unique per instance: a restarted scaler reusing its holder id (same pod
   * name) must not mistake its predecessor's lease for its own.
   */
  readonly token: string;

  constructor(redis: RedisClient, key: string, holderId: string, ttlMs: number) {
    if (!Number.isInteger(ttlMs) || ttlMs <= 0)
      throw new Error(`lease ttlMs: expected a positive whole number of ms, got ${ttlMs}`);
    this.redis = redis;
    this.key = key;
    this.holderId = holderId;
    this.ttlMs = ttlMs;
    this.token = `${holderId}${NONCE_SEPARATOR}${randomUUID()}`;
  }

  /** Takes the lease if free; if this instance already holds it, renews it. True when held. */
  async tryAcquire(): Promise<boolean> {
    const set = await this.redis.set(this.key, this.token, "PX", this.ttlMs, "NX");
    return set === "OK" || this.renew();
  }

  /** Extends the TTL if this instance still holds the lease; false means leadership is lost. */
  async renew(): Promise<boolean> {
    const result = await renewLease.run(this.redis, [this.key], [this.token, String(this.ttlMs)]);
    return result === 1;
  }

  /** Gives the lease up at once (clean shutdown) so another scaler need not wait for the TTL. */
  async release(): Promise<void> {
    await releaseLease.run(this.redis, [this.key], [this.token]);
  }

  /** The holder id of whoever holds the lease now, for status output; null when nobody does. */
  static async holder(redis: RedisClient, key: string): Promise<string | null> {
    const token = await redis.get(key);
    if (token === null) return null;
    const at = token.lastIndexOf(NONCE_SEPARATOR);
    return at < 0 ? token : token.slice(0, at);
  }
}
