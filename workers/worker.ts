/**
 * A worker: one replica of one endpoint. It heartbeats into Redis from the moment it starts, takes
 * jobs from its model queue only after a real warm-up inference, streams events back to whoever
 * asked, and drains on shutdown. This file puts the parts together; what they share is one
 * WorkerState (workers/state.ts).
 */
import type { Control } from "../src/redis/connection.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import { DEFAULT_SCHEMA_LIMITS, type SchemaLimits } from "../src/contracts/schema-limits.ts";
import { listenForCancels } from "../src/queue/cancel.ts";
import { DEFAULT_HEARTBEAT_MS } from "../src/settings/queue.ts";
import { logger } from "../src/telemetry/log.ts";
import { drain } from "./drain.ts";
import { watchEngine } from "./engine-lost.ts";
import type { AdapterResolver } from "./adapters.ts";
import type { Engine } from "./engines/engine.ts";
import type { ObjectStore } from "../src/storage/store.ts";
import { loadMetrics, serveHealth } from "./health-server.ts";
import { type Heartbeat, startHeartbeat } from "./heartbeat.ts";
import { JobHandler } from "./job-handler.ts";
import type { WorkerMetrics } from "./metrics.ts";
import { queueWorker } from "./queue-worker.ts";
import { Slots } from "./slots.ts";
import { WorkerState } from "./state.ts";

export type WorkerOptions = {
  ctl: Control;
  endpoint: Endpoint;
  replicaId: string;
  /** `describeWeights`: what the replica loads when it is not the artifact as registered (a conversion, a quantized copy). */
  loadEngine: (describeWeights: (weights: string) => void) => Promise<Engine>;
  /** Serve /livez, /readyz (Kubernetes probes) and /metrics (Prometheus) here; undefined: no HTTP server. */
  healthPort?: number;
  /** How often the replica record is rewritten (settings.heartbeats.intervalMs). */
  heartbeatMs?: number;
  /**
   * The engine's own process ended (Engine.lost). The replica is then dead: by default the process
   * exits at once with code 1, and its jobs are handed to other replicas the way a killed replica's
   * are (src/queue/reclaim.ts: by its supervisor at once, else when their locks lapse), each job
   * counting the loss, so that a request that crashes the engine every time ends as `replica_lost`.
   */
  onEngineLost?: (why: string) => void;
  /** What a job's JSON schemas are held to (settings.structured.limits); OpenAI's limits when absent. */
  schemaLimits?: SchemaLimits;
  /** Resolves jobs' LoRA adapters (workers/adapters.ts); absent: jobs naming one are refused. */
  adapters?: AdapterResolver;
  /** Where image jobs write their PNGs (the artifact store, which the gateway reads them from). */
  images?: ObjectStore;
};

export type RunningWorker = {
  /** Resolves when the worker is ready (after warm-up), rejects if loading failed. */
  ready: Promise<void>;
  /**
   * Stop taking jobs and finish the in-flight ones; past `deadlineMs` (0: at once) abort them and
   * give their jobs back to the queue, for another replica. Then release everything.
   */
  drain: (options?: { deadlineMs?: number }) => Promise<void>;
  /** Jobs taken and not yet answered (running or waiting for a sequence). */
  inFlight: () => number;
};

const log = logger("worker");

export function startWorker(options: WorkerOptions): RunningWorker {
  const w = new WorkerState(options.ctl, options.endpoint, options.replicaId);
  // Only where something can scrape them (docs/observability.md).
  const metrics = options.healthPort === undefined ? undefined : loadMetrics(w);
  const heartbeat = startHeartbeat(w, options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
  const health =
    options.healthPort === undefined ? undefined : serveHealth(w, options.healthPort, metrics, heartbeat.beat);
  return {
    ready: serve(w, options, heartbeat, metrics),
    drain: (drainOptions) => drain(w, heartbeat, health, drainOptions),
    inFlight: () => w.inFlight.size,
  };
}

/** Load the engine and warm it up, then take jobs. */
async function serve(
  w: WorkerState,
  options: WorkerOptions,
  heartbeat: Heartbeat,
  metricsLoaded: Promise<WorkerMetrics> | undefined,
): Promise<void> {
  const engine = await warmEngine(w, options, heartbeat);
  const metrics = await metricsLoaded;
  w.cancels = await listenForCancels(w.ctl, (jobId) => w.cancel(jobId));
  const jobs = new JobHandler(
    w,
    engine,
    new Slots(engine.parallel),
    metrics,
    options.schemaLimits ?? DEFAULT_SCHEMA_LIMITS,
    options.adapters,
    options.images,
  );
  w.queueWorker = queueWorker(w, engine.parallel, jobs.handle);
  w.state = "ready";
  await heartbeat.beat();
  watchEngine(w, engine, heartbeat.beat, options.onEngineLost ?? (() => process.exit(1)));
  void w.queueWorker.run().catch((e: Error) => log.error({ replica: w.replicaId, err: e }, "the queue worker stopped"));
  await w.ctl.redis.set(w.ctl.keys.servedOnce(w.endpoint.name), String(Date.now()));
}

/** The engine, warmed up by a real inference; a replica that cannot get there is failed, and says why. */
async function warmEngine(w: WorkerState, options: WorkerOptions, heartbeat: Heartbeat): Promise<Engine> {
  try {
    w.engine = await options.loadEngine((weights) => {
      w.weights = weights;
    });
    await w.engine.warmup();
    return w.engine;
  } catch (e) {
    w.state = "failed";
    w.error = e instanceof Error ? e.message : String(e);
    await heartbeat.beat();
    throw e;
  }
}
