/**
 * Draining a replica: stop taking jobs and finish the in-flight ones; past the deadline abort them
 * and hand their jobs back to the queue, for another replica. Then release everything.
 */
import type { Server } from "node:http";
import { removeReplica } from "../src/replicas/heartbeats.ts";
import type { Heartbeat } from "./heartbeat.ts";
import type { WorkerState } from "./state.ts";

/** After the drain deadline, how long aborted jobs get to be handed back before the drain moves on. */
const RELEASE_GRACE_MS = 3_000;
/** The clean-up after a drain waits this long at most: RedisClient may be gone. */
const STEP_MS = 1_000;

/** `deadlineMs`: how long in-flight jobs may run on (0: they are handed back at once). */
export async function drain(
  w: WorkerState,
  heartbeat: Heartbeat,
  health: Server | undefined,
  { deadlineMs = 30_000 }: { deadlineMs?: number } = {},
): Promise<void> {
  if (w.state !== "failed") w.state = "draining";
  w.draining = true;
  void heartbeat.beat();
  // Jobs waiting for a sequence have not started: another replica can take them now.
  handBack(w, (jobId) => !w.generating.has(jobId));
  const closing = w.queueWorker?.close() ?? Promise.resolve(); // resolves once in-flight jobs have ended
  let timer: NodeJS.Timeout | undefined;
  const pastDeadline = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      handBack(w, () => true);
      setTimeout(resolve, RELEASE_GRACE_MS).unref();
    }, deadlineMs);
  });
  await Promise.race([closing.catch(() => undefined), pastDeadline]);
  clearTimeout(timer);
  heartbeat.stop();
  health?.close();
  await Promise.all([
    bounded(w.cancels?.close()),
    bounded(w.engine?.dispose()),
    w.state !== "failed" ? bounded(removeReplica(w.ctl, w.endpoint.name, w.replicaId)) : undefined,
  ]);
}

/** Aborts the held jobs `which` picks; each then goes back to the queue (workers/job-handler.ts). */
function handBack(w: WorkerState, which: (jobId: string) => boolean): void {
  for (const [jobId, abort] of w.inFlight) {
    if (!which(jobId)) continue;
    w.releasing.add(jobId);
    abort.abort();
  }
}

function bounded(work: Promise<unknown> | undefined): Promise<unknown> {
  return Promise.race([work?.catch(() => undefined), new Promise((r) => setTimeout(r, STEP_MS).unref())]);
}
