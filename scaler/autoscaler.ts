/**
 * The autoscaler loop. On every tick the scaler holding the lease observes
 * each autoscaled endpoint (queue depth, ready replicas, replicas wanted),
 * asks the policy, writes the new `desired_replicas` when it changes and
 * records the decision with its inputs and reason. The reconciler turns
 * `desired_replicas` into replicas through a backend. Each tick also takes
 * back the jobs of replicas whose heartbeat went silent (reaper.ts) and moves
 * A/B tests along (abtests.ts).
 *
 * Scalers that do not hold the lease only try to take it, so a second scaler
 * takes over within one lease TTL of the first one dying.
 */
import { hostname } from "node:os";
import type { Queue } from "bullmq";
import type { AutoscalingSettings } from "../src/autoscaling/config.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import {
  getScalingHistory,
  readAutoscalingMany,
  recordDecision,
  unreadableSettings,
} from "../src/autoscaling/store.ts";
import type { RecordedDecision } from "../src/autoscaling/decision.ts";
import { listEndpoints, setDesiredReplicas } from "../src/endpoints/store.ts";
import type { Control } from "../src/redis/connection.ts";
import { subscribe } from "../src/redis/subscription.ts";
import { listReplicas } from "../src/replicas/heartbeats.ts";
import { readQueueDepth } from "../src/endpoints/status.ts";
import { QueueBase } from "../src/queue/base.ts";
import { Lease } from "../src/redis/lease.ts";
import { decide } from "../src/autoscaling/policy.ts";
import { coalesced } from "./coalesce.ts";
import { advanceAbTests } from "../src/abtests/lifecycle.ts";
import { reapSilentReplicas } from "./reaper.ts";
import { logLine } from "../src/telemetry/log.ts";
import { advanceRollouts } from "../src/endpoints/rollout-step.ts";
import { servesTraffic, servingQueue } from "../src/endpoints/rollout.ts";

export const DEFAULT_SCALER_INTERVAL_MS = 1000;

export type AutoscalerOptions = {
  /** Time between ticks. Default 1 s. */
  intervalMs?: number;
  /** Shown in decisions and status; default `<hostname>-<pid>`. */
  holderId?: string;
  /** Lease TTL; default max(5 s, 3 ticks): a dead scaler is replaced within this. */
  leaseTtlMs?: number;
  /** Called when this scaler gains or loses the lease. */
  onLeadership?: (leader: boolean) => void;
  log?: (line: string) => void;
};

export type Autoscaler = {
  readonly holderId: string;
  isLeader(): boolean;
  /** Runs a tick now (or right after the one in progress). */
  tick(): Promise<void>;
  /** Stops ticking; releases the lease unless `release: false` (which is how a crash looks). */
  stop(options?: { release?: boolean }): Promise<void>;
};

export async function startAutoscaler(ctl: Control, options: AutoscalerOptions = {}): Promise<Autoscaler> {
  const intervalMs = options.intervalMs ?? DEFAULT_SCALER_INTERVAL_MS;
  const holderId = options.holderId ?? `${hostname()}-${process.pid}`;
  const lease = new Lease(
    ctl.redis,
    ctl.keys.scalerLease,
    holderId,
    options.leaseTtlMs ?? Math.max(5000, intervalMs * 3),
  );
  const log = options.log ?? ((line: string) => logLine(line));
  const queues = new QueueBase(ctl);
  let leader = false;
  let stopped = false;
  // Each unreadable record is logged once (endpoint → the record), not on every tick.
  const reported = new Map<string, string>();

  const setLeader = (value: boolean) => {
    if (value === leader) return;
    leader = value;
    if (value) log(`[scaler] ${holderId} holds the scaler lease: acting`);
    else
      log(
        stopped
          ? `[scaler] ${holderId} stopped and gave up the scaler lease`
          : `[scaler] ${holderId} lost the scaler lease: standing by`,
      );
    options.onLeadership?.(value);
  };

  const tickOnce = async () => {
    let held: boolean;
    try {
      // Take if free, else renew: a holder whose lease expired while Redis was away, and that nobody
      // took meanwhile, keeps acting rather than standing by (which drops a local backend's replicas).
      held = await lease.tryAcquire();
    } catch (e) {
      // Redis unreachable: nobody can act. Keep the state; the next tick tells.
      log(`[scaler] lease check failed: ${(e as Error).message}`);
      return;
    }
    if (stopped) return;
    setLeader(held);
    if (!held) return;
    const endpoints = await listEndpoints(ctl);
    await reapSilentReplicas(queues, endpoints, log).catch((e: Error) => log(`[scaler] heartbeat watch: ${e.message}`));
    await advanceAbTests(queues, log).catch((e: Error) => log(`[scaler] A/B tests: ${e.message}`));
    await advanceRollouts(ctl, (queue) => readQueueDepth(queues.queueNamed(queue)), log).catch((e: Error) =>
      log(`[scaler] rollouts: ${e.message}`),
    );
    const stored = await readAutoscalingMany(
      ctl,
      endpoints.map((e) => e.name),
    );
    for (const endpoint of endpoints) {
      const record = stored.get(endpoint.name);
      if (record?.ok === false && reported.get(endpoint.name) !== record.raw) {
        reported.set(endpoint.name, record.raw);
        log(`[scaler] ${unreadableSettings(endpoint.name, record.problem)}`);
      }
      if (record?.ok !== false) reported.delete(endpoint.name);
      // While an update rolls out, both deployments keep their replica count: the policy waits.
      if (!record?.ok || stopped || endpoint.rollout) continue;
      try {
        const d = await scaleEndpoint(
          ctl,
          queues.queueNamed(servingQueue(endpoint)),
          endpoint,
          record.settings,
          holderId,
          Date.now(),
        );
        if (d.action !== "hold") log(`[scaler] ${endpoint.name}: ${d.reason}`);
      } catch (e) {
        log(`[scaler] ${endpoint.name}: ${(e as Error).message}`);
      }
    }
  };

  const tick = coalesced(
    async () => {
      try {
        await tickOnce();
      } catch (e) {
        log(`[scaler] tick failed: ${(e as Error).message}`);
      }
    },
    () => !stopped,
  );

  // Gateways ask for a tick when a request waits on an endpoint with no replica: scale from zero
  // then starts at once instead of on the next tick.
  const subscription = await subscribe(ctl, [ctl.keys.scalerWakeup], () => void tick());
  const timer = setInterval(() => void tick(), intervalMs);
  await tick();

  return {
    holderId,
    isLeader: () => leader,
    tick,
    stop: async ({ release = true } = {}) => {
      stopped = true;
      clearInterval(timer);
      await subscription.close();
      await tick.settled();
      await queues.close();
      if (release && leader) await lease.release().catch(() => undefined);
      setLeader(false);
    },
  };
}

/** One endpoint, one tick: observe, decide, apply, record. */
export async function scaleEndpoint(
  ctl: Control,
  queue: Queue,
  endpoint: Endpoint,
  config: AutoscalingSettings,
  holder: string,
  now: number,
): Promise<RecordedDecision> {
  const [depth, replicas, history] = await Promise.all([
    readQueueDepth(queue),
    listReplicas(ctl, endpoint.name),
    getScalingHistory(ctl, endpoint.name),
  ]);
  const ready = replicas.filter((r) => r.state === "ready" && servesTraffic(r, endpoint)).length;
  const current = endpoint.desired_replicas;
  const decision = decide({ now, waiting: depth.waiting, active: depth.active, current, ready }, config, history);
  if (decision.desired !== current) await setDesiredReplicas(ctl, endpoint.name, decision.desired);
  const record: RecordedDecision = {
    at: now,
    since: now,
    repeats: 1,
    action: decision.action,
    from: current,
    to: decision.desired,
    needed: decision.needed,
    reason: decision.reason,
    inputs: { waiting: depth.waiting, active: depth.active, ready, current },
    holder,
  };
  await recordDecision(ctl, endpoint.name, record, decision.history);
  return record;
}
