/**
 * The scaler's watch on heartbeats, whatever the backend: a replica whose
 * record has not been rewritten for SILENT_BEATS of its own beats is taken
 * for dead (a pod on a lost node, a process hung or killed where no
 * supervisor saw it) and its jobs are taken back at once (src/queue/reclaim.ts)
 * rather than when their locks lapse. The window between SILENT_BEATS and the
 * record's TTL (HEARTBEAT_TTL_BEATS) is longer than a scaler tick, so a tick
 * sees the silent record before it expires.
 */
import type { Endpoint } from "../src/endpoints/record.ts";
import { listReplicas } from "../src/replicas/heartbeats.ts";
import type { QueueBase } from "../src/queue/base.ts";
import { reclaimJobs } from "../src/queue/reclaim.ts";
import { outageOf } from "../src/redis/outage.ts";
import { DEFAULT_HEARTBEAT_MS } from "../src/settings/queue.ts";

export const SILENT_BEATS = 2.5;

export async function reapSilentReplicas(
  queues: QueueBase,
  endpoints: readonly Endpoint[],
  log: (line: string) => void,
  now = Date.now(),
): Promise<void> {
  // A replica could not beat while this scaler's Redis was away (restarting): its silence counts from the return.
  const back = outageOf(queues.ctl.redis).readyAt;
  for (const endpoint of endpoints) {
    const replicas = await listReplicas(queues.ctl, endpoint.name);
    for (const replica of replicas) {
      if (
        replica.state === "failed" ||
        now - Math.max(replica.heartbeat, back) <= SILENT_BEATS * (replica.heartbeat_ms ?? DEFAULT_HEARTBEAT_MS)
      )
        continue;
      const { requeued, failed } = await reclaimJobs(queues, replica);
      if (requeued.length + failed.length > 0) {
        log(
          `[scaler] replica ${replica.id} of ${endpoint.name} is silent for ${now - replica.heartbeat} ms: ${requeued.length} job(s) back in the queue, ${failed.length} failed after losing too many replicas`,
        );
      }
    }
  }
}
