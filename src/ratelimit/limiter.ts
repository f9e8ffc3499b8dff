/**
 * Rate-limit state in Redis: requests and tokens per minute (a sliding log per scope) and
 * requests in flight (leases renewed while a request lives), per API key and per model through a
 * key, shared by every gateway process so that any number of them spend one budget. Each check
 * and each request's end is one Lua script over one key's hash tag (lua/check.lua,
 * lua/finish.lua), atomic across gateways and on the Redis clock. docs/traffic.md describes the
 * algorithm; this is its one implementation.
 */
import type { ChainableCommander } from "ioredis";
import { hasScopeLimits, type KeyLimits, type ScopeLimits } from "./limits.ts";
import { causeFields, logger } from "../telemetry/log.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";

const log = logger("ratelimit");

/** The window of rpm and tpm. */
export const WINDOW_MS = 60_000;
/** How long a concurrency slot outlives its gateway's last renewal. */
export const LEASE_MS = 30_000;

/** One set of limits and the name its state is kept under: "key" (the key as a whole) or "model:<name>". */
export type Scope = { name: string; limits: ScopeLimits };
export type LimitKind = "requests" | "tokens" | "concurrency";

/** A scope's state after a check (admitted requests included). `reset_ms`: until its window is empty. */
export type ScopeState = { scope: Scope; requests: number; tokens: number; in_flight: number; reset_ms: number };

export type Verdict = {
  admitted: boolean;
  /** Until the request would fit (0 when admitted). */
  retry_after_ms: number;
  /** The scopes and limits that refused it. */
  exceeded: { scope: Scope; kind: LimitKind }[];
  /** The request's tokens alone exceed a tpm limit: it can never be admitted as it is. */
  never: boolean;
  scopes: ScopeState[];
  /** What came with an admission that asked for a grant (members as lua/check.lua names them); absent when none. */
  granted?: { members: string[]; slots: string[] };
};

/** A grant asked for with an admission: at most `requests` more, each reserving `share` tokens, at most `slots` slots, usable for `lifetimeMs`. */
export type GrantRequest = { requests: number; share: number; slots: number; lifetimeMs: number };

/** The scopes that apply to a request for `model` (only the key's own without a model); scopes without limits are left out. */
export function scopesFor(limits: KeyLimits | undefined, model?: string): Scope[] {
  if (!limits) return [];
  const scopes: Scope[] = [];
  if (hasScopeLimits(limits)) scopes.push({ name: "key", limits });
  const own = model === undefined ? undefined : limits.models?.[model];
  if (model !== undefined && own && hasScopeLimits(own)) scopes.push({ name: `model:${model}`, limits: own });
  return scopes;
}

/** Whether any of the scopes limits requests in flight (and so holds slots). */
export function limitsConcurrency(scopes: Scope[]): boolean {
  return scopes.some((s) => s.limits.max_concurrency !== undefined);
}

/**
 * A scope's keys: `w`, a sorted set, request → admitted at (ms); `t`, a hash, request → tokens, and `sum`;
 * `s`, a sorted set, request → its lease's expiry (ms).
 */
export function stateKey(ctl: Control, keyId: string, scope: Scope, part: "w" | "t" | "s"): string {
  return `${ctl.keys.rateLimit(keyId)}:${scope.name}:${part}`;
}

const check = new LuaScript(import.meta.url, "check");
const finish = new LuaScript(import.meta.url, "finish");
const renew = new LuaScript(import.meta.url, "renew");
const giveBack = new LuaScript(import.meta.url, "give-back");

export type RateLimiterOptions = {
  windowMs?: number;
  leaseMs?: number;
  /**
   * A request older than this is no longer renewed, whatever this process believes: a bound on
   * any bookkeeping slip (the gateway's request timeout and then some).
   */
  maxLifetimeMs?: number;
};

type Held = { keyId: string; slots: string[]; since: number };

/**
 * A request's end in the limiter: its slots released (`release`: its own, or `slot`, one a grant
 * gave) and its tokens settled to `actual` (undefined: the reservation stands, the real count
 * being unknown).
 */
export type Finish = {
  keyId: string;
  scopes: Scope[];
  member: string;
  actual: number | undefined;
  release: boolean;
  slot?: string;
};

export class RateLimiter {
  private readonly ctl: Control;
  readonly windowMs: number;
  readonly leaseMs: number;
  private readonly maxLifetimeMs: number;
  /** Requests this process holds concurrency slots for, by member: renewed until released. */
  private readonly held = new Map<string, Held>();
  private timer: NodeJS.Timeout | undefined;
  private renewFailed = false;

  constructor(ctl: Control, options: RateLimiterOptions = {}) {
    this.ctl = ctl;
    this.windowMs = options.windowMs ?? WINDOW_MS;
    this.leaseMs = options.leaseMs ?? LEASE_MS;
    this.maxLifetimeMs = options.maxLifetimeMs ?? 15 * 60_000;
  }

  private keysOf(keyId: string, scopes: Scope[]): string[] {
    return scopes.flatMap((s) => [
      stateKey(this.ctl, keyId, s, "w"),
      stateKey(this.ctl, keyId, s, "t"),
      stateKey(this.ctl, keyId, s, "s"),
    ]);
  }

  /**
   * Admits a request of `tokens` (or refuses it) against every scope at once: all or nothing.
   * With `grant`, the same script may also pre-admit more requests and slots for this process to
   * hand out itself (allowances.ts); it holds and renews the granted slots until each is
   * released by `end` or given back. `requests`: how many requests it counts as toward rpm (an
   * image request: one per image); it holds one concurrency slot whatever the count.
   */
  async admit(
    keyId: string,
    scopes: Scope[],
    member: string,
    tokens: number,
    grant?: GrantRequest,
    requests = 1,
  ): Promise<Verdict> {
    const verdict = await this.run("admit", keyId, scopes, member, tokens, grant, requests);
    if (verdict.admitted && limitsConcurrency(scopes)) {
      const slots = scopes
        .filter((s) => s.limits.max_concurrency !== undefined)
        .map((s) => stateKey(this.ctl, keyId, s, "s"));
      const since = Date.now();
      for (const m of [member, ...(verdict.granted?.slots ?? [])]) this.held.set(m, { keyId, slots, since });
      this.timer ??= setInterval(() => void this.renewAll(), Math.max(1, Math.floor(this.leaseMs / 3))).unref();
    }
    return verdict;
  }

  /** Gives back what a grant did not use: requests (their log entries and tokens) and free slots. */
  async giveBack(keyId: string, scopes: Scope[], members: string[], slots: string[]): Promise<void> {
    if (members.length + slots.length === 0) return;
    for (const slot of slots) this.held.delete(slot);
    await giveBack.run(this.ctl.redis, this.keysOf(keyId, scopes), [members.length, ...members, ...slots]);
  }

  /** The scopes' state, admitting nothing (the headers of a limited key's other responses). */
  peek(keyId: string, scopes: Scope[]): Promise<Verdict> {
    return this.run("peek", keyId, scopes, "", 0);
  }

  /**
   * The request ended: its slots are released and its reservation settles to `actual` tokens
   * (`undefined` keeps the reservation, when the real count is unknown).
   */
  async finish(keyId: string, scopes: Scope[], member: string, actual: number | undefined): Promise<void> {
    await this.end({ keyId, scopes, member, actual, release: true });
  }

  /** A real count that arrived after the request ended (a client that left before the worker's report). */
  async settle(keyId: string, scopes: Scope[], member: string, actual: number): Promise<void> {
    await this.end({ keyId, scopes, member, actual, release: false });
  }

  /** A request's end, on its own. */
  async end(f: Finish): Promise<void> {
    if (f.release) this.held.delete(f.slot ?? f.member);
    await finish.run(this.ctl.redis, this.keysOf(f.keyId, f.scopes), this.finishArgs(f));
  }

  /** A request's end appended to `pipeline` (all its keys in the API key's slot). Its slots stop being renewed now. */
  finishInto(pipeline: ChainableCommander, f: Finish): void {
    if (f.release) this.held.delete(f.slot ?? f.member);
    finish.queue(pipeline, this.keysOf(f.keyId, f.scopes), this.finishArgs(f));
  }

  private finishArgs(f: Finish): (string | number)[] {
    const args = [f.member, f.actual === undefined ? "" : Math.max(0, Math.round(f.actual)), f.release ? "1" : "0"];
    return f.slot === undefined ? args : [...args, f.slot];
  }

  /** Requests this process holds slots for (tests and metrics). */
  get holding(): number {
    return this.held.size;
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async run(
    mode: "admit" | "peek",
    keyId: string,
    scopes: Scope[],
    member: string,
    tokens: number,
    grant?: GrantRequest,
    requests = 1,
  ): Promise<Verdict> {
    const args: (string | number)[] = [mode, member, Math.max(0, Math.round(tokens)), this.windowMs, this.leaseMs];
    args.push(
      grant?.requests ?? 0,
      Math.max(0, Math.round(grant?.share ?? 0)),
      grant?.slots ?? 0,
      grant?.lifetimeMs ?? 0,
      Math.max(1, Math.round(requests)),
    );
    for (const s of scopes) args.push(s.limits.rpm ?? 0, s.limits.tpm ?? 0, s.limits.max_concurrency ?? 0);
    const raw = (await check.run(this.ctl.redis, this.keysOf(keyId, scopes), args)) as (number | string)[];
    const states: ScopeState[] = scopes.map((scope, i) => ({
      scope,
      requests: Number(raw[4 + 4 * i]),
      tokens: Number(raw[5 + 4 * i]),
      in_flight: Number(raw[6 + 4 * i]),
      reset_ms: Number(raw[7 + 4 * i]),
    }));
    const exceeded = String(raw[3])
      .split(",")
      .filter(Boolean)
      .map((e) => {
        const [i, kind] = e.split(":");
        return { scope: scopes[Number(i)] as Scope, kind: kind as LimitKind };
      });
    const verdict: Verdict = {
      admitted: Number(raw[0]) === 1,
      retry_after_ms: Number(raw[1]),
      never: Number(raw[2]) === 1,
      exceeded,
      scopes: states,
    };
    const grantedRequests = Number(raw[4 + 4 * scopes.length]);
    if (grantedRequests > 0) {
      const slots = Number(raw[5 + 4 * scopes.length]);
      verdict.granted = {
        members: Array.from({ length: grantedRequests }, (_, k) => `${member}:${k + 1}`),
        slots: Array.from({ length: slots }, (_, k) => `${member}:s${k + 1}`),
      };
    }
    return verdict;
  }

  /** Moves the leases of every request still held here forward; one script per slots set. */
  private async renewAll(): Promise<void> {
    const bySet = new Map<string, string[]>();
    const oldest = Date.now() - this.maxLifetimeMs;
    for (const [member, h] of this.held) {
      if (h.since < oldest) {
        this.held.delete(member);
        continue;
      }
      for (const set of h.slots) {
        const members = bySet.get(set);
        if (members) members.push(member);
        else bySet.set(set, [member]);
      }
    }
    if (bySet.size === 0 && this.held.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const results = await Promise.allSettled(
      [...bySet].map(([set, members]) => renew.run(this.ctl.redis, [set], [this.leaseMs, ...members])),
    );
    const failed = results.find((r) => r.status === "rejected");
    // One line per outage: a lease that lapses meanwhile only lets a request more through, never fewer.
    if (failed && !this.renewFailed)
      log.warn(causeFields((failed as PromiseRejectedResult).reason), "renewing concurrency leases failed (retrying)");
    this.renewFailed = failed !== undefined;
  }
}
