/**
 * What the parts of a worker share (workers/worker.ts puts them together), in one object passed to
 * each: who the replica is, its lifecycle as the heartbeat publishes it, and the jobs it holds.
 */
import type { QueueWorkers } from "./queue-worker.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import type { Control } from "../src/redis/connection.ts";
import type { Subscription } from "../src/redis/subscription.ts";
import type { ReplicaState } from "../src/replicas/record.ts";
import type { Engine } from "./engines/engine.ts";

/** Past this many remembered cancellations, all are forgotten: the set stays bounded. */
const CANCELS_KEPT = 10_000;

export class WorkerState {
  readonly ctl: Control;
  readonly endpoint: Endpoint;
  readonly replicaId: string;

  state: ReplicaState = "starting";
  /** Why the replica failed, for `status`. */
  error: string | undefined;
  /** What the replica loads when it is not the artifact as registered (WorkerOptions.loadEngine). */
  weights: string | undefined;
  engine: Engine | undefined;
  /** Why the engine's process ended, once it has (Engine.lost). */
  engineLost: string | undefined;
  /** The BullMQ workers taking this replica's jobs; the heartbeat names them before they take one. */
  queueWorker: QueueWorkers | undefined;
  /** Where cancellations are heard (src/queue/cancel.ts). */
  cancels: Subscription | undefined;
  /** The port the health server listens on (port 0 asks for any free one), once it does. */
  healthPort: number | undefined;

  /** Jobs taken and not yet answered (running or waiting for a sequence), each with its abort. */
  readonly inFlight = new Map<string, AbortController>();
  /** Jobs holding a sequence; the others in `inFlight` wait in `slots` for one. */
  readonly generating = new Set<string>();
  /** Jobs aborted by the drain, to be handed back to the queue rather than failed. */
  readonly releasing = new Set<string>();
  /** Jobs cancelled by their clients, as heard here. */
  readonly cancelled = new Set<string>();
  /** Set once the drain begins: a job taken after it goes back to the queue at once. */
  draining = false;

  constructor(ctl: Control, endpoint: Endpoint, replicaId: string) {
    this.ctl = ctl;
    this.endpoint = endpoint;
    this.replicaId = replicaId;
  }

  /** A client cancelled `jobId`: a job held here ends now, one taken later at once. */
  cancel(jobId: string): void {
    this.inFlight.get(jobId)?.abort();
    this.cancelled.add(jobId);
    if (this.cancelled.size > CANCELS_KEPT) this.cancelled.clear();
  }
}
