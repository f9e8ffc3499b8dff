/** An endpoint's state as users see it, from its record, its replicas' heartbeats and its queue. */
import type { Queue } from "bullmq";
import { notApplied } from "../contracts/engines.ts";
import type { EndpointRecord, EndpointState, ReplicaRecord } from "../contracts/records.ts";
import type { Control } from "./redis.ts";
import { listReplicas } from "./replicas.ts";

/** `waiting` counts batch records (prioritized) too: they are demand the replicas must serve. */
export type QueueDepth = { waiting: number; active: number };

/** One round trip: the depth the scaler and `status` report. */
export async function readQueueDepth(queue: Pick<Queue, "getJobCounts">): Promise<QueueDepth> {
  const counts = await queue.getJobCounts("waiting", "prioritized", "active");
  return { waiting: (counts.waiting ?? 0) + (counts.prioritized ?? 0), active: counts.active ?? 0 };
}

export type EndpointStatus = {
  endpoint: string;
  state: EndpointState;
  model: string;
  version: string;
  requested_version: string;
  framework: string;
  replicas: { desired: number; ready: number; starting: number; draining: number; failed: number };
  queue: QueueDepth;
  /** Fields of the deployment this engine cannot honour here: stored, reported, not applied. */
  not_applied: string[];
  errors: string[];
  /** What the replicas load when it is not the registered artifact as is (a checkpoint's GGUF conversion, a quantized copy). */
  weights: string[];
  replica_list: ReplicaRecord[];
  /** Set on the deployment of an A/B test's extra version: the endpoint it serves. */
  variant_of?: string;
};

export async function endpointStatus(ctl: Control, endpoint: EndpointRecord, queue: QueueDepth): Promise<EndpointStatus> {
  const replicas = (await listReplicas(ctl, endpoint.name)).filter((r) => r.version === endpoint.version);
  const count = (state: ReplicaRecord["state"]) => replicas.filter((r) => r.state === state).length;
  const ready = count("ready");
  const failed = count("failed");
  const servedOnce = (await ctl.redis.exists(ctl.keys.servedOnce(endpoint.name))) === 1;
  return {
    endpoint: endpoint.name,
    state: deriveState(endpoint.desired_replicas, ready, failed, servedOnce),
    model: endpoint.config.model.name,
    version: endpoint.version,
    requested_version: endpoint.config.model.version,
    framework: endpoint.framework,
    replicas: { desired: endpoint.desired_replicas, ready, starting: count("starting"), draining: count("draining"), failed },
    queue,
    not_applied: notApplied(endpoint.framework, endpoint.config),
    errors: [...new Set(replicas.flatMap((r) => (r.error ? [r.error] : [])))],
    weights: [...new Set(replicas.flatMap((r) => (r.weights ? [r.weights] : [])))],
    replica_list: replicas,
    ...(endpoint.variant_of ? { variant_of: endpoint.variant_of } : {}),
  };
}

/**
 * pending: no replica has passed its health check yet; available: enough are
 * ready; degraded: fewer than wanted, after having served; failed: replicas
 * fail to start and none is ready.
 */
export function deriveState(desired: number, ready: number, failed: number, servedOnce: boolean): EndpointState {
  if (ready > 0) return ready >= desired ? "available" : "degraded";
  if (failed > 0) return "failed";
  if (desired === 0) return "scaled_to_zero";
  return servedOnce ? "degraded" : "pending";
}
