/** An endpoint's state as users see it, from its record, its replicas' heartbeats and its queue. */
import type { Queue } from "bullmq";
import { endpointQueueName, notApplied } from "../contracts/engines.ts";
import type { Endpoint, EndpointState, EndpointStatus, QueueDepth, Revision } from "./record.ts";
import { revisionId, revisionView, runningRevisions, servesTraffic } from "./rollout.ts";
import type { Replica } from "../replicas/record.ts";
import type { Control } from "../redis/connection.ts";
import { listReplicas } from "../replicas/heartbeats.ts";

/** One round trip: the depth the scaler and `status` report. */
export async function readQueueDepth(queue: Pick<Queue, "getJobCounts">): Promise<QueueDepth> {
  const counts = await queue.getJobCounts("waiting", "prioritized", "active");
  return { waiting: (counts.waiting ?? 0) + (counts.prioritized ?? 0), active: counts.active ?? 0 };
}

/**
 * `queue`: the depth of the queue that takes the endpoint's traffic (rollout.ts `servingQueue`).
 * Counts are of the replicas serving that traffic; `replica_list` has every revision's replicas.
 */
export async function endpointStatus(ctl: Control, endpoint: Endpoint, queue: QueueDepth): Promise<EndpointStatus> {
  // Replicas of revisions the endpoint no longer runs (a failed start's record outlives it) are not its own.
  const running = new Set(runningRevisions(endpoint, endpoint.desired_replicas).map((r) => r.id));
  const all = (await listReplicas(ctl, endpoint.name)).filter(
    (r) => r.revision === undefined || running.has(r.revision),
  );
  const replicas = all.filter((r) => servesTraffic(r, endpoint));
  const count = (state: Replica["state"]) => replicas.filter((r) => r.state === state).length;
  const ready = count("ready");
  const failed = count("failed");
  const servedOnce = (await ctl.redis.exists(ctl.keys.servedOnce(endpoint.name))) === 1;
  const rollout = endpoint.rollout;
  const target = revisionId(endpoint);
  const describe = (r: Revision) => ({
    version: r.version,
    revision: revisionId(r),
    queue: endpointQueueName(revisionView(endpoint, r)),
  });
  return {
    endpoint: endpoint.name,
    state: rollout ? "updating" : deriveState(endpoint.desired_replicas, ready, failed, servedOnce),
    model: endpoint.config.model.name,
    version: endpoint.version,
    requested_version: endpoint.config.model.version,
    framework: endpoint.framework,
    replicas: {
      desired: endpoint.desired_replicas,
      ready,
      starting: count("starting"),
      draining: count("draining"),
      failed,
    },
    queue,
    not_applied: notApplied(endpoint.framework, endpoint.config),
    errors: [...new Set(all.flatMap((r) => (r.error ? [r.error] : [])))],
    weights: [...new Set(all.flatMap((r) => (r.weights ? [r.weights] : [])))],
    adapters: [...new Set(all.flatMap((r) => r.adapters ?? []))].sort(),
    replica_list: all,
    ...(endpoint.variant_of ? { variant_of: endpoint.variant_of } : {}),
    ...(rollout
      ? {
          rollout: {
            from: describe(rollout.from),
            to: describe(endpoint),
            started: rollout.started,
            ready: all.filter((r) => r.revision === target && r.state === "ready").length,
            ...(rollout.failed ? { failed: rollout.failed } : {}),
          },
        }
      : {}),
    ...(endpoint.draining
      ? { draining_revisions: endpoint.draining.map((d) => ({ ...describe(d), replicas: d.replicas })) }
      : {}),
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
