/**
 * The scaling policy: a pure function of what the scaler observed, the
 * endpoint's autoscaling settings and the little history it keeps in Redis.
 * No clock, no I/O, so every rule is tested with simulated time
 * (test/unit/policy.test.ts). docs/autoscaling.md explains the rules.
 */
import { z } from "zod";
import { formatDuration, type AutoscalingSettings } from "./config.ts";

export type ScalingObservation = {
  /** Milliseconds since the epoch (or any monotonic origin the history shares). */
  now: number;
  /** Jobs queued for the endpoint and not yet taken by a replica. */
  waiting: number;
  /** Jobs replicas are processing now. */
  active: number;
  /** Replicas currently requested (the endpoint's desired count). */
  current: number;
  /** Replicas reporting ready; shown in reasons, the decision is made on `current`. */
  ready: number;
};

/** What the policy needs to remember between ticks; JSON as is. */
export const ScalingHistory = z.object({
  lastScaleUpAt: z.number().optional(),
  lastScaleDownAt: z.number().optional(),
  /** Since when demand has needed fewer replicas than requested; absent while it has not. */
  lowSince: z.number().optional(),
});
export type ScalingHistory = z.infer<typeof ScalingHistory>;

export type ScalingAction = "scale_up" | "scale_down" | "hold";

export type ScalingDecision = {
  /** Replicas to request now; equals `current` when action is "hold". */
  desired: number;
  action: ScalingAction;
  /** ceil((waiting + active) / target_queue_depth) within [min, max]: where the policy is heading. */
  needed: number;
  /** A sentence with the numbers, for `autoscale status`. */
  reason: string;
  /** Store this and pass it to the next call. */
  history: ScalingHistory;
};

/** Time left before each rule lets the policy act, for `autoscale status`. */
export type ScalingWaits = {
  scaleUpCooldownMs: number;
  scaleDownCooldownMs: number;
  /** null while demand is not low: the delay has not started. */
  scaleDownDelayMs: number | null;
};

/**
 * Replicas the load calls for. ceil() makes the thresholds a dead band: with
 * n replicas, scale-up needs pending > target × n, scale-down needs
 * pending <= target × (n - 1), so a steady load never moves it back and forth.
 */
export function replicasNeeded(pending: number, config: AutoscalingSettings): number {
  const raw = Math.ceil(Math.max(0, pending) / config.target_queue_depth);
  return clamp(raw, config.min_replicas, Math.max(config.min_replicas, config.max_replicas));
}

export function decide(
  observation: ScalingObservation,
  config: AutoscalingSettings,
  history: ScalingHistory,
): ScalingDecision {
  const { now } = observation;
  const h = sanitize(history, now);
  const waiting = Math.max(0, observation.waiting);
  const active = Math.max(0, observation.active);
  const current = Math.max(0, Math.trunc(observation.current));
  const pending = waiting + active;

  if (!config.enabled) {
    return {
      desired: current,
      action: "hold",
      needed: current,
      reason: `autoscaling disabled: keep ${current}`,
      history: compact({ lastScaleUpAt: h.lastScaleUpAt, lastScaleDownAt: h.lastScaleDownAt }),
    };
  }

  const min = config.min_replicas;
  const max = Math.max(min, config.max_replicas);
  const target = config.target_queue_depth;
  const needed = replicasNeeded(pending, config);
  const queue = `queue ${pending} (${waiting} waiting, ${active} active)`;
  const step = (action: ScalingAction, desired: number, reason: string): ScalingDecision => ({
    desired,
    action,
    needed,
    reason,
    history: compact({
      lastScaleUpAt: action === "scale_up" ? now : h.lastScaleUpAt,
      lastScaleDownAt: action === "scale_down" ? now : h.lastScaleDownAt,
      lowSince: needed < desired ? (h.lowSince ?? now) : undefined,
    }),
  });
  const keep = (why: string) => step("hold", current, `${why}: keep ${current}`);

  // Bounds are the user's explicit order: applied at once, whatever the cooldowns.
  if (current < min) return step("scale_up", min, `below min_replicas ${min}: scale up ${current} → ${min}`);
  if (current > max) return step("scale_down", max, `above max_replicas ${max}: scale down ${current} → ${max}`);

  // Queued requests wait in Redis for a replica; none will come unless we start one.
  if (current === 0 && waiting > 0 && max >= 1) {
    return step("scale_up", 1, `${waiting} waiting with 0 replicas: scale from zero 0 → 1`);
  }

  if (needed > current) {
    const over = `${queue} > target ${target} × ${current} replicas (${observation.ready} ready)`;
    const left = cooldownLeft(now, h.lastScaleUpAt, config.scale_up_cooldown_ms);
    if (left > 0) return keep(`${over}, scale_up_cooldown ${seconds(left)} left`);
    return step("scale_up", current + 1, `${over}: scale up ${current} → ${current + 1}`);
  }

  if (needed < current) {
    const lowFor = now - (h.lowSince ?? now);
    const low = `${queue} needs ${needed} of ${current} replicas at target ${target} for ${seconds(lowFor, Math.floor)}`;
    const delayLeft = config.scale_down_delay_ms - lowFor;
    if (delayLeft > 0) return keep(`${low}, scale_down_delay ${seconds(delayLeft)} left`);
    // A scale-up also starts the down-cooldown, so replicas just added are not removed at once.
    const lastAction = Math.max(h.lastScaleDownAt ?? -Infinity, h.lastScaleUpAt ?? -Infinity);
    const left = cooldownLeft(now, lastAction, config.scale_down_cooldown_ms);
    if (left > 0) return keep(`${low}, scale_down_cooldown ${seconds(left)} left`);
    return step(
      "scale_down",
      current - 1,
      `${low} (scale_down_delay ${formatDuration(config.scale_down_delay_ms)}): scale down ${current} → ${current - 1}`,
    );
  }

  return keep(`${queue} within target ${target} × ${current} replicas`);
}

export function timeLeft(now: number, config: AutoscalingSettings, history: ScalingHistory): ScalingWaits {
  const h = sanitize(history, now);
  const lastAction = Math.max(h.lastScaleDownAt ?? -Infinity, h.lastScaleUpAt ?? -Infinity);
  return {
    scaleUpCooldownMs: cooldownLeft(now, h.lastScaleUpAt, config.scale_up_cooldown_ms),
    scaleDownCooldownMs: cooldownLeft(now, lastAction, config.scale_down_cooldown_ms),
    scaleDownDelayMs: h.lowSince === undefined ? null : Math.max(0, config.scale_down_delay_ms - (now - h.lowSince)),
  };
}

function cooldownLeft(now: number, last: number | undefined, cooldown: number): number {
  if (last === undefined || !Number.isFinite(last)) return 0;
  return Math.max(0, last + cooldown - now);
}

/**
 * Timestamps from the future (a scaler that took the lease over with a slower
 * clock) are pulled back to now, so they delay an action by one cooldown at
 * most instead of for as long as the clocks disagree.
 */
function sanitize(history: ScalingHistory, now: number): ScalingHistory {
  const fix = (t: number | undefined) => (t === undefined || !Number.isFinite(t) ? undefined : Math.min(t, now));
  return compact({
    lastScaleUpAt: fix(history.lastScaleUpAt),
    lastScaleDownAt: fix(history.lastScaleDownAt),
    lowSince: fix(history.lowSince),
  });
}

/** Drops absent fields so the history compares and serialises cleanly. */
function compact(h: { [K in keyof ScalingHistory]: number | undefined }): ScalingHistory {
  const out: ScalingHistory = {};
  if (h.lastScaleUpAt !== undefined) out.lastScaleUpAt = h.lastScaleUpAt;
  if (h.lastScaleDownAt !== undefined) out.lastScaleDownAt = h.lastScaleDownAt;
  if (h.lowSince !== undefined) out.lowSince = h.lowSince;
  return out;
}

function clamp(n: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, n));
}

function seconds(ms: number, round: (x: number) => number = Math.ceil): string {
  return ms < 1000 && ms > 0 ? `${ms}ms` : `${round(ms / 1000)}s`;
}
