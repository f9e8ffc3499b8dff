/**
 * The queue, admission, heartbeats and worker sections: the embedded Redis `up` starts, how much
 * an endpoint's queue may hold, and how replicas show (and check) that they are alive.
 */
import { z } from "zod";
import { Flag, flag, positiveMs } from "./parse.ts";

/** Deep enough for any burst a few replicas can absorb; a minute is as long as clients usually wait. */
export const ADMISSION_DEFAULTS = { maxQueueDepth: 1000, maxQueueWaitMs: 60_000 } as const;
/** Long enough for a busy replica's next sequence to free on a small model, short against a request's wait. */
export const DEFAULT_LANE_WAIT_MS = 500;
/** A beat a second: a dead replica drops out of every count within a few seconds (its record lives 4 beats). */
export const DEFAULT_HEARTBEAT_MS = 1000;

export const queueShape = {
  /** The redis-server `up` runs when REDIS_URL is unset (a path, or a name on PATH). */
  PLATFORM_REDIS_SERVER: z
    .string()
    .min(1, "expected a redis-server executable (a path or a name on PATH)")
    .default("redis-server"),
  /** How often `up` restarts an embedded Redis that died, within the window, before it gives up (docs/fleet.md). */
  PLATFORM_REDIS_RESTARTS: z.coerce
    .number({ message: "expected a whole number of restarts" })
    .int()
    .nonnegative()
    .default(5),
  PLATFORM_REDIS_RESTART_WINDOW_MS: positiveMs(60_000),
  PLATFORM_MAX_QUEUE_DEPTH: z.coerce
    .number({ message: "expected a whole number of requests" })
    .int()
    .min(1)
    .default(ADMISSION_DEFAULTS.maxQueueDepth),
  PLATFORM_MAX_QUEUE_WAIT_MS: positiveMs(ADMISSION_DEFAULTS.maxQueueWaitMs),
  PLATFORM_HEARTBEAT_MS: positiveMs(DEFAULT_HEARTBEAT_MS),
  /** Prefix-affine dispatch (src/queue/lanes.ts): off, every job goes to the shared queue. */
  PLATFORM_PREFIX_AFFINITY: flag(true),
  /** How long a job waits in its replica's lane before any replica may take it. */
  PLATFORM_LANE_WAIT_MS: positiveMs(DEFAULT_LANE_WAIT_MS),
  /** Set by `up` (through the local backend) in its workers' environment, never by hand. */
  PLATFORM_EXIT_WITH_PARENT: Flag,
  /** The local backend keeps one loaded worker waiting for its endpoint (docs/fleet.md, "Standby worker"). */
  PLATFORM_STANDBY_WORKER: flag(true),
  /** Local workers serve /metrics on a port of their own (docs/observability.md); off: each would load prom-client. */
  PLATFORM_WORKER_METRICS: Flag,
};

type QueueEnv = z.infer<z.ZodObject<typeof queueShape>>;

/** `redisRestarts` within `redisRestartWindowMs`: the embedded Redis's restart budget (src/redis/supervisor.ts). */
export type QueueSettings = { redisServer: string; redisRestarts: number; redisRestartWindowMs: number };
/** Gateway-wide defaults; an endpoint's `resources.max_queue_depth` / `max_queue_wait` override them. */
export type AdmissionSettings = {
  maxQueueDepth: number;
  maxQueueWaitMs: number;
  /** Prefix-affine dispatch's lane wait (src/queue/lanes.ts); undefined: affinity off. */
  laneWaitMs?: number;
};
export type HeartbeatSettings = { intervalMs: number };
/**
 * `exitWithParent`: a worker started by `up` watches it, and exits when it is gone (a Redis outage it rides out).
 * `standby`: the local backend keeps a spare worker process loaded, to start replicas from.
 * `metrics`: the local backend gives each worker a health port, for /metrics.
 */
export type WorkerSettings = { exitWithParent: boolean; standby: boolean; metrics: boolean };

export function queueSections(e: QueueEnv): {
  queue: QueueSettings;
  admission: AdmissionSettings;
  heartbeats: HeartbeatSettings;
  worker: WorkerSettings;
} {
  return {
    queue: {
      redisServer: e.PLATFORM_REDIS_SERVER,
      redisRestarts: e.PLATFORM_REDIS_RESTARTS,
      redisRestartWindowMs: e.PLATFORM_REDIS_RESTART_WINDOW_MS,
    },
    admission: {
      maxQueueDepth: e.PLATFORM_MAX_QUEUE_DEPTH,
      maxQueueWaitMs: e.PLATFORM_MAX_QUEUE_WAIT_MS,
      laneWaitMs: e.PLATFORM_PREFIX_AFFINITY ? e.PLATFORM_LANE_WAIT_MS : undefined,
    },
    heartbeats: { intervalMs: e.PLATFORM_HEARTBEAT_MS },
    worker: {
      exitWithParent: e.PLATFORM_EXIT_WITH_PARENT,
      standby: e.PLATFORM_STANDBY_WORKER,
      metrics: e.PLATFORM_WORKER_METRICS,
    },
  };
}
