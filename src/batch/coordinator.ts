/**
 * The batch coordinator: a BullMQ worker on the `batches` queue. Every
 * process that calls startBatchCoordinator (each gateway, `platform up`) is a
 * candidate; BullMQ gives each batch job to exactly one of them and keeps a
 * lock on it while it runs. If that process dies, the lock expires, BullMQ's
 * stalled-job check puts the job back in the queue, and another coordinator
 * (or the same one after a restart) resumes it from its checkpoint.
 */
import { type Job, WaitingError } from "bullmq";
import type { Control } from "../redis/connection.ts";
import { QueueBase } from "../queue/base.ts";
import type { Settings } from "../settings/index.ts";
import { StoragePolicy } from "../storage/policy.ts";
import { COORDINATOR_QUEUE, type CoordinatorJobData } from "./jobs.ts";
import { hiddenFailure, keptPartial, readSpec, updateIfActive } from "./store.ts";
import { runBatch } from "./run.ts";

export type CoordinatorOptions = {
  /** Batch jobs this process runs at once. Default 4. */
  jobsPerProcess?: number;
  /** How long a silent coordinator keeps its job before another may take it. Default 30 s. */
  lockDurationMs?: number;
  /** How often this process looks for jobs whose coordinator died. Default 10 s. */
  stalledIntervalMs?: number;
  /** The coordinator queue; default `batches` (see BatchJobs). */
  queue?: string;
};

export type BatchCoordinator = {
  /** Hands running jobs back to the queue (another process resumes them) and stops taking new ones. */
  stop(): Promise<void>;
};

// A coordinator that crashes is the case this design exists for, not a fault
// of the job; this only stops a job that kills every process that runs it.
const MAX_STALLS = 100;

export async function startBatchCoordinator(
  ctl: Control,
  settings: Settings,
  options: CoordinatorOptions = {},
): Promise<BatchCoordinator> {
  // The roots and the S3 settings both come from the settings, and travel together.
  const storage = StoragePolicy.fromSettings(settings);
  const running = new Map<string, AbortController>();
  const lost = new Set<string>();

  const processor = async (job: Job<CoordinatorJobData>, token?: string): Promise<string> => {
    const handoff = new AbortController();
    const id = job.id as string;
    running.set(id, handoff);
    try {
      const end = await runBatch(ctl, job.data.batch_id, handoff.signal, storage, settings.structured.limits);
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
  const worker = new QueueBase(ctl).workerNamed<CoordinatorJobData, string>(
    options.queue ?? COORDINATOR_QUEUE,
    processor,
    {
      concurrency: options.jobsPerProcess ?? 4,
      lockDuration: options.lockDurationMs ?? 30_000,
      stalledInterval: options.stalledIntervalMs ?? 10_000,
      maxStalledCount: MAX_STALLS,
    },
  );
  // Redis was out of reach longer than the lock: the job may be someone else's now. Stop
  // quietly; whoever takes it next resumes from the checkpoint.
  worker.on("lockRenewalFailed", (ids: string[]) => {
    for (const id of ids) {
      lost.add(id);
      running.get(id)?.abort("superseded");
    }
  });
  // The last attempt failed (or the stall limit was hit): the job is over. The cause (a Redis
  // address, a raw fs error with a server path) stays in the log; the record says what was kept.
  worker.on("failed", (job, error) => {
    if (!job) return;
    void (async () => {
      if ((await job.getState()) !== "failed") return;
      const id = job.data.batch_id;
      const spec = await readSpec(ctl, id);
      const kept = spec ? await keptPartial(ctl, spec, undefined, storage.s3).catch(() => ({})) : {};
      await updateIfActive(ctl, id, {
        state: "failed",
        error: hiddenFailure(
          id,
          "coordinator_error",
          "the batch job failed unexpectedly and was retried without success; resume it once the cause is fixed",
          error,
        ),
        in_flight: 0,
        resumable: true,
        finished: Date.now(),
        ...kept,
      });
    })().catch((e: unknown) => console.error(`[batch ${job.data.batch_id}] could not record the failure:`, e));
  });
  await worker.waitUntilReady();

  return {
    stop: async () => {
      for (const handoff of running.values()) handoff.abort();
      await worker.close();
    },
  };
}
