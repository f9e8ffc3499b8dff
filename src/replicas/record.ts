/** A replica as its heartbeat describes it (written by each worker, expiring when it stops beating). */
import { z } from "zod";

export const ReplicaState = z.enum(["starting", "ready", "draining", "failed"]);
export type ReplicaState = z.infer<typeof ReplicaState>;

/** Written by each worker as its heartbeat; expires when the worker stops beating. */
export const Replica = z.object({
  id: z.string(),
  endpoint: z.string(),
  model: z.string(),
  version: z.string(),
  state: ReplicaState,
  pid: z.number().int(),
  host: z.string(),
  started: z.number().int(),
  heartbeat: z.number().int(),
  in_flight: z.number().int(),
  parallel: z.number().int(),
  error: z.string().optional(),
  /** The replica's BullMQ worker id: its jobs' locks start with it (src/queue/reclaim.ts). */
  queue_worker: z.string().optional(),
  /** Its own lane (src/queue/lanes.ts) and the BullMQ worker id that serves it; absent from older releases. */
  lane: z.string().max(512).optional(),
  lane_worker: z.string().optional(),
  /** The endpoint's revision it runs (src/endpoints/rollout.ts `revisionId`); absent from older releases. */
  revision: z.string().max(64).optional(),
  /** The queue it serves (its endpoint's, engines.ts `endpointQueueName`); absent from older releases: the version's default. */
  queue: z.string().optional(),
  /** How often this replica beats: a record older than a few beats is a replica gone silent. */
  heartbeat_ms: z.number().int().positive().optional(),
  /** Where it serves /livez, /readyz and /metrics on `host`, when it does (`--health-port`). */
  health_port: z.number().int().min(1).max(65535).optional(),
  /**
   * What it loaded when that is not the registered artifact as it is (a checkpoint's GGUF conversion,
   * a quantized copy), and whether this replica made it or found it made: `status` shows it.
   */
  weights: z.string().max(300).optional(),
  /** The LoRA adapters (`<name>@<version>`) it holds loaded now, at most `runtime.max_loras` (docs/adapters.md). */
  adapters: z.array(z.string().max(130)).max(64).optional(),
});
export type Replica = z.infer<typeof Replica>;
