/**
 * Taking back the jobs of a replica that died. BullMQ alone notices a dead
 * worker only when its job locks lapse (5 s here) and a stalled-job check runs
 * (every 2 s). Whoever learns of the death sooner — `up`'s supervisor when a
 * child exits, the scaler when a replica's heartbeat stops — hands the
 * replica's active jobs back to the queue at once, at its head, so another
 * replica takes them within milliseconds (docs/fleet.md, "Replica failure").
 *
 * A job's lock holds its worker's token, `<BullMQ worker id>:<n>`; each replica
 * publishes its BullMQ worker id in its heartbeat record (`queue_worker`), so
 * its jobs are the active ones whose lock starts with that id.
 */
import { Job, type Queue } from "bullmq";
import type { JobEvent } from "../contracts/job.ts";
import type { Replica } from "../replicas/record.ts";
import type { QueueBase } from "./base.ts";
import { jobErrorFromFailure } from "./failures.ts";
import { moveWaiting } from "./lanes.ts";
import { appendReply } from "./replies.ts";

/**
 * A job may lose this many replicas and run again; one more and it fails with `replica_lost`
 * (a request that kills every replica it reaches must not take the fleet down). The worker's
 * BullMQ `maxStalledCount` is the same, and both count in the job's own `stc` field.
 */
export const MAX_REPLICA_LOSSES = 1;
/** BullMQ's own wording, which jobErrorFromFailure (failures.ts) maps to `replica_lost`. */
const LOST_TOO_OFTEN = "job stalled more than allowable limit";

export type Reclaimed = { requeued: string[]; failed: string[] };

/** Hands the replica's active jobs back to its queue (or fails those that lost too many replicas), and its lane's jobs to the shared queue. */
export async function reclaimJobs(base: QueueBase, replica: Replica): Promise<Reclaimed> {
  const done: Reclaimed = { requeued: [], failed: [] };
  if (!replica.queue_worker) return done; // a replica of an older release: the lock lapses as before
  const queue = replica.queue ? base.queueNamed(replica.queue) : base.queue(replica.model, replica.version);
  await reclaimActive(base, queue, replica.queue_worker, replica, done, async (job, token) => {
    // The lock check inside moveToWait makes this a no-op for a job another caller already moved.
    return (await job.moveToWait(token).catch(() => -1)) >= 0;
  });
  if (replica.lane && replica.lane_worker) {
    const redis = base.ctl.redis;
    const lane = base.queueNamed(replica.lane);
    await reclaimActive(base, lane, replica.lane_worker, replica, done, async (job, token) => {
      if ((await job.moveToWait(token).catch(() => -1)) < 0) return false;
      return moveWaiting(redis, lane, queue, job.id as string);
    });
    // Its lane's waiting jobs: nobody serves the lane now, any replica may take them.
    const waiting = await lane.getJobs(["waiting", "prioritized"]);
    await Promise.all(waiting.map((job) => moveWaiting(redis, lane, queue, job.id as string).catch(() => false)));
  }
  return done;
}

/** The active jobs of `queue` whose lock is `worker`'s: each counts the loss, then `requeue` or fail. */
async function reclaimActive(
  base: QueueBase,
  queue: Queue,
  worker: string,
  replica: Replica,
  done: Reclaimed,
  requeue: (job: Job, token: string) => Promise<boolean>,
): Promise<void> {
  const redis = base.ctl.redis;
  const active = await redis.lrange(queue.keys.active as string, 0, -1);
  if (active.length === 0) return;
  // Every key below carries the queue's hash tag, so one pipeline serves under Redis Cluster too.
  const locks = await redis.mget(active.map((id) => `${queue.toKey(id)}:lock`));
  const mine = `${worker}:`;
  await Promise.all(
    active.map(async (id, i) => {
      const token = locks[i];
      if (!token?.startsWith(mine)) return;
      const job = await Job.fromId(queue, id);
      if (!job) return;
      // Whoever waits for the job hears what became of it on its reply stream.
      const reply = (job.data as { reply?: { stream?: unknown } } | undefined)?.reply?.stream;
      const tell = (event: JobEvent) =>
        typeof reply === "string" ? appendReply(redis, reply, id, event).catch(() => undefined) : undefined;
      const losses = await redis.hincrby(queue.toKey(id), "stc", 1);
      if (losses > MAX_REPLICA_LOSSES) {
        await job.moveToFailed(new Error(LOST_TOO_OFTEN), token);
        done.failed.push(id);
        await tell({ type: "error", error: jobErrorFromFailure(LOST_TOO_OFTEN) });
        return;
      }
      if (!(await requeue(job, token))) return;
      done.requeued.push(id);
      // The attempt ended: the next one starts over. A stream that already sent tokens goes on once the
      // new attempt has repeated them (src/gateway/stream-replay.ts), counted from that attempt's own
      // `started`: this notice can reach the stream after it. Other requests just wait.
      await tell({ type: "started", replica: `(requeued after replica ${replica.id} stopped)`, attempt: 0 });
    }),
  );
}
