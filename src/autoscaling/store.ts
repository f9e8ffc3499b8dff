/**
 * Autoscaling state in Redis: each endpoint's settings, the policy's history
 * between ticks, and the decisions the scaler made (newest first, capped).
 * Settings are stored as parsed (durations in milliseconds): the file was
 * validated once, at the edge (config.ts), and every scaler tick reads them
 * back with a check of their types alone. A record that fails it is reported
 * (status, and the scaler's log), never taken for "not configured".
 */
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { autoscalingDocument, AutoscalingSettings } from "./config.ts";
import { Lease } from "../redis/lease.ts";
import { ScalingHistory, timeLeft } from "./policy.ts";
import type { Endpoint, QueueDepth } from "../endpoints/record.ts";
import { type AutoscalingStatus, RecordedDecision } from "./decision.ts";
import { servesTraffic } from "../endpoints/rollout.ts";
import type { Control } from "../redis/connection.ts";
import { listReplicas } from "../replicas/heartbeats.ts";

/** How many decisions each endpoint keeps. */
export const DECISIONS_KEPT = 50;

/**
 * The stored form: the parsed settings. Only what the edge validated is written, so this checks
 * their types, not the file's rules again (min <= max, duration syntax).
 */
const StoredSettings = z.object({
  enabled: z.boolean(),
  min_replicas: z.number().int().nonnegative(),
  max_replicas: z.number().int().nonnegative(),
  target_queue_depth: z.number().int().positive(),
  scale_up_cooldown_ms: z.number().nonnegative(),
  scale_down_cooldown_ms: z.number().nonnegative(),
  scale_down_delay_ms: z.number().nonnegative(),
}) satisfies z.ZodType<AutoscalingSettings>;

/** An endpoint's stored settings, or what is wrong with the record (`raw`: the record, to report it once). */
export type StoredAutoscaling =
  | { ok: true; settings: AutoscalingSettings }
  | { ok: false; problem: string; raw: string };

/** The record read back; undefined when the endpoint has none. */
export async function readAutoscaling(ctl: Control, endpoint: string): Promise<StoredAutoscaling | undefined> {
  const raw = await ctl.redis.get(ctl.keys.autoscaling(endpoint));
  return raw === null ? undefined : readStored(raw);
}

/** The settings the scaler acts on; undefined when none are stored or the record is unreadable (readAutoscaling says why). */
export async function getAutoscaling(ctl: Control, endpoint: string): Promise<AutoscalingSettings | undefined> {
  const stored = await readAutoscaling(ctl, endpoint);
  return stored?.ok ? stored.settings : undefined;
}

/** Records for many endpoints in one round trip; endpoints without one are absent. */
export async function readAutoscalingMany(ctl: Control, endpoints: string[]): Promise<Map<string, StoredAutoscaling>> {
  const out = new Map<string, StoredAutoscaling>();
  if (endpoints.length === 0) return out;
  const raws = await ctl.redis.mget(endpoints.map((e) => ctl.keys.autoscaling(e)));
  raws.forEach((raw, i) => {
    if (raw !== null) out.set(endpoints[i] as string, readStored(raw));
  });
  return out;
}

/** What status and the scaler's log say of an unreadable record, and how to mend it. */
export function unreadableSettings(endpoint: string, problem: string): string {
  return `the stored autoscaling settings of "${endpoint}" are unreadable (${problem}), so it is not autoscaled; apply them again: platform inference autoscale ${endpoint} --config <file>`;
}

export async function setAutoscaling(ctl: Control, endpoint: string, settings: AutoscalingSettings): Promise<void> {
  await ctl.redis.set(ctl.keys.autoscaling(endpoint), JSON.stringify(settings));
  // The scaler acts on the new settings at once rather than on its next tick.
  await ctl.redis.publish(ctl.keys.scalerWakeup, endpoint);
}

/** Forgets everything autoscaling kept for the endpoint (it was deleted). */
export async function clearAutoscaling(ctl: Control, endpoint: string): Promise<void> {
  await ctl.redis.del(
    ctl.keys.autoscaling(endpoint),
    ctl.keys.scalingHistory(endpoint),
    ctl.keys.scalingDecisions(endpoint),
  );
}

export async function getScalingHistory(ctl: Control, endpoint: string): Promise<ScalingHistory> {
  const raw = await ctl.redis.get(ctl.keys.scalingHistory(endpoint));
  if (raw === null) return {};
  const parsed = ScalingHistory.safeParse(safeJson(raw));
  return parsed.success ? parsed.data : {};
}

/**
 * Stores the decision and the history it produced. A hold that repeats the
 * previous one (same holder, count and need) updates it in place, so a steady
 * state takes one entry and the list keeps the actions that explain the count.
 */
export async function recordDecision(
  ctl: Control,
  endpoint: string,
  decision: RecordedDecision,
  history: ScalingHistory,
): Promise<void> {
  const key = ctl.keys.scalingDecisions(endpoint);
  const head = await ctl.redis.lindex(key, 0);
  const previous = head === null ? undefined : RecordedDecision.safeParse(safeJson(head)).data;
  const repeat =
    previous !== undefined &&
    decision.action === "hold" &&
    previous.action === "hold" &&
    previous.holder === decision.holder &&
    previous.from === decision.from &&
    previous.needed === decision.needed;
  const multi = ctl.redis.multi().set(ctl.keys.scalingHistory(endpoint), JSON.stringify(history));
  if (repeat) {
    multi.lset(key, 0, JSON.stringify({ ...decision, since: previous.since, repeats: previous.repeats + 1 }));
  } else {
    multi.lpush(key, JSON.stringify(decision)).ltrim(key, 0, DECISIONS_KEPT - 1);
  }
  multi.hincrby(ctl.keys.scalingDecisionCounts, `${endpoint}\t${decision.action}`, 1);
  await multi.exec();
}

export async function listDecisions(
  ctl: Control,
  endpoint: string,
  limit = DECISIONS_KEPT,
): Promise<RecordedDecision[]> {
  const raws = await ctl.redis.lrange(ctl.keys.scalingDecisions(endpoint), 0, limit - 1);
  return raws.flatMap((raw) => {
    const parsed = RecordedDecision.safeParse(safeJson(raw));
    return parsed.success ? [parsed.data] : [];
  });
}

/** Decisions made so far, by endpoint and action, for the `platform_scaling_decisions_total` metric. */
export async function decisionCounts(ctl: Control): Promise<{ endpoint: string; action: string; count: number }[]> {
  const all = await ctl.redis.hgetall(ctl.keys.scalingDecisionCounts);
  return Object.entries(all).flatMap(([field, value]) => {
    const [endpoint, action] = field.split("\t");
    return endpoint && action ? [{ endpoint, action, count: Number(value) }] : [];
  });
}

/**
 * A record without a `*_ms` field is the document form (`"30s"`) that versions before the parsed
 * form wrote: read with the file's own schema, so an upgrade keeps every endpoint's settings.
 */
function readStored(raw: string): StoredAutoscaling {
  const json = safeJson(raw);
  if (typeof json !== "object" || json === null || Array.isArray(json))
    return { ok: false, problem: "not a JSON object", raw };
  const documentForm = !Object.keys(json).some((k) => k.endsWith("_ms"));
  const parsed = (documentForm ? AutoscalingSettings : StoredSettings).safeParse(json);
  return parsed.success
    ? { ok: true, settings: parsed.data }
    : { ok: false, problem: describeIssues(parsed.error), raw };
}

function safeJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

/** What `platform inference autoscale status` shows, from Redis alone. */
export async function autoscalingStatus(
  ctl: Control,
  endpoint: Endpoint,
  queue: QueueDepth,
  now = Date.now(),
): Promise<AutoscalingStatus> {
  const [stored, history, decisions, replicas, holder] = await Promise.all([
    readAutoscaling(ctl, endpoint.name),
    getScalingHistory(ctl, endpoint.name),
    listDecisions(ctl, endpoint.name, 10),
    listReplicas(ctl, endpoint.name),
    Lease.holder(ctl.redis, ctl.keys.scalerLease),
  ]);
  const mine = replicas.filter((r) => servesTraffic(r, endpoint));
  const ready = mine.filter((r) => r.state === "ready").length;
  const settings = stored?.ok ? stored.settings : undefined;
  const waits = settings ? timeLeft(now, settings, history) : undefined;
  return {
    endpoint: endpoint.name,
    configured: stored !== undefined,
    enabled: settings?.enabled ?? false,
    config: settings ? autoscalingDocument(settings) : null,
    error: stored?.ok === false ? unreadableSettings(endpoint.name, stored.problem) : null,
    replicas: {
      current: ready + mine.filter((r) => r.state === "starting").length,
      desired: endpoint.desired_replicas,
      ready,
      needed: decisions[0]?.needed ?? null,
    },
    queue,
    waits: waits
      ? {
          scale_up_cooldown_ms: waits.scaleUpCooldownMs,
          scale_down_cooldown_ms: waits.scaleDownCooldownMs,
          scale_down_delay_ms: waits.scaleDownDelayMs,
        }
      : null,
    decisions,
    scaler: { holder },
  };
}
