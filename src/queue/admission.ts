/**
 * Admission control: the gateway's check before it enqueues an online request.
 *
 * - Queue full: `max_queue_depth` online requests already wait → 429 `queue_full`.
 * - No capacity coming: no ready replica and none on the way (scaled to zero
 *   with autoscaling off, or every replica failing to start) → 503 `no_capacity`.
 * - Otherwise the request is admitted, and may wait at most `max_queue_wait`
 *   for a replica to take it (enforced by the dispatcher: 503 `queue_timeout`).
 * - Requests already waiting on an autoscaled endpoint below its max: the
 *   scaler is woken at once (pub/sub), so a load step is acted on in
 *   milliseconds rather than at the next tick.
 *
 * What it reads from Redis is cached briefly (queue depth 200 ms, replicas
 * 500 ms) and shared by concurrent requests, and requests admitted since the
 * last read are counted locally, so a burst cannot slip past the limit.
 * docs/fleet.md documents the limits and codes.
 */
import { parseDuration } from "../contracts/duration.ts";
import { RETRY_AFTER_S } from "../contracts/job.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import type { Endpoint } from "../endpoints/record.ts";
import { getAutoscaling } from "../autoscaling/store.ts";
import type { Control } from "../redis/connection.ts";
import { withinRedisWait } from "../redis/wait.ts";
import { listReplicas } from "../replicas/heartbeats.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { ADMISSION_DEFAULTS } from "../settings/queue.ts";
import type { QueueBase } from "./base.ts";
import { onlineWaiting } from "./fair-share.ts";
import type { LaneReplica } from "./lanes.ts";

export type AdmissionLimits = {
  maxQueueDepth: number;
  maxQueueWaitMs: number;
  /**
   * Nothing waited in the queue at the last read, nor was admitted since: the job may take its
   * band's head without the fair-share script (fair-share.ts), saving a round trip when idle.
   */
  idle?: boolean;
  /** The ready replicas' lanes, for prefix-affine dispatch (lanes.ts); absent: affinity off or under two replicas. */
  lanes?: { replicas: LaneReplica[]; waitMs: number };
};

export type RejectReason = "queue_full" | "no_capacity";

export function limitsFor(endpoint: Endpoint, defaults: AdmissionLimits): AdmissionLimits {
  const r = endpoint.config.resources;
  const wait = r.max_queue_wait === undefined ? undefined : parseDuration(r.max_queue_wait);
  return {
    maxQueueDepth: r.max_queue_depth ?? defaults.maxQueueDepth,
    maxQueueWaitMs: wait ?? defaults.maxQueueWaitMs,
  };
}

/** `scalesUp`: autoscaling may still add a replica (enabled, below max_replicas). */
type Capacity = {
  ready: number;
  starting: number;
  failed: number;
  error: string | undefined;
  scalesFromZero: boolean;
  scalesUp: boolean;
  /** The ready replicas that serve a lane; `load` is counted up here as jobs are routed, until the next read. */
  lanes: LaneReplica[];
};

export type AdmissionOptions = {
  /** Gateway-wide limits (settings.admission); an endpoint's `resources.max_queue_depth` / `max_queue_wait` override them. */
  defaults?: AdmissionLimits;
  /** Default 200 ms. */
  depthCacheMs?: number;
  /** Default 500 ms. */
  capacityCacheMs?: number;
  onReject?: (endpoint: Endpoint, reason: RejectReason) => void;
  /** How long a job waits in its replica's lane (settings.admission.laneWaitMs); absent: no lanes. */
  laneWaitMs?: number;
};

export class Admission {
  readonly defaults: AdmissionLimits;
  private readonly ctl: Control;
  private readonly queues: QueueBase;
  private readonly options: AdmissionOptions;
  private readonly depth: Fresh<number>;
  private readonly capacity: Fresh<Capacity>;
  private readonly wokeAt = new Map<string, number>();

  constructor(queues: QueueBase, options: AdmissionOptions = {}) {
    this.ctl = queues.ctl;
    this.queues = queues;
    this.options = options;
    this.defaults = options.defaults ?? { ...ADMISSION_DEFAULTS };
    this.depth = new Fresh(options.depthCacheMs ?? 200);
    this.capacity = new Fresh(options.capacityCacheMs ?? 500);
  }

  /** Throws the 429/503 PlatformError when the request must not be queued; else returns its limits. */
  async admit(endpoint: Endpoint): Promise<AdmissionLimits> {
    const limits = limitsFor(endpoint, this.defaults);
    const queue = endpointQueueName(endpoint);
    let capacity: Capacity;
    let waitingEntry: { value: number };
    try {
      [{ value: capacity }, waitingEntry] = await withinRedisWait(
        Promise.all([
          this.capacity.get(`${endpoint.name}\n${queue}`, () => this.readCapacity(endpoint, queue)),
          this.depth.get(queue, () => this.readWaiting(queue)),
        ]),
        this.ctl.redis,
      );
    } catch (e) {
      // ioredis' message names the Redis address: it stays in the gateway log.
      throw withDetail(
        new PlatformError(503, "queue_unavailable", "the queue is unavailable, retry shortly", null, 1),
        e,
      );
    }

    if (capacity.ready === 0) {
      const refusal = noCapacity(endpoint, capacity);
      if (refusal) {
        this.options.onReject?.(endpoint, "no_capacity");
        // A replica's start error may quote server paths: admins see it in `status`, the log keeps it.
        const err = new PlatformError(503, "no_capacity", refusal, null, RETRY_AFTER_S.no_capacity);
        throw capacity.error === undefined ? err : withDetail(err, `replica error: ${capacity.error}`);
      }
      if (endpoint.desired_replicas === 0) this.wakeScaler(endpoint.name);
    }
    if (waitingEntry.value >= limits.maxQueueDepth) {
      this.options.onReject?.(endpoint, "queue_full");
      throw new PlatformError(
        429,
        "queue_full",
        `${waitingEntry.value} requests are already waiting for "${endpoint.name}" (max_queue_depth ${limits.maxQueueDepth}); retry after ${RETRY_AFTER_S.queue_full} s`,
        null,
        RETRY_AFTER_S.queue_full,
      );
    }
    // Requests already wait: every replica is full. A scaler tick now, not at its next interval,
    // lets a load step start a replica as soon as it begins (the policy still decides).
    if (waitingEntry.value > 0 && capacity.scalesUp) this.wakeScaler(endpoint.name);
    const idle = waitingEntry.value === 0;
    // Counted here until the next read from Redis includes it.
    waitingEntry.value += 1;
    const waitMs = this.options.laneWaitMs;
    const lanes = waitMs !== undefined && capacity.lanes.length > 1 ? { replicas: capacity.lanes, waitMs } : undefined;
    return { ...limits, idle, ...(lanes && { lanes }) };
  }

  private async readWaiting(queue: string): Promise<number> {
    // Online requests only: batch records are prioritized below them, so they never delay one.
    return onlineWaiting(this.ctl.redis, this.queues.queueNamed(queue));
  }

  /** The replicas that serve `queue` (an endpoint's traffic goes to one queue: during an update, the previous deployment's). */
  private async readCapacity(endpoint: Endpoint, queue: string): Promise<Capacity> {
    const [replicas, autoscaling] = await Promise.all([
      listReplicas(this.ctl, endpoint.name),
      getAutoscaling(this.ctl, endpoint.name),
    ]);
    const mine = replicas.filter((r) => (r.queue === undefined ? r.version === endpoint.version : r.queue === queue));
    const count = (state: string) => mine.filter((r) => r.state === state).length;
    return {
      ready: count("ready"),
      starting: count("starting"),
      failed: count("failed"),
      error: mine.find((r) => r.error)?.error,
      scalesFromZero: autoscaling?.enabled === true && autoscaling.max_replicas >= 1,
      scalesUp: autoscaling?.enabled === true && endpoint.desired_replicas < autoscaling.max_replicas,
      lanes: mine.flatMap((r) =>
        r.state === "ready" && r.lane ? [{ id: r.id, lane: r.lane, load: r.in_flight, parallel: r.parallel }] : [],
      ),
    };
  }

  /** At most one wake-up a second per endpoint: the scaler ticks every second anyway. */
  private wakeScaler(endpoint: string): void {
    const now = Date.now();
    if (now - (this.wokeAt.get(endpoint) ?? 0) < 1000) return;
    this.wokeAt.set(endpoint, now);
    void this.ctl.redis.publish(this.ctl.keys.scalerWakeup, endpoint).catch(() => undefined);
  }
}

/** Values read from Redis, reused for maxAgeMs; concurrent callers of a stale key share one read. */
class Fresh<T> {
  private readonly maxAgeMs: number;
  private readonly entries = new Map<string, { value: T; at: number }>();
  private readonly loading = new Map<string, Promise<{ value: T; at: number }>>();

  constructor(maxAgeMs: number) {
    this.maxAgeMs = maxAgeMs;
  }

  /** The entry itself, so a caller may adjust its value until the next read replaces it. */
  async get(key: string, load: () => Promise<T>): Promise<{ value: T; at: number }> {
    const hit = this.entries.get(key);
    if (hit && Date.now() - hit.at < this.maxAgeMs) return hit;
    let pending = this.loading.get(key);
    if (!pending) {
      pending = load()
        .then((value) => {
          const entry = { value, at: Date.now() };
          this.entries.set(key, entry);
          return entry;
        })
        .finally(() => this.loading.delete(key));
      this.loading.set(key, pending);
    }
    return pending;
  }
}

/** Why no replica can come for this request, or undefined when one is ready or on its way. */
function noCapacity(endpoint: Endpoint, c: Capacity): string | undefined {
  if (endpoint.desired_replicas === 0) {
    if (c.scalesFromZero) return undefined;
    return `"${endpoint.name}" is scaled to zero and autoscaling is off, so no replica will come; deploy it with --replicas 1 or enable autoscaling (platform inference autoscale ${endpoint.name} --config <file>)`;
  }
  if (c.failed > 0 && c.starting === 0) {
    return `no replica of "${endpoint.name}" could start; \`platform inference status ${endpoint.name}\` (admin) shows why`;
  }
  return undefined;
}
