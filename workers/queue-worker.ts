/**
 * Taking jobs: the BullMQ worker on the endpoint's queue, how many jobs it holds at once and how
 * soon another replica gets them back should this one die.
 */
import type { Processor, Worker } from "bullmq";
import { endpointQueueName } from "../src/contracts/engines.ts";
import { QueueBase } from "../src/queue/base.ts";
import { MAX_REPLICA_LOSSES } from "../src/queue/reclaim.ts";
import type { WorkerState } from "./state.ts";

/**
 * Jobs a replica holds per engine sequence: one running, one waiting in `slots` for it, so a
 * finishing sequence starts its next job with no Redis round trip (docs/performance.md,
 * "Prefetch"). More would only keep jobs from idle replicas.
 */
const PREFETCH_FACTOR = 2;

/** Created stopped: the caller runs it once the replica's heartbeat names it (`queue_worker`). */
export function queueWorker(w: WorkerState, parallel: number, handle: Processor): Worker {
  return new QueueBase(w.ctl).workerNamed(endpointQueueName(w.endpoint), handle, {
    // Jobs beyond the engine's sequences wait in `slots` (workers/slots.ts).
    concurrency: parallel * PREFETCH_FACTOR,
    // A dead replica's jobs are taken back as soon as its supervisor or the scaler learns of the
    // death (src/queue/reclaim.ts). Should nobody notice, its lock (renewed every 2.5 s) lapses
    // within 5 s and a check (every 2 s) requeues the job: 9 s at most, not BullMQ's default 30 s.
    // One retry: a job that kills a second replica is failed (docs/fleet.md).
    lockDuration: 5_000,
    stalledInterval: 2_000,
    maxStalledCount: MAX_REPLICA_LOSSES,
    // Started only once the heartbeat names this BullMQ worker: a job it holds is always traceable to it.
    autorun: false,
  });
}
