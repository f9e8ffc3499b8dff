/**
 * Cancellation, both sides. A producer marks each job cancelled (a key that
 * outlives any wait in the queue) and announces it on the cancel channel; a
 * worker aborts a running job on the announcement, and looks the mark up for
 * a job it takes late, when it may have subscribed after the announcement.
 */
import type { Queue } from "bullmq";
import { CANCEL_MARK_TTL_MS } from "../contracts/job.ts";
import type { Control } from "../redis/connection.ts";
import { type Subscription, subscribe } from "../redis/subscription.ts";

/** Marks and announces the jobs, then drops those still queued (a running job is locked and stays). */
export async function cancelJobs(ctl: Control, queue: Queue, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  // Marks before announcements, so a worker that hears one finds its mark. Not one MULTI: the marks
  // hash to different Cluster slots.
  await Promise.all(ids.map((id) => ctl.redis.set(ctl.keys.cancelled(id), "1", "PX", CANCEL_MARK_TTL_MS)));
  await Promise.all(ids.map((id) => ctl.redis.publish(ctl.keys.cancelChannel, id)));
  await Promise.all(ids.map((id) => queue.remove(id).catch(() => 0)));
}

export async function isCancelled(ctl: Control, jobId: string): Promise<boolean> {
  return (await ctl.redis.exists(ctl.keys.cancelled(jobId))) > 0;
}

/** Calls `onCancel` with each job id announced from now on, until the subscription returned is closed. */
export function listenForCancels(ctl: Control, onCancel: (jobId: string) => void): Promise<Subscription> {
  return subscribe(ctl, [ctl.keys.cancelChannel], (_channel, jobId) => onCancel(jobId));
}
