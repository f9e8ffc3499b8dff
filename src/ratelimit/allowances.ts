/**
 * Budget a gateway holds ahead of its requests: a key with large limits is admitted without a
 * Redis round trip on each request. When a limited request is admitted through the script, it
 * asks for a grant as well: up to GRANT_REQUESTS more requests pre-admitted in Redis (each
 * logged and reserving a share of tokens there, as an admitted request is), and up to
 * GRANT_SLOTS concurrency slots. The gateway then admits that key's next requests from the grant
 * in memory, and asks for the next grant in the background when half is spent. A grant lives
 * GRANT_LIFETIME_MS; what it did not use is then given back. Every unit is taken in Redis by one
 * atomic script before any gateway spends it, so several gateways still never spend more than
 * one budget between them.
 *
 * The script grants at most 1/GRANT_FRACTION of what is left of any budget and nothing below
 * GRANT_MIN requests (lua/check.lua): small budgets and the last part of every budget are
 * spent one checked request at a time, exactly, as before. A grant's requests count as admitted
 * at its end (scored then in the log), so none leaves the window early. docs/traffic.md has the
 * trade-offs.
 */
import { randomUUID } from "node:crypto";
import {
  type Finish,
  type GrantRequest,
  limitsConcurrency,
  type RateLimiter,
  type Scope,
  type Verdict,
} from "./limiter.ts";
import { causeFields, logger } from "../telemetry/log.ts";

/** How long a grant may be spent: units a gateway holds unused are back within this. */
export const GRANT_LIFETIME_MS = 1_000;
/** The most requests one grant pre-admits. */
export const GRANT_REQUESTS = 64;
/** The most concurrency slots one grant holds: more requests at once fall back to the script. */
export const GRANT_SLOTS = 8;

const log = logger("ratelimit");

type Grant = {
  keyId: string;
  scopes: Scope[];
  /** Pre-admitted requests not yet handed out. */
  members: string[];
  size: number;
  /** Tokens each pre-admitted request reserves: a larger request goes through the script. */
  share: number;
  /** Slots none of its requests holds now; `slotted`: the key has a concurrency limit. */
  freeSlots: string[];
  slotted: boolean;
  /** When it may no longer be spent (performance.now()), and the scopes' state it came with. */
  deadline: number;
  state: Verdict;
  received: number;
  done: boolean;
};

/** What a request was admitted with: the verdict, its member in the limiter, and the grant and slot it came from, if any. */
export type Ticket = { verdict: Verdict; member: string; grant?: Grant; slot?: string };

export class Allowances {
  private readonly limiter: RateLimiter;
  private readonly lifetimeMs: number;
  /** The grant in use, per key and set of scopes with their limits. */
  private readonly grants = new Map<string, Grant>();
  /** Keys and scopes with a grant asked for and not yet answered. */
  private readonly asking = new Set<string>();
  private readonly pending = new Set<Promise<void>>();

  constructor(limiter: RateLimiter, options: { lifetimeMs?: number } = {}) {
    this.limiter = limiter;
    this.lifetimeMs = options.lifetimeMs ?? GRANT_LIFETIME_MS;
  }

  /**
   * Admits a request of `tokens` from a grant held here, or through the script (asking for a grant
   * on the way). A request that counts as several (`requests`, an image request's images) always
   * goes through the script: a grant's units are one request each.
   */
  async admit(keyId: string, scopes: Scope[], tokens: number, requests = 1): Promise<Ticket> {
    if (requests > 1) {
      const member = randomUUID();
      return { verdict: await this.limiter.admit(keyId, scopes, member, tokens, undefined, requests), member };
    }
    const sig = signature(keyId, scopes);
    const held = this.grants.get(sig);
    if (held && performance.now() >= held.deadline) this.retire(sig, held);
    else if (held && held.members.length > 0 && tokens <= held.share && (!held.slotted || held.freeSlots.length > 0)) {
      const member = held.members.pop() as string;
      const slot = held.slotted ? held.freeSlots.pop() : undefined;
      if (held.members.length <= held.size / 2) this.refill(sig, keyId, scopes, held.share);
      const verdict = view(held);
      if (held.members.length === 0) this.retire(sig, held);
      return { verdict, member, grant: held, slot };
    }
    const member = randomUUID();
    const share = Math.max(1, tokens) * 2;
    const sent = performance.now();
    // One grant asked for at a time per key and scopes: a burst of requests checked at once must
    // not each take a grant that no later request here would spend.
    const asks = !this.asking.has(sig);
    if (asks) this.asking.add(sig);
    let verdict: Verdict;
    try {
      verdict = await this.limiter.admit(keyId, scopes, member, tokens, asks ? this.ask(share) : undefined);
    } finally {
      if (asks) this.asking.delete(sig);
    }
    if (verdict.granted) {
      const grant = this.install(
        sig,
        keyId,
        scopes,
        { share, sent, state: verdict },
        verdict.granted.members,
        verdict.granted.slots,
      );
      return { verdict: view(grant), member };
    }
    return { verdict, member };
  }

  /**
   * The limiter's part of an admitted request's end. A slot from a grant still in use goes back to
   * that grant here, with nothing to write; from a grant already over, it is released in Redis.
   */
  finishOf(t: Ticket, actual: number | undefined): Omit<Finish, "keyId" | "scopes"> {
    if (!t.grant) return { member: t.member, actual, release: true };
    if (t.slot === undefined) return { member: t.member, actual, release: false };
    if (!t.grant.done) {
      t.grant.freeSlots.push(t.slot);
      return { member: t.member, actual, release: false };
    }
    return { member: t.member, actual, release: true, slot: t.slot };
  }

  /** Gives back every grant's unused part (the gateway is closing), once the grants asked for have arrived. */
  async close(): Promise<void> {
    await Promise.all(this.pending);
    for (const [sig, grant] of this.grants) this.retire(sig, grant);
    await Promise.all(this.pending);
  }

  private ask(share: number): GrantRequest {
    return { requests: GRANT_REQUESTS, share, slots: GRANT_SLOTS, lifetimeMs: this.lifetimeMs };
  }

  /** The next grant, asked for off any request's path: one pre-admitted request more becomes part of it. */
  private refill(sig: string, keyId: string, scopes: Scope[], share: number): void {
    if (this.asking.has(sig)) return;
    this.asking.add(sig);
    const member = randomUUID();
    const sent = performance.now();
    this.track(
      this.limiter
        .admit(keyId, scopes, member, share, this.ask(share))
        .then(async (verdict) => {
          if (!verdict.admitted) return;
          const slots = limitsConcurrency(scopes) ? [member] : [];
          if (verdict.granted)
            this.install(
              sig,
              keyId,
              scopes,
              { share, sent, state: verdict },
              [member, ...verdict.granted.members],
              [...slots, ...verdict.granted.slots],
            );
          // Room for one more but not for a grant: the budget is near its end, give the one back.
          else await this.limiter.giveBack(keyId, scopes, [member], slots);
        })
        .finally(() => this.asking.delete(sig)),
      "asking for a rate-limit grant",
    );
  }

  /**
   * Puts a grant in use. Its lifetime runs from when it was asked for, before Redis stamped its
   * log entries (at its clock's now + lifetime): every unit is spent before that time comes.
   */
  private install(
    sig: string,
    keyId: string,
    scopes: Scope[],
    how: { share: number; sent: number; state: Verdict },
    members: string[],
    slots: string[],
  ): Grant {
    const before = this.grants.get(sig);
    if (before) this.retire(sig, before);
    const grant: Grant = {
      keyId,
      scopes,
      members,
      size: members.length,
      share: how.share,
      freeSlots: slots,
      slotted: limitsConcurrency(scopes),
      deadline: how.sent + this.lifetimeMs,
      state: how.state,
      received: performance.now(),
      done: false,
    };
    this.grants.set(sig, grant);
    setTimeout(() => this.retire(sig, grant), Math.max(0, grant.deadline - performance.now())).unref();
    return grant;
  }

  /** A grant ends: what it did not hand out goes back (slots its requests still hold go with their ends). */
  private retire(sig: string, grant: Grant): void {
    if (grant.done) return;
    grant.done = true;
    if (this.grants.get(sig) === grant) this.grants.delete(sig);
    const members = grant.members.splice(0);
    const slots = grant.freeSlots.splice(0);
    this.track(
      this.limiter.giveBack(grant.keyId, grant.scopes, members, slots),
      "giving back an unused rate-limit grant",
    );
  }

  private track(work: Promise<void>, what: string): void {
    const done = work.catch((e: unknown) =>
      log.error(causeFields(e), `${what} failed: ${e instanceof Error ? e.message : String(e)}`),
    );
    this.pending.add(done);
    void done.finally(() => this.pending.delete(done));
  }
}

/** A key's grants are per set of scopes and their limits: a changed limit starts afresh. */
function signature(keyId: string, scopes: Scope[]): string {
  return `${keyId} ${JSON.stringify(scopes)}`;
}

/**
 * The state a request admitted from `grant` reports (its x-ratelimit-* headers): the scopes as the
 * grant found them, less what it has not handed out yet, its resets counted down since.
 */
function view(grant: Grant): Verdict {
  const unspent = grant.members.length;
  const elapsed = performance.now() - grant.received;
  return {
    admitted: true,
    retry_after_ms: 0,
    exceeded: [],
    never: false,
    scopes: grant.state.scopes.map((s) => ({
      ...s,
      requests: s.requests - unspent,
      tokens: s.scope.limits.tpm === undefined ? s.tokens : s.tokens - unspent * grant.share,
      reset_ms: Math.max(0, s.reset_ms - elapsed),
    })),
  };
}
