/**
 * Rate-limit state in Redis: requests and tokens per minute and requests in flight per API key
 * (and per model through a key), shared by every gateway process, so that any number of them
 * spend one budget. docs/traffic.md describes the algorithm; this is its one implementation.
 *
 * - Requests and tokens: a sliding log. Each admitted request is an entry in a sorted set
 *   scored by the Redis clock's milliseconds; its reserved tokens sit beside it in a hash with
 *   a running `sum`. A check first drops the entries older than the window (subtracting their
 *   tokens), so "60 rpm" means at most 60 admissions in any 60 seconds, with no boundary at
 *   which a fixed window would let twice the budget through. Memory: one entry per request
 *   admitted in the last window, and the keys expire a window after the last admission.
 * - Concurrency: a sorted set of leases scored by their expiry. The gateway holding a request
 *   renews its leases while the request lives and removes its lease when it ends; a gateway
 *   that crashes stops renewing, and its slots lapse within one lease.
 *
 * Every check is one Lua script over one key's keys (one hash tag, see contracts/naming.ts), so
 * it is atomic across gateways and runs on a Redis Cluster. The clock is Redis's (TIME), so
 * gateways with skewed clocks still agree. A request's end (release and settle) is one script
 * too, which the gateway sends in a pipeline with the request's usage (finishInto).
 */
import { createHash } from "node:crypto";
import type { ChainableCommander } from "ioredis";
import type { KeyLimits, ScopeLimits } from "../contracts/limits.ts";
import { hasScopeLimits } from "../contracts/limits.ts";
import { causeFields, logger } from "../telemetry/log.ts";
import type { Control, RedisClient } from "./redis.ts";

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
  /** What came with an admission that asked for a grant (members as CHECK names them); absent when none. */
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

/** A grant takes at most this fraction (1/n) of what is left of any budget... */
export const GRANT_FRACTION = 16;
/** ...and is not made for fewer requests than this: near its end a budget is spent one checked request at a time. */
export const GRANT_MIN = 4;

/**
 * KEYS: per scope its `w` (log), `t` (tokens) and `s` (slots).
 * ARGV: mode ("admit" or "peek"), member, tokens, window ms, lease ms, then the grant asked for
 * with an admission (most requests, tokens each, most slots, lifetime ms; 0 requests: none),
 * then per scope rpm, tpm, max concurrency (0: none).
 * Returns {admitted, retry after ms, never, "i:kind,..." exceeded, then per scope requests, tokens,
 * in flight, reset ms, then the requests and slots granted}. Granted requests are the members
 * `<member>:1..n`, granted slots `<member>:s1..n`.
 *
 * It runs before every limited request is queued, and Redis runs it while the request waits, so
 * its admission reads and writes as little as it can (9 commands for a scope with all three
 * limits, where a plain form takes 13): it reads only what a scope limits (a peek reads all);
 * the running sum comes with the tokens of the entries leaving the window in one HMGET and is
 * written once, with the new reservation; live leases are counted, not first swept (a crashed
 * gateway's expired ones go when the expiries are re-armed); and the log's and tokens'
 * expiries are re-armed only every tenth of a window, to a window and a tenth (`armed` in `t`
 * says when), so each still outlives its last admission by a window. The slots set is emptied
 * and so deleted by most request ends, so its lease-long expiry is set on every admission.
 */
const CHECK = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Numbers passed to redis.call are formatted each time: the ones used more than once go as strings.
local nowText = string.format('%d', now)
local mode, member, need = ARGV[1], ARGV[2], tonumber(ARGV[3])
local window, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local grantMax, share, slotsMax, life = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local admit = mode == 'admit'
local horizon = now - window
local rearm = math.floor(window / 10)
local n = #KEYS / 3
local state = {}
local wait, never, exceeded = 0, 0, {}
for i = 0, n - 1 do
  local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local rpm, tpm, conc = tonumber(ARGV[10 + 3 * i]), tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i])
  local log = rpm > 0 or tpm > 0
  local old = redis.call('ZRANGEBYSCORE', w, '-inf', horizon)
  local sum, armed, freed = 0, 0, 0
  if log or #old > 0 or not admit then
    -- The sum and when the expiries were armed, with the tokens of (the first) entries leaving the window.
    local first = math.min(#old, 1000)
    local got = redis.call('HMGET', tk, 'sum', 'armed', unpack(old, 1, first))
    sum, armed = tonumber(got[1] or '0'), tonumber(got[2] or '0')
    for k = 3, #got do if got[k] then freed = freed + tonumber(got[k]) end end
    if #old > 0 then
      redis.call('HDEL', tk, unpack(old, 1, first))
      for j = first + 1, #old, 1000 do
        local last = math.min(j + 999, #old)
        local more = redis.call('HMGET', tk, unpack(old, j, last))
        for k = 1, #more do if more[k] then freed = freed + tonumber(more[k]) end end
        redis.call('HDEL', tk, unpack(old, j, last))
      end
      redis.call('ZREMRANGEBYSCORE', w, '-inf', horizon)
    end
  end
  sum = sum - freed
  local count = 0
  if rpm > 0 or not admit then count = redis.call('ZCARD', w) end
  local inflight = 0
  if conc > 0 or not admit then
    -- Without a log there is no re-arming to sweep expired leases: this admission does.
    if not log then redis.call('ZREMRANGEBYSCORE', s, '-inf', nowText) end
    inflight = redis.call('ZCOUNT', s, '(' .. nowText, '+inf')
  end
  if admit then
    if rpm > 0 and count + 1 > rpm then
      local e = redis.call('ZRANGE', w, count - rpm, count - rpm, 'WITHSCORES')
      wait = math.max(wait, tonumber(e[2]) + window - now)
      exceeded[#exceeded + 1] = i .. ':requests'
    end
    if tpm > 0 and sum + need > tpm then
      exceeded[#exceeded + 1] = i .. ':tokens'
      if need > tpm then
        never = 1
      else
        local excess = sum + need - tpm
        local entries = redis.call('ZRANGE', w, 0, -1, 'WITHSCORES')
        local gone = 0
        for j = 1, #entries, 2 do
          gone = gone + tonumber(redis.call('HGET', tk, entries[j]) or '0')
          if gone >= excess then
            wait = math.max(wait, tonumber(entries[j + 1]) + window - now)
            break
          end
        end
      end
    end
    if conc > 0 and inflight + 1 > conc then
      exceeded[#exceeded + 1] = i .. ':concurrency'
      -- Nobody knows when a request in flight ends: a second is a polite hint.
      wait = math.max(wait, 1000)
    end
  end
  -- {requests, tokens, in flight, sum to write, expiries armed at}
  state[i + 1] = {count, sum, inflight, freed ~= 0, armed}
end
-- A grant (gateway/allowances.ts): as many more requests as fit in every scope's remaining
-- budget divided by GRANT_FRACTION (tokens: a share each), and concurrency slots alike; none
-- below GRANT_MIN, so a budget near its end is spent one checked request at a time.
local granted, slotted = 0, 0
if admit and #exceeded == 0 and grantMax > 0 then
  local b, c, needsSlots = grantMax, slotsMax, false
  for i = 0, n - 1 do
    local rpm, tpm, conc = tonumber(ARGV[10 + 3 * i]), tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i])
    local st = state[i + 1]
    if rpm > 0 then b = math.min(b, math.floor((rpm - st[1] - 1) / GRANT_FRACTION)) end
    if tpm > 0 then b = math.min(b, math.floor((tpm - st[2] - need) / (GRANT_FRACTION * math.max(share, 1)))) end
    if conc > 0 then
      needsSlots = true
      c = math.min(c, math.floor((conc - st[3] - 1) / GRANT_FRACTION))
    end
  end
  if b >= GRANT_MIN and (not needsSlots or c >= 1) then
    granted = b
    if needsSlots then slotted = c end
  end
end
-- Granted requests may be spent until now + life: they (and the request with them) are logged
-- as admitted then, so none leaves the window before a window has passed since its use.
local score = nowText
if granted > 0 then score = string.format('%d', now + life) end
local admitted = 0
if admit and #exceeded == 0 then
  admitted = 1
  for i = 0, n - 1 do
    local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
    local rpm, tpm, conc = tonumber(ARGV[10 + 3 * i]), tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i])
    local st = state[i + 1]
    if rpm > 0 or tpm > 0 then
      local entries, fields = {score, member}, {}
      for k = 1, granted do
        entries[#entries + 1] = score
        entries[#entries + 1] = member .. ':' .. k
      end
      redis.call('ZADD', w, unpack(entries))
      st[1] = st[1] + 1 + granted
      if tpm > 0 then
        st[2] = st[2] + need + granted * share
        fields = {member, ARGV[3]}
        for k = 1, granted do
          fields[#fields + 1] = member .. ':' .. k
          fields[#fields + 1] = ARGV[7]
        end
        st[4] = true
      end
      -- Fresh: armed less than a tenth of a window ago, so both keys outlive this admission by a
      -- window. A grant always re-arms them.
      local stale = granted > 0 or now - st[5] >= rearm
      if stale then
        fields[#fields + 1] = 'armed'
        fields[#fields + 1] = nowText
      end
      if st[4] then
        fields[#fields + 1] = 'sum'
        fields[#fields + 1] = st[2]
        st[4] = false
      end
      if #fields > 0 then redis.call('HSET', tk, unpack(fields)) end
      if stale then
        -- A grant's entries are scored life ahead: the keys outlive them by a window too.
        local keep = window + rearm
        if granted > 0 then keep = keep + life end
        redis.call('PEXPIRE', w, keep)
        redis.call('PEXPIRE', tk, keep)
        redis.call('ZREMRANGEBYSCORE', s, '-inf', nowText)
      end
    end
    if conc > 0 then
      local until_ = now + lease
      local slots = {until_, member}
      for k = 1, slotted do
        slots[#slots + 1] = until_
        slots[#slots + 1] = member .. ':s' .. k
      end
      redis.call('ZADD', s, unpack(slots))
      redis.call('PEXPIRE', s, ARGV[5])
      st[3] = st[3] + 1 + slotted
    end
  end
end
local out = {admitted, wait, never, table.concat(exceeded, ',')}
for i = 0, n - 1 do
  local st = state[i + 1]
  -- A sum changed by entries leaving the window and not written with a reservation.
  if st[4] then redis.call('HSET', KEYS[3 * i + 2], 'sum', st[2]) end
  local reset = 0
  if admitted == 1 and (tonumber(ARGV[10 + 3 * i]) > 0 or tonumber(ARGV[11 + 3 * i]) > 0) then
    -- Its newest entry is the one just added.
    reset = tonumber(score) - now + window
  else
    local newest = redis.call('ZRANGE', KEYS[3 * i + 1], -1, -1, 'WITHSCORES')
    if #newest > 0 then reset = math.max(0, tonumber(newest[2]) + window - now) end
  end
  out[#out + 1] = st[1]
  out[#out + 1] = st[2]
  out[#out + 1] = st[3]
  out[#out + 1] = reset
end
out[#out + 1] = granted
out[#out + 1] = slotted
return out
`.replaceAll("GRANT_FRACTION", String(GRANT_FRACTION)).replaceAll("GRANT_MIN", String(GRANT_MIN));

/**
 * KEYS: per scope its `w`, `t` and `s`. ARGV: member, actual tokens ("" keeps the reservation),
 * "1" to release a slot, and the slot (the member's own when absent).
 * Settling only changes an entry still in the window: one that has left it counts no more anyway.
 */
const FINISH = `
local slot = ARGV[4] or ARGV[1]
for i = 0, #KEYS / 3 - 1 do
  local tk, s = KEYS[3 * i + 2], KEYS[3 * i + 3]
  if ARGV[3] == '1' then redis.call('ZREM', s, slot) end
  if ARGV[2] ~= '' then
    local got = redis.call('HMGET', tk, ARGV[1], 'sum')
    if got[1] then
      local actual = tonumber(ARGV[2])
      redis.call('HSET', tk, ARGV[1], actual, 'sum', tonumber(got[2] or '0') + actual - tonumber(got[1]))
    end
  end
end
return 1
`;

/**
 * What a grant did not use, given back. KEYS: per scope its `w`, `t` and `s`. ARGV: the number n
 * of requests, those n members, then slots. Each request leaves the log and its tokens the sum.
 * Nothing is written to a key that has expired meanwhile (it would live forever).
 */
const GIVE_BACK = `
local n = tonumber(ARGV[1])
for i = 0, #KEYS / 3 - 1 do
  local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  if n > 0 then
    redis.call('ZREM', w, unpack(ARGV, 2, n + 1))
    local got = redis.call('HMGET', tk, 'sum', unpack(ARGV, 2, n + 1))
    if got[1] then
      local freed = 0
      for k = 2, #got do if got[k] then freed = freed + tonumber(got[k]) end end
      redis.call('HDEL', tk, unpack(ARGV, 2, n + 1))
      redis.call('HSET', tk, 'sum', tonumber(got[1]) - freed)
    end
  end
  if #ARGV > n + 1 then redis.call('ZREM', s, unpack(ARGV, n + 2, #ARGV)) end
end
return 1
`;

/** KEYS[1]: a slots set. ARGV: lease ms, then the members still in flight: their leases move to now + lease (only those still there). */
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ = now + tonumber(ARGV[1])
for j = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[j]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
`;

/**
 * A scope's keys: `w`, a sorted set, request → admitted at (ms); `t`, a hash, request → tokens, and `sum`;
 * `s`, a sorted set, request → its lease's expiry (ms).
 */
export function stateKey(ctl: Control, keyId: string, scope: Scope, part: "w" | "t" | "s"): string {
  return `${ctl.keys.rateLimit(keyId)}:${scope.name}:${part}`;
}

/** A Lua script sent by its SHA-1, and in full only when this Redis has not seen it yet (or forgot it after a restart). */
class Script {
  private readonly lua: string;
  private readonly sha: string;
  constructor(lua: string) {
    this.lua = lua;
    this.sha = createHash("sha1").update(lua).digest("hex");
  }
  async run(redis: RedisClient, keys: string[], args: (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!isNoScript(e)) throw e;
      return redis.eval(this.lua, keys.length, ...keys, ...args);
    }
  }
  /** By its SHA-1 only: a pipeline's caller re-runs it with `run` if Redis answers NOSCRIPT. */
  queue(pipeline: ChainableCommander, keys: string[], args: (string | number)[]): void {
    pipeline.evalsha(this.sha, keys.length, ...keys, ...args);
  }
}

export function isNoScript(e: unknown): boolean {
  return e instanceof Error && e.message.startsWith("NOSCRIPT");
}

const check = new Script(CHECK);
const finish = new Script(FINISH);
const renew = new Script(RENEW);
const giveBack = new Script(GIVE_BACK);

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
export type Finish = { keyId: string; scopes: Scope[]; member: string; actual: number | undefined; release: boolean; slot?: string };

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
    return scopes.flatMap((s) => [stateKey(this.ctl, keyId, s, "w"), stateKey(this.ctl, keyId, s, "t"), stateKey(this.ctl, keyId, s, "s")]);
  }

  /**
   * Admits a request of `tokens` (or refuses it) against every scope at once: all or nothing.
   * With `grant`, the same script may also pre-admit more requests and slots for this process to
   * hand out itself (gateway/allowances.ts); it holds and renews the granted slots until each is
   * released by `end` or given back.
   */
  async admit(keyId: string, scopes: Scope[], member: string, tokens: number, grant?: GrantRequest): Promise<Verdict> {
    const verdict = await this.run("admit", keyId, scopes, member, tokens, grant);
    if (verdict.admitted && limitsConcurrency(scopes)) {
      const slots = scopes.filter((s) => s.limits.max_concurrency !== undefined).map((s) => stateKey(this.ctl, keyId, s, "s"));
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

  /**
   * A request's end appended to `pipeline` (all its keys in the API key's slot). Its slots stop
   * being renewed now. If the pipeline's answer for it is a NOSCRIPT error (a Redis that lost its
   * scripts), send it again with `end`.
   */
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

  private async run(mode: "admit" | "peek", keyId: string, scopes: Scope[], member: string, tokens: number, grant?: GrantRequest): Promise<Verdict> {
    const args: (string | number)[] = [mode, member, Math.max(0, Math.round(tokens)), this.windowMs, this.leaseMs];
    args.push(grant?.requests ?? 0, Math.max(0, Math.round(grant?.share ?? 0)), grant?.slots ?? 0, grant?.lifetimeMs ?? 0);
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
    const verdict: Verdict = { admitted: Number(raw[0]) === 1, retry_after_ms: Number(raw[1]), never: Number(raw[2]) === 1, exceeded, scopes: states };
    const requests = Number(raw[4 + 4 * scopes.length]);
    if (requests > 0) {
      const slots = Number(raw[5 + 4 * scopes.length]);
      verdict.granted = { members: Array.from({ length: requests }, (_, k) => `${member}:${k + 1}`), slots: Array.from({ length: slots }, (_, k) => `${member}:s${k + 1}`) };
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
    const results = await Promise.allSettled([...bySet].map(([set, members]) => renew.run(this.ctl.redis, [set], [this.leaseMs, ...members])));
    const failed = results.find((r) => r.status === "rejected");
    // One line per outage: a lease that lapses meanwhile only lets a request more through, never fewer.
    if (failed && !this.renewFailed) log.warn(causeFields((failed as PromiseRejectedResult).reason), "renewing concurrency leases failed (retrying)");
    this.renewFailed = failed !== undefined;
  }
}
