/**
 * Autoscaling state in Redis: each endpoint's settings, the policy's history
 * between ticks, and the decisions the scaler made (newest first, capped).
 * Settings are stored in the document form (`"30s"`), so what `--json` shows
 * can be pasted back into a file.
 */
import { z } from "zod";
import { autoscalingDocument, AutoscalingSettings } from "./config.ts";
import { Lease } from "../redis/lease.ts";
import { ScalingHistory, timeLeft } from "./policy.ts";
import type { Endpoint } from "../endpoints/record.ts";
import { servesTraffic } from "../endpoints/rollout.ts";
import type { Control } from "../redis/connection.ts";
import { listReplicas } from "../replicas/heartbeats.ts";
import type { QueueDepth } from "../endpoints/status.ts";

/** How many decisions each endpoint keeps. */
export const DECISIONS_KEPT = 50;

export const RecordedDecision = z.object({
  /** When this decision was made (ms since the epoch). */
  at: z.number(),
  /** When the first of a run of identical holds was made; equals `at` otherwise. */
  since: z.number(),
  /** How many ticks in a row made this same hold (1 for actions). */
  repeats: z.number().int(),
  action: z.enum(["scale_up", "scale_down", "hold"]),
  from: z.number().int(),
  to: z.number().int(),
  needed: z.number().int(),
  reason: z.string(),
  /** The observation the decision was made on. */
  inputs: z.object({ waiting: z.number(), active: z.number(), ready: z.number(), current: z.number() }),
  /** The scaler (lease holder id) that made it. */
  holder: z.string(),
});
export type RecordedDecision = z.infer<typeof RecordedDecision>;

export async function getAutoscaling(ctl: Control, endpoint: string): Promise<AutoscalingSettings | undefined> {
  const raw = await ctl.redis.get(ctl.keys.autoscaling(endpoint));
  return raw === null ? undefined : parseStored(raw);
}

/** Settings for many endpoints in one round trip; endpoints without any are absent. */
export async function getAutoscalingMany(ctl: Control, endpoints: string[]): Promise<Map<string, AutoscalingSettings>> {
  const out = new Map<string, AutoscalingSettings>();
  if (endpoints.length === 0) return out;
  const raws = await ctl.redis.mget(endpoints.map((e) => ctl.keys.autoscaling(e)));
  raws.forEach((raw, i) => {
    const settings = raw === null ? undefined : parseStored(raw);
    if (settings) out.set(endpoints[i] as string, settings);
  });
  return out;
}

export async function setAutoscaling(ctl: Control, endpoint: string, settings: AutoscalingSettings): Promise<void> {
  await ctl.redis.set(ctl.keys.autoscaling(endpoint), JSON.stringify(autoscalingDocument(settings)));
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

function parseStored(raw: string): AutoscalingSettings | undefined {
  const parsed = AutoscalingSettings.safeParse(safeJson(raw));
  return parsed.success ? parsed.data : undefined;
}

function safeJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

export type AutoscalingStatus = {
  endpoint: string;
  /** False when no autoscaling settings were ever applied to the endpoint. */
  configured: boolean;
  enabled: boolean;
  /** The settings in document form (paste into a file), null when not configured. */
  config: ReturnType<typeof autoscalingDocument> | null;
  /** current: replicas running (starting or ready); desired: replicas wanted now; needed: what the last decision's load called for. */
  replicas: { current: number; desired: number; ready: number; needed: number | null };
  queue: QueueDepth;
  /** Time left before each rule lets the scaler act; scale_down_delay_ms is null while demand is not low. */
  waits: { scale_up_cooldown_ms: number; scale_down_cooldown_ms: number; scale_down_delay_ms: number | null } | null;
  /** Newest first. */
  decisions: RecordedDecision[];
  /** The scaler holding the lease, null when none runs. */
  scaler: { holder: string | null };
};

/** What `platform inference autoscale status` shows, from Redis alone. */
export async function autoscalingStatus(
  ctl: Control,
  endpoint: Endpoint,
  queue: QueueDepth,
  now = Date.now(),
): Promise<AutoscalingStatus> {
  const [settings, history, decisions, replicas, holder] = await Promise.all([
    getAutoscaling(ctl, endpoint.name),
    getScalingHistory(ctl, endpoint.name),
    listDecisions(ctl, endpoint.name, 10),
    listReplicas(ctl, endpoint.name),
    Lease.holder(ctl.redis, ctl.keys.scalerLease),
  ]);
  const mine = replicas.filter((r) => servesTraffic(r, endpoint));
  const ready = mine.filter((r) => r.state === "ready").length;
  const waits = settings ? timeLeft(now, settings, history) : undefined;
  return {
    endpoint: endpoint.name,
    configured: settings !== undefined,
    enabled: settings?.enabled ?? false,
    config: settings ? autoscalingDocument(settings) : null,
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
