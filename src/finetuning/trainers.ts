/**
 * Which trainers there are, and what happens to a job when its trainer dies (docs/fine-tuning.md,
 * "Recovery"). A trainer holds each job it trains with a BullMQ lock it renews twice per heartbeat
 * window (PLATFORM_TRAINER_HEARTBEAT_MS); a job whose lock lapsed is found by BullMQ's stalled-job
 * check and put back in its queue, and its record here goes back to `queued`, with an event saying
 * why. Trainers check their own queues; every gateway also checks both (TrainerWatch), since a GPU
 * job's queue has no other reader once its only GPU trainer is gone. So no job shows `running` for
 * longer than the window (and a second: the check's period) after its trainer died.
 */
import type { Queue, Worker } from "bullmq";
import { QueueBase } from "../queue/base.ts";
import type { Control } from "../redis/connection.ts";
import { logger } from "../telemetry/log.ts";
import { addEvent, readJob, requeueIfUntaken } from "./store.ts";

const log = logger("fine-tuning");

/** Stalls a job survives before it fails: a crashing trainer is the case this is for; this stops a job that kills every trainer. */
export const MAX_STALLS = 20;

/** The BullMQ worker name of a watcher: it takes no jobs, so it never counts as a trainer. */
export const WATCHER = "trainer-watch";

/**
 * What BullMQ is told: how long a hold lasts unrenewed, and how often jobs held by nobody are looked
 * for. The look is one cheap script per queue and period for the whole install (BullMQ lets one
 * checker run per period, and the last one's period holds the others off: all must use the same).
 */
export function holdTimings(heartbeatMs: number): { lockDurationMs: number; stalledIntervalMs: number } {
  return { lockDurationMs: heartbeatMs, stalledIntervalMs: Math.max(100, Math.min(1000, Math.round(heartbeatMs / 3))) };
}

/**
 * Trainers reading `queue` now (BullMQ names its workers' connections: CLIENT LIST), watchers left
 * out. Undefined where the server refuses CLIENT LIST (some managed Redis): then nothing is claimed.
 */
export async function countTrainers(queue: Queue): Promise<number | undefined> {
  try {
    const workers = await queue.getWorkers();
    return workers.filter((w) => !String(w.rawname ?? "").endsWith(`:w:${WATCHER}`)).length;
  } catch {
    return undefined;
  }
}

/** The event a GPU job gets when no trainer offering a GPU is running: it waits, it never trains on CPU. */
export function waitingForGpu(gpu: number): string {
  return `Waiting for a GPU trainer: the job asks for resources.gpu ${gpu} and no trainer offering a GPU is running; it stays queued until one starts (\`platform trainer --gpu\`, or deploy/'s GPU trainer)`;
}

/**
 * BullMQ put job `id` back in `queue` because its trainer stopped renewing its hold: the record says
 * `queued` again, with the reason (and, for a GPU job with no GPU trainer left, what it waits for).
 * Nothing changes if another trainer took the job meanwhile, or it has ended.
 */
export async function markRequeued(ctl: Control, queue: Queue, id: string, heartbeatMs: number): Promise<void> {
  const job = await readJob(ctl, id);
  if (job?.fields.status !== "running") return;
  // Taken again already (its new trainer says so itself), now or by the time the record is written.
  if ((await queue.getJobState(id)) === "active") return;
  if (!(await requeueIfUntaken(ctl, id, job.fields.taken_at))) return;
  const seconds = Math.round(heartbeatMs / 1000);
  await addEvent(
    ctl,
    id,
    "warn",
    `The trainer running this job stopped (no heartbeat for ${seconds} s: it died or lost Redis); the job is queued again, and the next trainer resumes it from its newest checkpoint`,
  );
  if (job.spec.gpu > 0 && (await countTrainers(queue)) === 0)
    await addEvent(ctl, id, "warn", waitingForGpu(job.spec.gpu));
}

/**
 * BullMQ's stalled-job check on the given queues, from a process that trains nothing (a gateway):
 * a worker per queue that never takes a job, only looks for jobs whose trainer died.
 */
export class TrainerWatch {
  private readonly ctl: Control;
  private readonly names: string[];
  private readonly heartbeatMs: number;
  private readonly queues: QueueBase;
  private readonly workers: Worker<unknown, string>[] = [];

  constructor(ctl: Control, names: string[], heartbeatMs: number) {
    this.ctl = ctl;
    this.names = names;
    this.heartbeatMs = heartbeatMs;
    this.queues = new QueueBase(ctl);
  }

  async start(): Promise<void> {
    const { lockDurationMs, stalledIntervalMs } = holdTimings(this.heartbeatMs);
    for (const name of this.names) {
      const queue = this.queues.queueNamed(name);
      const worker = this.queues.workerNamed<unknown, string>(
        name,
        async () => {
          throw new Error("a trainer watch takes no jobs");
        },
        {
          name: WATCHER,
          autorun: false,
          lockDuration: lockDurationMs,
          stalledInterval: stalledIntervalMs,
          maxStalledCount: MAX_STALLS,
        },
      );
      worker.on("stalled", (id: string) => {
        markRequeued(this.ctl, queue, id, this.heartbeatMs).catch((e: unknown) =>
          log.warn({ job_id: id }, `could not mark fine-tuning job ${id} queued again: ${String(e)}`),
        );
      });
      this.workers.push(worker);
      await worker.waitUntilReady();
      await worker.startStalledCheckTimer();
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close()));
    await this.queues.close();
  }
}
