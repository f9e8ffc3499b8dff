/**
 * The gateway's memory of verified callers (auth.ts). A hit skips the Redis round trips of verifying
 * a bearer; a revocation or a change of a key, token or user (src/keys/changes.ts) drops the caller
 * at once, on every gateway, through a subscription of its own. The lifetime (CALLER_CACHE_MS) is
 * only the fallback for a message that never came; while the subscription is down nothing is
 * remembered, and whatever was is forgotten, since messages may have been missed meanwhile.
 */
import { type CallerChange, decodeCallerChange } from "../keys/changes.ts";
import type { Control } from "../redis/connection.ts";
import { type Subscription, subscribe } from "../redis/subscription.ts";
import type { Caller } from "./env.ts";

/** How long a verified caller is remembered when no change is heard of it. */
export const CALLER_CACHE_MS = 5000;

/** Bearers remembered at most; past it the memory starts over (bounded whatever the traffic). */
const MAX_ENTRIES = 10_000;

export class CallerCache {
  private readonly ctl: Control;
  private readonly entries = new Map<string, { caller: Caller; until: number }>();
  private subscription: Subscription | undefined;
  /** Whether messages are being heard now: only then is anything remembered. */
  private listening = false;
  /** Counts changes heard and subscriptions lost: a verification that began before one is not remembered. */
  private generation = 0;

  constructor(ctl: Control) {
    this.ctl = ctl;
  }

  async start(): Promise<void> {
    this.subscription = await subscribe(
      this.ctl,
      [this.ctl.keys.callerEvents],
      (_channel, message) => {
        const change = decodeCallerChange(message);
        if (change) this.forget(change);
      },
      {
        // Until Redis answers the next subscribe, messages may be lost: nothing is remembered meanwhile.
        onLost: () => {
          this.listening = false;
          this.clear();
        },
        onListening: () => {
          this.clear();
          this.listening = true;
        },
      },
    );
  }

  /** The caller `bearer` verified as, if remembered and still current. */
  get(bearer: string): Caller | undefined {
    const hit = this.entries.get(bearer);
    if (!hit) return undefined;
    if (hit.until > Date.now()) return hit.caller;
    this.entries.delete(bearer);
    return undefined;
  }

  /** Verifies with `verify` unless remembered; remembers the answer if no change was heard meanwhile. */
  async verify(bearer: string, verify: () => Promise<Caller | undefined>): Promise<Caller | undefined> {
    const hit = this.get(bearer);
    if (hit) return hit;
    const generation = this.generation;
    const caller = await verify();
    if (!caller || !this.listening || generation !== this.generation) return caller;
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    this.entries.set(bearer, {
      caller,
      until: Math.min(Date.now() + CALLER_CACHE_MS, caller.token?.expires ?? Number.POSITIVE_INFINITY),
    });
    return caller;
  }

  /** Drops every caller the change concerns: a key or user and the tokens acting as it, or one token. */
  forget(change: CallerChange): void {
    this.generation++;
    for (const [bearer, { caller }] of this.entries) {
      if (change.kind === "token" ? caller.token?.id === change.id : caller.id === change.id)
        this.entries.delete(bearer);
    }
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }

  /** How many callers are remembered (tests, metrics). */
  get size(): number {
    return this.entries.size;
  }

  async close(): Promise<void> {
    await this.subscription?.close();
    this.listening = false;
    this.clear();
  }
}
