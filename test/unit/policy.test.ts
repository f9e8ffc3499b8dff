import { describe, expect, it } from "vitest";
import { AutoscalingSettings, type AutoscalingSettingsInput } from "../../src/autoscaling/config.ts";
import {
  decide,
  replicasNeeded,
  ScalingHistory,
  timeLeft,
  type ScalingDecision,
  type ScalingHistory as History,
} from "../../src/autoscaling/policy.ts";

const S = 1_000;

function settings(overrides: AutoscalingSettingsInput = {}): AutoscalingSettings {
  return AutoscalingSettings.parse({
    min_replicas: 1,
    max_replicas: 4,
    target_queue_depth: 4,
    scale_up_cooldown: "30s",
    scale_down_cooldown: "60s",
    scale_down_delay: "120s",
    ...overrides,
  });
}

type Load = { waiting: number; active: number };
type Tick = ScalingDecision & { now: number; current: number };

/**
 * Runs the policy on a simulated clock, one tick per `intervalMs`, applying
 * each decision as the next tick's `current`. The history goes through JSON
 * every tick, as it does through Redis.
 */
function simulate(
  config: AutoscalingSettings,
  load: (now: number) => Load,
  opts: { startAt?: number; current: number; history?: History; durationMs: number; intervalMs?: number },
): Tick[] {
  const interval = opts.intervalMs ?? S;
  let current = opts.current;
  let history: History = opts.history ?? {};
  const ticks: Tick[] = [];
  const start = opts.startAt ?? 0;
  for (let now = start; now < start + opts.durationMs; now += interval) {
    const d = decide({ now, ...load(now), current, ready: current }, config, history);
    ticks.push({ ...d, now, current });
    current = d.desired;
    history = ScalingHistory.parse(JSON.parse(JSON.stringify(d.history)));
  }
  return ticks;
}

const actions = (ticks: Tick[]) => ticks.filter((t) => t.action !== "hold");
const last = (ticks: Tick[]) => ticks[ticks.length - 1]!;

/** Deterministic pseudo-random numbers, so a failing run can be replayed. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe("replicasNeeded", () => {
  it("is ceil(pending / target) within [min, max]", () => {
    const c = settings({ min_replicas: 1, max_replicas: 4, target_queue_depth: 4 });
    expect([0, 1, 4, 5, 8, 9, 16, 17, 100].map((p) => replicasNeeded(p, c))).toEqual([1, 1, 1, 2, 2, 3, 4, 4, 4]);
    expect(replicasNeeded(0, settings({ min_replicas: 0 }))).toBe(0);
  });
});

describe("bounds", () => {
  it("never leaves [min, max] under a random load over a long run", () => {
    const random = prng(42);
    const c = settings({
      min_replicas: 1,
      max_replicas: 3,
      scale_down_delay: "10s",
      scale_down_cooldown: "5s",
      scale_up_cooldown: "5s",
    });
    // A new random level every 5 minutes, with jitter on every tick.
    const levels = Array.from({ length: 72 }, () => Math.floor(random() * 30));
    const load = (now: number): Load => {
      const level = levels[Math.floor(now / (300 * S))]!;
      return { waiting: Math.max(0, level - 4 + Math.floor(random() * 6)), active: Math.min(level, 4) };
    };
    const ticks = simulate(c, load, {
      current: 2,
      durationMs: 6 * 3600 * S,
    });
    for (const t of ticks) {
      expect(t.desired).toBeGreaterThanOrEqual(1);
      expect(t.desired).toBeLessThanOrEqual(3);
    }
    // The run did exercise both bounds.
    expect(ticks.some((t) => t.desired === 3)).toBe(true);
    expect(ticks.some((t) => t.desired === 1)).toBe(true);
  });

  it("keeps every timing rule under a random load over a long run", () => {
    const random = prng(7);
    const c = settings({
      min_replicas: 0,
      max_replicas: 4,
      scale_up_cooldown: "30s",
      scale_down_cooldown: "60s",
      scale_down_delay: "120s",
    });
    const levels = Array.from({ length: 100 }, () => (random() < 0.3 ? 0 : Math.floor(random() * 24)));
    const load = (now: number): Load => {
      const level = levels[Math.floor(now / (400 * S))]!;
      return {
        waiting: level === 0 ? 0 : Math.max(0, level - 4 + Math.floor(random() * 6)),
        active: Math.min(level, 4),
      };
    };
    const ticks = simulate(c, load, { current: 0, durationMs: 40_000 * S, intervalMs: 5 * S });
    let lastUp = -Infinity;
    let lastAny = -Infinity;
    let ups = 0;
    let downs = 0;
    for (const [i, t] of ticks.entries()) {
      if (t.action === "scale_up") {
        ups++;
        expect(t.desired).toBe(t.current + 1);
        if (t.current > 0) expect(t.now - lastUp).toBeGreaterThanOrEqual(30 * S);
        lastUp = t.now;
      }
      if (t.action === "scale_down") {
        downs++;
        expect(t.desired).toBe(t.current - 1);
        expect(t.now - lastAny).toBeGreaterThanOrEqual(60 * S);
        // Demand was below the current count on every tick of the delay before it.
        const window = ticks.slice(0, i + 1).filter((w) => w.now >= t.now - 120 * S);
        expect(window[0]!.now).toBe(t.now - 120 * S);
        for (const w of window) expect(w.needed).toBeLessThan(w.current);
      }
      if (t.action !== "hold") lastAny = t.now;
    }
    expect(ups).toBeGreaterThan(10);
    expect(downs).toBeGreaterThan(10);
    expect(ticks.some((t) => t.current === 0 && t.action === "scale_up")).toBe(true);
  });

  it("raises to min_replicas at once, whatever the cooldown", () => {
    const d = decide({ now: 1_000, waiting: 0, active: 0, current: 0, ready: 0 }, settings({ min_replicas: 2 }), {
      lastScaleUpAt: 999,
    });
    expect(d).toMatchObject({ desired: 2, action: "scale_up", reason: "below min_replicas 2: scale up 0 → 2" });
    expect(d.history.lastScaleUpAt).toBe(1_000);
  });

  it("lowers to max_replicas at once, whatever the cooldown and the load", () => {
    const d = decide({ now: 1_000, waiting: 100, active: 8, current: 7, ready: 7 }, settings({ max_replicas: 3 }), {
      lastScaleDownAt: 999,
    });
    expect(d).toMatchObject({ desired: 3, action: "scale_down", reason: "above max_replicas 3: scale down 7 → 3" });
  });

  it("holds at max_replicas while the load stays above it", () => {
    const ticks = simulate(settings({ max_replicas: 2 }), () => ({ waiting: 50, active: 8 }), {
      current: 2,
      durationMs: 3600 * S,
    });
    expect(actions(ticks)).toEqual([]);
    expect(last(ticks).desired).toBe(2);
  });
});

describe("scale-up cooldown", () => {
  it("rises one step per cooldown up to max_replicas and never past it", () => {
    const c = settings({ min_replicas: 1, max_replicas: 4, scale_up_cooldown: "30s" });
    const ticks = simulate(c, () => ({ waiting: 40, active: 4 }), { current: 1, durationMs: 600 * S });
    const ups = actions(ticks);
    expect(ups.map((t) => [t.now / S, t.current, t.desired])).toEqual([
      [0, 1, 2],
      [30, 2, 3],
      [60, 3, 4],
    ]);
    expect(ups.every((t) => t.action === "scale_up")).toBe(true);
    expect(Math.max(...ticks.map((t) => t.desired))).toBe(4);
  });

  it("reports the time left while the cooldown blocks", () => {
    const c = settings({ scale_up_cooldown: "30s" });
    const d = decide({ now: 50 * S, waiting: 8, active: 4, current: 2, ready: 1 }, c, { lastScaleUpAt: 30 * S });
    expect(d.action).toBe("hold");
    expect(d.reason).toBe(
      "queue 12 (8 waiting, 4 active) > target 4 × 2 replicas (1 ready), scale_up_cooldown 10s left: keep 2",
    );
  });

  it("is not started by a scale-down: load returning right after a scale-down is answered at once", () => {
    const c = settings({ scale_up_cooldown: "30s", scale_down_cooldown: "60s" });
    const d = decide({ now: 100 * S, waiting: 12, active: 4, current: 2, ready: 2 }, c, {
      lastScaleUpAt: 0,
      lastScaleDownAt: 99 * S,
    });
    expect(d).toMatchObject({ action: "scale_up", desired: 3 });
  });
});

describe("scale-down delay and cooldown", () => {
  it("falls one step per cooldown, only after demand stayed low for the delay", () => {
    const c = settings({ min_replicas: 1, max_replicas: 4, scale_down_delay: "120s", scale_down_cooldown: "60s" });
    // Load until t=100s, then nothing.
    const ticks = simulate(c, (now) => (now < 100 * S ? { waiting: 40, active: 4 } : { waiting: 0, active: 0 }), {
      current: 4,
      history: { lastScaleUpAt: 0 },
      durationMs: 1200 * S,
    });
    const downs = actions(ticks);
    expect(downs.map((t) => [t.now / S, t.current, t.desired])).toEqual([
      [220, 4, 3],
      [280, 3, 2],
      [340, 2, 1],
    ]);
    expect(last(ticks).desired).toBe(1);
    expect(downs[0]!.reason).toBe(
      "queue 0 (0 waiting, 0 active) needs 1 of 4 replicas at target 4 for 120s (scale_down_delay 2m): scale down 4 → 3",
    );
  });

  it("restarts the delay when demand comes back, even briefly", () => {
    const c = settings({ scale_down_delay: "120s", scale_down_cooldown: "10s" });
    // Low from t=0, a single busy tick at t=100s, low again after.
    const ticks = simulate(c, (now) => (now === 100 * S ? { waiting: 8, active: 4 } : { waiting: 1, active: 2 }), {
      current: 3,
      durationMs: 400 * S,
    });
    const firstDown = actions(ticks)[0]!;
    expect(firstDown.action).toBe("scale_down");
    expect(firstDown.now).toBe(221 * S);
    const blocked = ticks.find((t) => t.now === 150 * S)!;
    expect(blocked.reason).toBe(
      "queue 3 (1 waiting, 2 active) needs 1 of 3 replicas at target 4 for 49s, scale_down_delay 71s left: keep 3",
    );
  });

  it("does not remove replicas within the down-cooldown after a scale-up, even with no delay", () => {
    const c = settings({ scale_down_delay: "0s", scale_down_cooldown: "60s", scale_up_cooldown: "30s" });
    const ticks = simulate(c, (now) => (now < 5 * S ? { waiting: 8, active: 4 } : { waiting: 0, active: 0 }), {
      current: 1,
      durationMs: 300 * S,
    });
    expect(actions(ticks).map((t) => [t.now / S, t.action, t.desired])).toEqual([
      [0, "scale_up", 2],
      [60, "scale_down", 1],
    ]);
    expect(ticks.find((t) => t.now === 30 * S)!.reason).toContain("scale_down_cooldown 30s left: keep 2");
  });

  it("keeps min_replicas when idle", () => {
    const ticks = simulate(settings({ min_replicas: 2 }), () => ({ waiting: 0, active: 0 }), {
      current: 2,
      durationMs: 3600 * S,
    });
    expect(actions(ticks)).toEqual([]);
    expect(ticks.every((t) => t.history.lowSince === undefined)).toBe(true);
  });
});

describe("no flapping", () => {
  it("holds a steady load exactly at the threshold for ten hours", () => {
    const c = settings({
      target_queue_depth: 4,
      scale_down_delay: "0s",
      scale_down_cooldown: "1s",
      scale_up_cooldown: "1s",
    });
    // 8 pending = 4 × 2: exactly what two replicas are meant to carry.
    const ticks = simulate(c, () => ({ waiting: 4, active: 4 }), {
      current: 2,
      durationMs: 10 * 3600 * S,
      intervalMs: 5 * S,
    });
    expect(actions(ticks)).toEqual([]);
    expect(last(ticks).reason).toBe("queue 8 (4 waiting, 4 active) within target 4 × 2 replicas: keep 2");
  });

  it("settles once and stays when the steady load starts off the threshold", () => {
    const c = settings({
      target_queue_depth: 4,
      scale_down_delay: "0s",
      scale_down_cooldown: "1s",
      scale_up_cooldown: "1s",
    });
    for (const start of [1, 3, 4]) {
      const ticks = simulate(c, () => ({ waiting: 4, active: 4 }), {
        current: start,
        durationMs: 3600 * S,
        intervalMs: 5 * S,
      });
      const moves = actions(ticks);
      expect(last(ticks).desired).toBe(2);
      // Monotone: every action goes the same way.
      expect(new Set(moves.map((t) => t.action)).size).toBe(1);
      expect(moves.length).toBe(Math.abs(start - 2));
    }
  });

  it("does not go back and forth on a load jittering around the threshold", () => {
    const c = settings({ target_queue_depth: 4, scale_down_delay: "60s" });
    const pattern = [7, 8, 9, 8];
    const ticks = simulate(c, (now) => ({ waiting: pattern[(now / (10 * S)) % 4]! - 4, active: 4 }), {
      current: 2,
      durationMs: 10 * 3600 * S,
      intervalMs: 10 * S,
    });
    // It steps up once for the 9s, then the dead band holds it there.
    expect(actions(ticks).map((t) => [t.action, t.desired])).toEqual([["scale_up", 3]]);
  });
});

describe("scale to and from zero", () => {
  const zero = settings({ min_replicas: 0, max_replicas: 2, scale_down_delay: "120s", scale_down_cooldown: "60s" });

  it("brings one replica up for the first queued request, ignoring the up-cooldown", () => {
    const d = decide({ now: 10 * S, waiting: 1, active: 0, current: 0, ready: 0 }, zero, { lastScaleUpAt: 9 * S });
    expect(d).toMatchObject({
      desired: 1,
      action: "scale_up",
      reason: "1 waiting with 0 replicas: scale from zero 0 → 1",
      history: { lastScaleUpAt: 10 * S },
    });
  });

  it("stays at zero while nothing is queued", () => {
    const ticks = simulate(zero, () => ({ waiting: 0, active: 0 }), { current: 0, durationMs: 3600 * S });
    expect(actions(ticks)).toEqual([]);
  });

  it("goes back to zero after the delay once the endpoint is idle", () => {
    // One request queued at t=0, served from t=20s (model load) to t=25s, then idle.
    const load = (now: number): Load =>
      now < 20 * S ? { waiting: 1, active: 0 } : now < 25 * S ? { waiting: 0, active: 1 } : { waiting: 0, active: 0 };
    const ticks = simulate(zero, load, { current: 0, durationMs: 1800 * S });
    expect(actions(ticks).map((t) => [t.now / S, t.action, t.desired])).toEqual([
      [0, "scale_up", 1],
      [145, "scale_down", 0],
    ]);
    expect(actions(ticks)[1]!.reason).toBe(
      "queue 0 (0 waiting, 0 active) needs 0 of 1 replicas at target 4 for 120s (scale_down_delay 2m): scale down 1 → 0",
    );
    expect(last(ticks).desired).toBe(0);
  });
});

describe("disabled", () => {
  it("keeps the current count, even outside the bounds, and forgets low demand", () => {
    const off = settings({ enabled: false, min_replicas: 1, max_replicas: 2 });
    for (const current of [0, 1, 5]) {
      for (const load of [
        { waiting: 0, active: 0 },
        { waiting: 100, active: 8 },
      ]) {
        const d = decide({ now: 1e9, ...load, current, ready: current }, off, { lowSince: 0, lastScaleUpAt: 5 });
        expect(d).toEqual({
          desired: current,
          action: "hold",
          needed: current,
          reason: `autoscaling disabled: keep ${current}`,
          history: { lastScaleUpAt: 5 },
        });
      }
    }
  });
});

describe("history", () => {
  it("pulls timestamps from a faster clock back to now, so they block one cooldown at most", () => {
    const c = settings({ scale_up_cooldown: "30s" });
    const future = { lastScaleUpAt: 10_000 * S };
    const blocked = decide({ now: 100 * S, waiting: 12, active: 4, current: 1, ready: 1 }, c, future);
    expect(blocked.action).toBe("hold");
    expect(blocked.history.lastScaleUpAt).toBe(100 * S);
    const after = decide({ now: 130 * S, waiting: 12, active: 4, current: 1, ready: 1 }, c, blocked.history);
    expect(after.action).toBe("scale_up");
  });

  it("tells how long each rule still waits", () => {
    const c = settings({ scale_up_cooldown: "30s", scale_down_cooldown: "60s", scale_down_delay: "120s" });
    expect(timeLeft(100 * S, c, {})).toEqual({ scaleUpCooldownMs: 0, scaleDownCooldownMs: 0, scaleDownDelayMs: null });
    expect(timeLeft(100 * S, c, { lastScaleUpAt: 90 * S, lastScaleDownAt: 50 * S, lowSince: 95 * S })).toEqual({
      scaleUpCooldownMs: 20 * S,
      scaleDownCooldownMs: 50 * S,
      scaleDownDelayMs: 115 * S,
    });
    expect(timeLeft(1000 * S, c, { lastScaleUpAt: 90 * S, lowSince: 95 * S }).scaleDownDelayMs).toBe(0);
  });
});
