/**
 * A/B tests: an endpoint's traffic split between deployed versions of its
 * model. The split, the stickiness rule and the test's lifecycle are stored
 * as one record per endpoint (src/abtests/store.ts); the gateway's router
 * picks a variant per request (src/gateway/routing.ts) and the scaler moves
 * the test through its states (src/abtests/lifecycle.ts). docs/abtests.md explains it.
 */
import { z } from "zod";
import { ModelVersion, NAME_PATTERN } from "../contracts/deployment.ts";

export const AbVariant = z.object({ version: ModelVersion, weight: z.number().int().min(0).max(1000) });
export type AbVariant = z.infer<typeof AbVariant>;

/**
 * `key`: each API key always gets the same variant; `header:<name>`: each value of that request
 * header does (a user id the caller sends, say); absent: every request is drawn anew.
 */
export const Sticky = z.union([
  z.literal("key"),
  z.string().regex(/^header:[a-z0-9-]{1,64}$/i, 'expected "key" or "header:<header name>"'),
]);
export type Sticky = z.infer<typeof Sticky>;

/**
 * - `starting`: variants are deploying; traffic goes to the endpoint's own version, or by the
 *   previous split (`serving`) when a running test was changed.
 * - `running`: traffic is split by weight.
 * - `stopping`: everything goes to `keep`; the scaler finishes the stop once the other versions' queues are empty.
 */
export const AbTestState = z.enum(["starting", "running", "stopping"]);
export type AbTestState = z.infer<typeof AbTestState>;

export const AbTest = z.object({
  endpoint: z.string(),
  split: z.array(AbVariant).min(1),
  sticky: Sticky.optional(),
  state: AbTestState,
  /** While stopping: the version that takes all traffic. */
  keep: ModelVersion.optional(),
  /** While a changed test is starting again (a version was added): the split still in effect until then. */
  serving: z.array(AbVariant).optional(),
  created: z.number().int(),
  updated: z.number().int(),
});
export type AbTest = z.infer<typeof AbTest>;

/**
 * `v1=70,v2=30` → variants in the order given. Weights are relative (70/30 and 7/3 are the same
 * split) and at least one must be positive; a version may appear once.
 */
export function parseSplit(text: string): AbVariant[] {
  const variants = text.split(",").map((part) => {
    const m = /^\s*([^=\s]+)\s*=\s*(\d+)\s*$/.exec(part);
    if (!m) throw new SplitError(`"${part.trim()}" is not <version>=<weight>; expected e.g. v1=70,v2=30`);
    const version = ModelVersion.safeParse(m[1]);
    if (!version.success) throw new SplitError(`"${m[1]}": a version is letters, digits, ".", "_" or "-" (e.g. v2)`);
    return { version: version.data, weight: Number(m[2]) };
  });
  return checkSplit(variants);
}

export function checkSplit(variants: AbVariant[]): AbVariant[] {
  if (variants.length < 1) throw new SplitError("name at least one version, e.g. v1=70,v2=30");
  const seen = new Set<string>();
  for (const v of variants) {
    if (v.version === "latest")
      throw new SplitError(
        '"latest" is not a version a split can pin; name the versions (platform training list shows them)',
      );
    if (seen.has(v.version)) throw new SplitError(`version ${v.version} appears twice`);
    seen.add(v.version);
    if (!Number.isInteger(v.weight) || v.weight < 0 || v.weight > 1000)
      throw new SplitError(`${v.version}: a weight is a whole number from 0 to 1000`);
  }
  if (variants.every((v) => v.weight === 0)) throw new SplitError("at least one weight must be above 0");
  return variants;
}

export class SplitError extends Error {}

/** `v1=70,v2=30`, as the CLI shows a split. */
export function formatSplit(variants: readonly AbVariant[]): string {
  return variants.map((v) => `${v.version}=${v.weight}`).join(",");
}

/**
 * The deployment that serves `version` of `endpoint` beside the endpoint's own: an endpoint
 * record of its own (replicas, scaling, status work unchanged), hidden from listings.
 */
export function variantName(endpoint: string, version: string): string {
  const name = `${endpoint}--${version}`;
  if (!NAME_PATTERN.test(name))
    throw new SplitError(
      `"${endpoint}" with version "${version}" makes a deployment name over 63 characters; use a shorter endpoint or version name`,
    );
  return name;
}

/**
 * Which variant a request gets. `stickyValue`: the API key id or header value when the test is
 * sticky (the same value always lands on the same variant while the weights stay), else
 * undefined for a fresh draw. Cumulative weights in split order, so raising one variant's weight
 * only moves callers into it.
 */
export function pickVariant(
  split: readonly AbVariant[],
  stickyValue: string | undefined,
  random: () => number = Math.random,
): AbVariant {
  const total = split.reduce((sum, v) => sum + v.weight, 0);
  const point = (stickyValue === undefined ? random() : hashUnit(stickyValue)) * total;
  let acc = 0;
  for (const v of split) {
    acc += v.weight;
    if (point < acc) return v;
  }
  return split.findLast((v) => v.weight > 0) as AbVariant;
}

/** FNV-1a over the UTF-16 code units, to [0, 1): stable across processes and restarts. */
function hashUnit(value: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < value.length; i++) {
    h ^= value.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // A final avalanche: FNV's low bits alone are poorly spread for short, similar inputs.
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return ((h ^ (h >>> 16)) >>> 0) / 0x1_0000_0000;
}

/** What `abtest status` shows per variant, counted by every gateway since the test started. */
export type VariantStats = {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  latency_p50_ms: number | null;
  latency_p99_ms: number | null;
};
