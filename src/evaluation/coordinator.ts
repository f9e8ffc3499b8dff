/**
 * The evaluation coordinator: the coordinator (src/queue/coordinator.ts) on the `evaluations`
 * queue. Every gateway and `platform up` runs one; an evaluation whose coordinator dies is resumed
 * by another: the items already scored are kept in Redis and not sent again.
 */
import { EVALUATION_QUEUE } from "../contracts/naming.ts";
import { type Coordinator, startCoordinator } from "../queue/coordinator.ts";
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

export type EvaluationCoordinator = Coordinator;

export async function startEvaluationCoordinator(
  ctl: Control,
  settings: Pick<Settings, "storageRoots" | "adminStorageRoots" | "storage">,
  options: EvaluationCoordinatorOptions = {},
): Promise<EvaluationCoordinator> {
  const storage = StoragePolicy.fromSettings(settings);
  return startCoordinator<EvaluationJobData>(
    ctl,
    (data, signal) => runEvaluation(ctl, data.evaluation_id, signal, storage),
    {
      queue: options.queue ?? EVALUATION_QUEUE,
      concurrency: options.jobsPerProcess ?? 2,
      lockDurationMs: options.lockDurationMs,
      stalledIntervalMs: options.stalledIntervalMs,
      maxStalls: 100,
      label: (data) => `evaluation ${data.evaluation_id}`,
      // The record says so; the cause, which may name internal addresses, is logged.
      onFailed: async (data, error) => {
        console.error(`[evaluation ${data.evaluation_id}] failed:`, error);
        await updateRecord(ctl, data.evaluation_id, () => ({
          state: "failed",
          error: {
            code: "coordinator_error",
            message:
              "the evaluation failed unexpectedly and was retried without success; the gateway log has the cause",
          },
          finished: Date.now(),
        }));
      },
    },
  );
}
