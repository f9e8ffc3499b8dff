/**
 * The scaler's part in rollouts (rollout.ts), on every tick of the scaler that holds the lease:
 * an update whose replicas are all ready takes the traffic, one whose replicas fail says why, and
 * a drained revision goes once its queue is empty.
 */
import type { Control } from "../redis/connection.ts";
import { listReplicas } from "../replicas/heartbeats.ts";
import { rolloutStep } from "./rollout.ts";
import type { QueueDepth } from "./record.ts";
import { changeEndpoint, listEndpoints } from "./store.ts";

export async function advanceRollouts(
  ctl: Control,
  depth: (queue: string) => Promise<QueueDepth>,
  log: (line: string) => void,
): Promise<void> {
  for (const e of await listEndpoints(ctl)) {
    if (!e.rollout && !e.draining) continue;
    const step = await rolloutStep(e, { replicas: await listReplicas(ctl, e.name), depth, now: Date.now() });
    if (!step) continue;
    const seen = JSON.stringify(e);
    // Taken on the record it was computed from only: a deploy that landed meanwhile is stepped next tick.
    const written = await changeEndpoint(ctl, e.name, (current) =>
      current && JSON.stringify(current) === seen ? step.next : undefined,
    );
    if (written === step.next) log(`[rollout] ${step.event}`);
  }
}
