/**
 * An organization's traffic limits: requests and tokens per minute and requests in flight across
 * all of its keys and tokens, set by an operator (an organization's admin may only tighten
 * further, on its keys). Stored per organization; an organization without its own has the
 * install's defaults (PLATFORM_ORG_RPM, PLATFORM_ORG_TPM, PLATFORM_ORG_CONCURRENCY). Gateways read
 * them through a short cache, so a change holds everywhere within seconds. docs/traffic.md.
 */
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { hasScopeLimits, ScopeLimits } from "./limits.ts";

/** The limiter's id of an organization's shared state (a key id never starts so). */
export const orgLimiterId = (org: string) => `org:${org}`;

/** What an operator set for `org` (undefined: none of its own). */
export async function getOrgLimits(ctl: Control, org: string): Promise<ScopeLimits | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.orgLimits, org);
  if (!raw) return undefined;
  const parsed = parseStored(ScopeLimits, raw, "org", org);
  return parsed.ok ? parsed.value : undefined;
}

/** Sets (or, with no limit in `limits`, removes) `org`'s own limits. */
export async function setOrgLimits(ctl: Control, org: string, limits: ScopeLimits): Promise<void> {
  if (hasScopeLimits(limits)) await ctl.redis.hset(ctl.keys.orgLimits, org, JSON.stringify(limits));
  else await ctl.redis.hdel(ctl.keys.orgLimits, org);
}

/** The limits in force for each organization: its own, else the defaults; read at most every `ttlMs`. */
export class OrgLimitsCache {
  private readonly ctl: Control;
  private readonly defaults: ScopeLimits;
  private readonly ttlMs: number;
  private readonly known = new Map<string, { at: number; limits: Promise<ScopeLimits | undefined> }>();

  constructor(ctl: Control, defaults: ScopeLimits, ttlMs = 2_000) {
    this.ctl = ctl;
    this.defaults = defaults;
    this.ttlMs = ttlMs;
  }

  of(org: string): Promise<ScopeLimits | undefined> {
    const now = performance.now();
    const hit = this.known.get(org);
    if (hit && now - hit.at < this.ttlMs) return hit.limits;
    if (this.known.size > 10_000) this.known.clear();
    const limits = getOrgLimits(this.ctl, org).then(
      (own) => {
        const merged = own ?? this.defaults;
        return hasScopeLimits(merged) ? merged : undefined;
      },
      (e: unknown) => {
        this.known.delete(org);
        throw e;
      },
    );
    this.known.set(org, { at: now, limits });
    return limits;
  }
}
