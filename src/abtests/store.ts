/**
 * A/B tests in Redis: one record per endpoint, the variant deployments that
 * serve its extra versions, and per-variant counters for `abtest status`.
 * Every change publishes an endpoint event, so gateways re-read their routing
 * at once and the reconciler starts or drains the variants' replicas.
 */
import { AbTest, type AbVariant, type VariantStats, variantName } from "./record.ts";
import type { DeploymentConfig } from "../contracts/deployment.ts";
import type { Endpoint } from "../endpoints/record.ts";
import { PlatformError } from "../contracts/errors.ts";
import { resolveModelVersion } from "../models/versions.ts";
import { getAutoscaling, setAutoscaling } from "../autoscaling/store.ts";
import { findEndpoint, getEndpoint, listEndpoints, saveEndpoint } from "../endpoints/store.ts";
import { parseStored } from "../redis/stored.ts";
import type { Control } from "../redis/connection.ts";

export async function readAbTests(ctl: Control): Promise<Map<string, AbTest>> {
  const raw = await ctl.redis.hgetall(ctl.keys.abTests);
  const out = new Map<string, AbTest>();
  for (const [endpoint, json] of Object.entries(raw)) {
    const parsed = parseStored(AbTest, json, "abtest", `${ctl.keys.abTests} ${endpoint}`);
    if (parsed.ok) out.set(endpoint, parsed.value);
  }
  return out;
}

export async function getAbTest(ctl: Control, endpoint: string): Promise<AbTest | undefined> {
  const json = await ctl.redis.hget(ctl.keys.abTests, endpoint);
  if (!json) return undefined;
  const parsed = parseStored(AbTest, json, "abtest", `${ctl.keys.abTests} ${endpoint}`);
  return parsed.ok ? parsed.value : undefined;
}

export async function saveAbTest(ctl: Control, test: AbTest): Promise<void> {
  await ctl.redis.hset(ctl.keys.abTests, test.endpoint, JSON.stringify(test));
  await ctl.redis.publish(ctl.keys.endpointEvents, test.endpoint);
}

export async function deleteAbTest(ctl: Control, endpoint: string): Promise<void> {
  await ctl.redis.hdel(ctl.keys.abTests, endpoint);
  await ctl.redis.publish(ctl.keys.endpointEvents, endpoint);
}

/** The endpoint's variant deployments (retiring ones included). */
export async function listVariants(ctl: Control, endpoint: string): Promise<Endpoint[]> {
  return (await listEndpoints(ctl)).filter((e) => e.variant_of === endpoint);
}

/**
 * Starts or changes the endpoint's test: deploys each version of the split the endpoint does not
 * run yet (with the endpoint's own settings and autoscaling), retires variants no longer in it,
 * and keeps the test `starting` (all traffic on the endpoint's own version) until the scaler sees
 * every version ready. A running test whose versions all run already keeps splitting.
 */
export async function applyAbTest(
  ctl: Control,
  endpointName: string,
  split: AbVariant[],
  sticky: AbTest["sticky"],
): Promise<AbTest> {
  const primary = await getEndpoint(ctl, endpointName);
  if (primary.variant_of)
    throw new PlatformError(
      400,
      "invalid_config",
      `"${endpointName}" is a variant of "${primary.variant_of}"; run the A/B test on "${primary.variant_of}"`,
      "endpoint",
    );
  const model = primary.config.model.name;
  // Every version must be registered before anything changes.
  for (const v of split) await resolveModelVersion(ctl, model, v.version);
  const variants = await listVariants(ctl, endpointName);
  const autoscaling = await getAutoscaling(ctl, endpointName);
  let added = false;
  for (const v of split) {
    if (v.version === primary.version) continue;
    const name = variantName(endpointName, v.version);
    const existing = variants.find((r) => r.name === name);
    if (existing && !existing.retiring) continue;
    added = true;
    const now = Date.now();
    await saveEndpoint(ctl, {
      ...primary,
      name,
      config: { ...primary.config, endpoint: name, model: { ...primary.config.model, version: v.version } },
      version: v.version,
      desired_replicas: Math.max(1, existing?.desired_replicas ?? primary.config.resources.replicas),
      variant_of: endpointName,
      retiring: undefined,
      created: existing?.created ?? now,
      updated: now,
    });
    if (autoscaling) await setAutoscaling(ctl, name, autoscaling);
  }
  const wanted = new Set(split.map((v) => v.version));
  for (const r of variants)
    if (!wanted.has(r.version) && !r.retiring) await saveEndpoint(ctl, { ...r, retiring: true, updated: Date.now() });
  const previous = await getAbTest(ctl, endpointName);
  const now = Date.now();
  const test: AbTest = {
    endpoint: endpointName,
    split,
    sticky,
    state: previous?.state === "running" && !added ? "running" : "starting",
    // A running test that gains a version keeps its old split until the new version is ready.
    serving:
      previous?.state === "running" && added
        ? previous.split
        : previous?.state === "starting"
          ? previous.serving
          : undefined,
    created: previous?.created ?? now,
    updated: now,
  };
  if (!previous) await ctl.redis.del(ctl.keys.abStats(endpointName));
  await saveAbTest(ctl, test);
  return test;
}

/**
 * Stops the test: everything goes to `keep` at once (default: the endpoint's own version), and
 * the scaler finishes the stop when the other versions have no queued or running request left
 * (src/abtests/lifecycle.ts): no request in flight is lost.
 */
export async function stopAbTest(ctl: Control, endpointName: string, keep?: string): Promise<AbTest> {
  const test = await getAbTest(ctl, endpointName);
  if (!test)
    throw new PlatformError(
      404,
      "not_found",
      `"${endpointName}" has no A/B test; \`platform inference abtest create\` starts one`,
      "endpoint",
    );
  const primary = await getEndpoint(ctl, endpointName);
  const kept = keep ?? primary.version;
  if (kept !== primary.version && !test.split.some((v) => v.version === kept)) {
    throw new PlatformError(
      400,
      "invalid_config",
      `--keep ${kept}: not a version of this test (${test.split.map((v) => v.version).join(", ")})`,
      "keep",
    );
  }
  const stopping: AbTest = { ...test, state: "stopping", keep: kept, updated: Date.now() };
  await saveAbTest(ctl, stopping);
  return stopping;
}

/** Upper bounds (ms) of the latency buckets the gateways count into; p50/p99 are read as a bucket's bound. */
export const LATENCY_BUCKETS_MS = [
  5,
  10,
  25,
  50,
  100,
  250,
  500,
  1000,
  2500,
  5000,
  10_000,
  30_000,
  60_000,
  120_000,
  Number.POSITIVE_INFINITY,
];

export type VariantOutcome = { ok: boolean; latencyMs: number; promptTokens?: number; completionTokens?: number };

/** One pipelined write per request, only for endpoints under a test. */
export async function recordVariantOutcome(
  ctl: Control,
  endpoint: string,
  version: string,
  outcome: VariantOutcome,
): Promise<void> {
  const key = ctl.keys.abStats(endpoint);
  const bucket = LATENCY_BUCKETS_MS.findIndex((b) => outcome.latencyMs <= b);
  const p = ctl.redis.pipeline();
  p.hincrby(key, `${version}\trequests`, 1);
  if (!outcome.ok) p.hincrby(key, `${version}\terrors`, 1);
  if (outcome.promptTokens) p.hincrby(key, `${version}\tprompt_tokens`, outcome.promptTokens);
  if (outcome.completionTokens) p.hincrby(key, `${version}\tcompletion_tokens`, outcome.completionTokens);
  if (outcome.ok) p.hincrby(key, `${version}\tlatency:${bucket}`, 1);
  await p.exec();
}

export async function readVariantStats(ctl: Control, endpoint: string): Promise<Map<string, VariantStats>> {
  const raw = await ctl.redis.hgetall(ctl.keys.abStats(endpoint));
  const byVersion = new Map<string, Record<string, number>>();
  for (const [field, value] of Object.entries(raw)) {
    const [version, counter] = field.split("\t") as [string, string];
    const counters = byVersion.get(version) ?? {};
    counters[counter] = Number(value);
    byVersion.set(version, counters);
  }
  const out = new Map<string, VariantStats>();
  for (const [version, c] of byVersion) {
    const latency = LATENCY_BUCKETS_MS.map((_, i) => c[`latency:${i}`] ?? 0);
    out.set(version, {
      requests: c.requests ?? 0,
      errors: c.errors ?? 0,
      prompt_tokens: c.prompt_tokens ?? 0,
      completion_tokens: c.completion_tokens ?? 0,
      latency_p50_ms: quantileBound(latency, 0.5),
      latency_p99_ms: quantileBound(latency, 0.99),
    });
  }
  return out;
}

function quantileBound(counts: number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  let acc = 0;
  for (const [i, n] of counts.entries()) {
    acc += n;
    if (acc >= q * total) {
      const bound = LATENCY_BUCKETS_MS[i] as number;
      return Number.isFinite(bound) ? bound : (LATENCY_BUCKETS_MS.at(-2) as number);
    }
  }
  return null;
}

/** Deletes the endpoint's test and its variant deployments outright (the endpoint itself is being deleted). */
export async function forgetAbTest(ctl: Control, endpointName: string): Promise<Endpoint[]> {
  const variants = await listVariants(ctl, endpointName);
  await ctl.redis.del(ctl.keys.abStats(endpointName));
  await deleteAbTest(ctl, endpointName);
  return variants;
}

/**
 * A deployment may not overwrite a variant, nor change the version of an endpoint under a test
 * (the split names its versions): other changes (replicas, resources) are fine.
 */
export async function assertDeployable(ctl: Control, name: string, config: DeploymentConfig): Promise<void> {
  const existing = await findEndpoint(ctl, name).catch(() => undefined);
  if (existing?.variant_of) {
    throw new PlatformError(
      400,
      "invalid_config",
      `"${name}" serves a version of "${existing.variant_of}"'s A/B test; deploy to "${existing.variant_of}" or change its split`,
      "endpoint",
    );
  }
  const test = await getAbTest(ctl, name);
  if (!test || !existing) return;
  const version = (await resolveModelVersion(ctl, config.model.name, config.model.version)).version;
  if (version !== existing.version || config.model.name !== existing.config.model.name) {
    throw new PlatformError(
      409,
      "conflict",
      `"${name}" runs an A/B test over ${test.split.map((v) => v.version).join(", ")}: change versions with \`platform inference abtest update ${name}\`, or stop the test (\`abtest stop ${name} --keep <version>\`) first`,
      "model.version",
    );
  }
}
