/**
 * A coordinator: a BullMQ worker on a control queue (batches, evaluations, fine-tuning) whose jobs
 * are long runs that checkpoint as they go. Every process that starts one is a candidate; BullMQ
 * gives each job to one of them and keeps a lock on it while it runs. If that process dies, the
 * lock expires, the stalled-job check puts the job back, and another coordinator resumes it from
 * its checkpoint. A run that is asked to stop (the process shutting down) answers "handed_off",
 * and the job goes back to the queue at once for another process to resume.
 */
import { type Job, WaitingError } from "bullmq";
import type { Control } from "../redis/connection.ts";
import { QueueBase } from "./base.ts";

/** What a run ended with; "handed_off" gives the job back to the queue. */
export type CoordinatedRun<T> = (data: T, signal: AbortSignal) => Promise<string>;

export type CoordinatorOptions<T> = {
  queue: string;
  /** Jobs this process runs at once. */
  concurrency: number;
  /** How long a silent coordinator keeps its job before another may take it. Default 30 s. */
  lockDurationMs?: number;
  /** How often this process looks for jobs whose coordinator died. Default 10 s. */
  stalledIntervalMs?: number;
  /** A crashing coordinator is the case this exists for; this only stops a job that kills every process that runs it. */
  maxStalls: number;
  /** The last attempt failed (or the stall limit was hit): record the end on the job's record. */
  onFailed: (data: T, error: Error) => Promise<void>;
  /** For the log line when onFailed itself fails. */
  label: (data: T) => string;
  /** This process's stalled-job check put job `id` back in the queue: its coordinator died. */
  onStalled?: (id: string) => void;
};

export type Coordinator = {
  /** Hands running jobs back to the queue (another process resumes them) and stops taking new ones. */
  stop(): Promise<void>;
};

export async function startCoordinator<T>(
  ctl: Control,
  run: CoordinatedRun<T>,
  options: CoordinatorOptions<T>,
): Promise<Coordinator> {
  const running = new Map<string, AbortController>();
  // Jobs whose lock this process lost: another coordinator may own them now, so they are not handed back.
  const lost = new Set<string>();

  const processor = async (job: Job<T>, token?: string): Promise<string> => {
    const handoff = new AbortController();
    const id = job.id as string;
    running.set(id, handoff);
    try {
      const end = await run(job.data, handoff.signal);
      if (end === "handed_off" && token !== undefined && !lost.has(id)) {
        await job.moveToWait(token);
        throw new WaitingError();
      }
      return end;
    } finally {
      running.delete(id);
      lost.delete(id);
    }
  };

  // On a connection of its own, which worker.close() releases.
  const worker = new QueueBase(ctl).workerNamed<T, string>(options.queue, processor, {
    concurrency: options.concurrency,
    lockDuration: options.lockDurationMs ?? 30_000,
    stalledInterval: options.stalledIntervalMs ?? 10_000,
    maxStalledCount: options.maxStalls,
  });
  // Redis was out of reach longer than the lock: the job may be someone else's now. Stop
  // quietly; whoever takes it next resumes from the checkpoint.
  worker.on("lockRenewalFailed", (ids: string[]) => {
    for (const id of ids) {
      lost.add(id);
      running.get(id)?.abort("superseded");
    }
  });
  if (options.onStalled) worker.on("stalled", (id: string) => options.onStalled?.(id));
  worker.on("failed", (job, error) => {
    if (!job) return;
    void (async () => {
      if ((await job.getState()) !== "failed") return;
      await options.onFailed(job.data, error);
    })().catch((e: unknown) => console.error(`[${options.label(job.data)}] could not record the failure:`, e));
  });
  await worker.waitUntilReady();

  return {
    stop: async () => {
      for (const handoff of running.values()) handoff.abort();
      await worker.close();
    },
  };
}
