/**
 * The evaluation coordinator: a BullMQ worker on the `evaluations` queue, as the batch coordinator
 * is on `batches` (src/batch/coordinator.ts). Every gateway and `platform up` runs one; BullMQ gives
 * each evaluation to one of them and locks it while it runs. A coordinator that dies loses its
 * lock, the stalled-job check puts the job back, and another one resumes it: the items already
 * scored are kept in Redis and not sent again.
 */
import { type Job, WaitingError } from "bullmq";
import { EVALUATION_QUEUE } from "../contracts/naming.ts";
import { QueueBase } from "../queue/base.ts";
import type { Control } from "../redis/connection.ts";
import type { Settings } from "../settings/index.ts";
import { StoragePolicy } from "../storage/policy.ts";
import { runEvaluation } from "./run.ts";
import { updateRecord } from "./store.ts";

export type EvaluationJobData = { evaluation_id: string };

export type EvaluationCoordinatorOptions = {
  /** Evaluations this process runs at once. Default 2. */
  jobsPerProcess?: number;
  lockDurationMs?: number;
  stalledIntervalMs?: number;
  /** Another queue than `evaluations` (tests). */
  queue?: string;
};

export type EvaluationCoordinator = { stop(): Promise<void> };

const MAX_STALLS = 100;

export async function startEvaluationCoordinator(
  ctl: Control,
  settings: Pick<Settings, "storageRoots" | "adminStorageRoots" | "storage">,
  options: EvaluationCoordinatorOptions = {},
): Promise<EvaluationCoordinator> {
  const storage = StoragePolicy.fromSettings(settings);
  const running = new Map<string, AbortController>();
  // Jobs whose lock this process lost: another coordinator may own them now, so they are not handed back.
  const lost = new Set<string>();

  const processor = async (job: Job<EvaluationJobData>, token?: string): Promise<string> => {
    const handoff = new AbortController();
    const id = job.id as string;
    running.set(id, handoff);
    try {
      const end = await runEvaluation(ctl, job.data.evaluation_id, handoff.signal, storage);
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

  const worker = new QueueBase(ctl).workerNamed<EvaluationJobData, string>(
    options.queue ?? EVALUATION_QUEUE,
    processor,
    {
      concurrency: options.jobsPerProcess ?? 2,
      lockDuration: options.lockDurationMs ?? 30_000,
      stalledInterval: options.stalledIntervalMs ?? 10_000,
      maxStalledCount: MAX_STALLS,
    },
  );
  worker.on("lockRenewalFailed", (ids: string[]) => {
    for (const id of ids) {
      lost.add(id);
      running.get(id)?.abort("superseded");
    }
  });
  // Every attempt failed: the record says so (the cause, which may name internal addresses, is logged).
  worker.on("failed", (job, error) => {
    if (!job) return;
    void (async () => {
      if ((await job.getState()) !== "failed") return;
      console.error(`[evaluation ${job.data.evaluation_id}] failed:`, error);
      await updateRecord(ctl, job.data.evaluation_id, () => ({
        state: "failed",
        error: {
          code: "coordinator_error",
          message: "the evaluation failed unexpectedly and was retried without success; the gateway log has the cause",
        },
        finished: Date.now(),
      }));
    })().catch(() => undefined);
  });
  await worker.waitUntilReady();
  return {
    stop: async () => {
      for (const handoff of running.values()) handoff.abort();
      await worker.close();
    },
  };
}
