/**
 * Taking jobs: the BullMQ workers on the endpoint's queue and on this replica's own lane
 * (src/queue/lanes.ts), how many jobs they hold at once and how soon another replica gets them
 * back should this one die.
 */
import type { Processor, Worker } from "bullmq";
import { endpointQueueName } from "../src/contracts/engines.ts";
import { QueueBase } from "../src/queue/base.ts";
import { laneName } from "../src/queue/lanes.ts";
import { MAX_REPLICA_LOSSES } from "../src/queue/reclaim.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import type { Control } from "../src/redis/connection.ts";

/**
 * Jobs a replica holds beyond its engine's sequences, waiting in `slots`: one, so a finishing
 * sequence starts its next job with no Redis round trip (docs/performance.md, "Prefetch"). One per
 * sequence was as fast and held jobs the queue's fair share could not reorder (Jain's index 0.85
 * against 0.94 with one).
 */
const PREFETCH_JOBS = 1;

/** The replica's two BullMQ workers: the shared queue's and its lane's, run and closed together. */
export class QueueWorkers {
  readonly shared: Worker;
  readonly lane: Worker;
  readonly laneName: string;

  constructor(shared: Worker, lane: Worker, name: string) {
    this.shared = shared;
    this.lane = lane;
    this.laneName = name;
  }

  /** The shared queue's worker id: the replica's jobs' locks there start with it (src/queue/reclaim.ts). */
  get id(): string {
    return this.shared.id;
  }

  async run(): Promise<void> {
    await Promise.all([this.shared.run(), this.lane.run()]);
  }

  async close(): Promise<void> {
    await Promise.all([this.shared.close(), this.lane.close()]);
  }
}

/**
 * Created stopped: the caller runs them once the replica's heartbeat names them (`queue_worker`, `lane_worker`).
 * `w`: who the replica is (its WorkerState, state.ts, which holds what this returns).
 */
export function queueWorker(
  w: { ctl: Control; endpoint: Endpoint; replicaId: string },
  parallel: number,
  handle: Processor,
): QueueWorkers {
  const base = new QueueBase(w.ctl);
  const options = {
    // A dead replica's jobs are taken back as soon as its supervisor or the scaler learns of the
    // death (src/queue/reclaim.ts). Should nobody notice, its lock (renewed every 2.5 s) lapses
    // within 5 s and a check (every 2 s) requeues the job: 9 s at most, not BullMQ's default 30 s.
    // One retry: a job that kills a second replica is failed (docs/fleet.md).
    lockDuration: 5_000,
    stalledInterval: 2_000,
    maxStalledCount: MAX_REPLICA_LOSSES,
    // Started only once the heartbeat names this BullMQ worker: a job it holds is always traceable to it.
    autorun: false,
  };
  const queue = endpointQueueName(w.endpoint);
  const lane = laneName(queue, w.replicaId);
  return new QueueWorkers(
    // Jobs beyond the engine's sequences wait in `slots` (workers/slots.ts).
    base.workerNamed(queue, handle, { ...options, concurrency: parallel + PREFETCH_JOBS }),
    // Its lane's jobs wait there a short time only (lanes.ts): one each per sequence is enough.
    base.workerNamed(lane, handle, { ...options, concurrency: parallel }),
    lane,
  );
}
