/**
 * The replica's record in Redis and its beat: rewritten every interval from the moment the worker
 * starts, and at once whenever something `status` or a scraper reads has changed.
 */
import { hostname } from "node:os";
import { endpointQueueName } from "../src/contracts/engines.ts";
import { revisionId } from "../src/endpoints/rollout.ts";
import { writeReplica } from "../src/replicas/heartbeats.ts";
import type { WorkerState } from "./state.ts";

export type Heartbeat = {
  /** Writes the record now. Never rejects: Redis may blip, and the next beat retries. */
  beat: () => Promise<void>;
  stop: () => void;
};

export function startHeartbeat(w: WorkerState, heartbeatMs: number): Heartbeat {
  const started = Date.now();
  const beat = () =>
    writeReplica(
      w.ctl,
      {
        id: w.replicaId,
        endpoint: w.endpoint.name,
        model: w.endpoint.config.model.name,
        version: w.endpoint.version,
        state: w.state,
        pid: process.pid,
        host: hostname(),
        started,
        heartbeat: Date.now(),
        in_flight: w.inFlight.size,
        parallel: w.engine?.parallel ?? w.endpoint.config.resources.parallel,
        error: w.error,
        queue_worker: w.queueWorker?.id,
        lane: w.queueWorker?.laneName,
        lane_worker: w.queueWorker?.lane.id,
        revision: revisionId(w.endpoint),
        queue: endpointQueueName(w.endpoint),
        heartbeat_ms: heartbeatMs,
        health_port: w.healthPort,
        weights: w.weights,
        ...adaptersOf(w),
      },
      heartbeatMs,
    ).catch(() => undefined);
  const timer = setInterval(beat, heartbeatMs);
  void beat();
  return { beat, stop: () => clearInterval(timer) };
}

/** The adapters the replica's engine holds loaded, for `status` (none: the field is left out). */
function adaptersOf(w: WorkerState): { adapters?: string[] } {
  const names = w.engine?.adapterStats?.().names ?? [];
  return names.length > 0 ? { adapters: names.slice(0, 64) } : {};
}
