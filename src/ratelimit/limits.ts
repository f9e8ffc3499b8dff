/**
 * Rate limits on an API key: requests and tokens per minute and requests in flight, for the
 * key as a whole and optionally per model. The stored shape (on the key's record) and the
 * management API's shapes for setting and changing them. How they are enforced: docs/traffic.md.
 */
import { z } from "zod";
import { ModelName } from "../contracts/deployment.ts";
import { MAX_PRIORITY, MIN_PRIORITY } from "../contracts/job.ts";

/** A sanity bound: large enough for any real budget, small enough that Lua's doubles stay exact. */
const MAX_LIMIT = 1_000_000_000;
const limit = z.number().int().positive().max(MAX_LIMIT);

/** One scope's limits; a field left out is not limited. */
export const ScopeLimits = z.object({
  /** Requests admitted in any 60-second window. */
  rpm: limit.optional(),
  /** Tokens (prompt + completion) in any 60-second window; reserved at admission, settled at completion. */
  tpm: limit.optional(),
  /** Requests in flight at once. */
  max_concurrency: limit.optional(),
});
export type ScopeLimits = z.infer<typeof ScopeLimits>;

const PRIORITY_RANGE = `expected an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY} (lower is served first)`;
/** A key's default priority band for requests that name none (src/queue/fair-share.ts); not a limit. */
const priority = z.number().int(PRIORITY_RANGE).min(MIN_PRIORITY, PRIORITY_RANGE).max(MAX_PRIORITY, PRIORITY_RANGE);

/**
 * As stored on an API key record; `models` limits one model's traffic through the key, on top of
 * the key's own; `priority`: the key's default priority band.
 */
export const KeyLimits = ScopeLimits.extend({
  models: z.record(ModelName, ScopeLimits).optional(),
  priority: priority.optional(),
});
export type KeyLimits = z.infer<typeof KeyLimits>;

export const LIMIT_FIELDS = ["rpm", "tpm", "max_concurrency"] as const;
export type LimitField = (typeof LIMIT_FIELDS)[number];

export function hasScopeLimits(limits: ScopeLimits | undefined): boolean {
  return limits !== undefined && LIMIT_FIELDS.some((f) => limits[f] !== undefined);
}

/** Whether a key has any limit at all: keys without one never cost a rate-limit round trip. */
export function hasLimits(limits: KeyLimits | undefined): boolean {
  return limits !== undefined && (hasScopeLimits(limits) || Object.values(limits.models ?? {}).some(hasScopeLimits));
}

/** The management API's input when a key is created: the stored shape, unknown fields refused. */
export const KeyLimitsInput = ScopeLimits.strict()
  .extend({ models: z.record(ModelName, ScopeLimits.strict()).optional(), priority: priority.optional() })
  .strict();

/** A change: a number sets a limit, null removes it, a field left out stays as it is; `models.<name>: null` removes that model's limits. */
const change = limit.nullable().optional();
const ScopeChange = z.object({ rpm: change, tpm: change, max_concurrency: change }).strict();
export const KeyLimitsChange = ScopeChange.extend({
  models: z.record(ModelName, ScopeChange.nullable()).optional(),
  /** A number sets the key's default priority, null removes it (band 0). */
  priority: priority.nullable().optional(),
}).strict();
export type KeyLimitsChange = z.infer<typeof KeyLimitsChange>;

/** `current` with `change` applied; empty scopes are dropped, so "no limits" is always `undefined`. */
export function applyLimitsChange(current: KeyLimits | undefined, change: KeyLimitsChange): KeyLimits | undefined {
  const scope = (base: ScopeLimits | undefined, delta: z.infer<typeof ScopeChange>): ScopeLimits | undefined => {
    const next: ScopeLimits = {};
    for (const f of LIMIT_FIELDS) {
      const v = delta[f] === undefined ? base?.[f] : delta[f];
      if (v !== null && v !== undefined) next[f] = v;
    }
    return hasScopeLimits(next) ? next : undefined;
  };
  const { models: modelChanges, priority: priorityChange, ...own } = change;
  const result: KeyLimits = { ...scope(current, own) };
  const kept = priorityChange === undefined ? current?.priority : priorityChange;
  if (kept !== null && kept !== undefined) result.priority = kept;
  const models: Record<string, ScopeLimits> = { ...current?.models };
  for (const [name, delta] of Object.entries(modelChanges ?? {})) {
    const next = delta === null ? undefined : scope(models[name], delta);
    if (next) models[name] = next;
    else delete models[name];
  }
  if (Object.keys(models).length > 0) result.models = models;
  return hasLimits(result) || result.priority !== undefined ? result : undefined;
}

/** `rpm 60, tpm 10000, concurrency 2; tiny: rpm 10`, or `-`: the limits as one line for tables. */
export function describeLimits(limits: KeyLimits | undefined): string {
  const one = (s: ScopeLimits) =>
    [
      s.rpm !== undefined ? `rpm ${s.rpm}` : "",
      s.tpm !== undefined ? `tpm ${s.tpm}` : "",
      s.max_concurrency !== undefined ? `concurrency ${s.max_concurrency}` : "",
    ]
      .filter(Boolean)
      .join(", ");
  const parts = hasScopeLimits(limits) ? [one(limits as ScopeLimits)] : [];
  for (const [name, s] of Object.entries(limits?.models ?? {})) if (hasScopeLimits(s)) parts.push(`${name}: ${one(s)}`);
  if (limits?.priority !== undefined) parts.push(`priority ${limits.priority}`);
  return parts.length === 0 ? "-" : parts.join("; ");
}
