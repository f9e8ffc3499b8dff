/**
 * The batch coordinator: the coordinator (src/queue/coordinator.ts) on the `batches` queue. Every
 * process that calls startBatchCoordinator (each gateway, `platform up`) is a candidate; BullMQ
 * gives each batch job to exactly one of them, and a batch whose coordinator dies is resumed by
 * another from its checkpoint.
 */
import type { Control } from "../redis/connection.ts";
import { type Coordinator, startCoordinator } from "../queue/coordinator.ts";
import type { Settings } from "../settings/index.ts";
import { openStore } from "../storage/index.ts";
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

export type BatchCoordinator = Coordinator;

export async function startBatchCoordinator(
  ctl: Control,
  settings: Settings,
  options: CoordinatorOptions = {},
): Promise<BatchCoordinator> {
  // The roots and the S3 settings both come from the settings, and travel together.
  const storage = StoragePolicy.fromSettings(settings);
  // Where replicas write image records' PNGs, before the run moves them to the job's output.
  const artifacts = openStore(settings.artifactsUrl, settings.storage.s3);
  return startCoordinator<CoordinatorJobData>(
    ctl,
    (data, signal) => runBatch(ctl, data.batch_id, signal, storage, settings.structured.limits, artifacts),
    {
      queue: options.queue ?? COORDINATOR_QUEUE,
      concurrency: options.jobsPerProcess ?? 4,
      lockDurationMs: options.lockDurationMs,
      stalledIntervalMs: options.stalledIntervalMs,
      maxStalls: 100,
      label: (data) => `batch ${data.batch_id}`,
      // The cause (a Redis address, a raw fs error with a server path) stays in the log; the record says what was kept.
      onFailed: async (data, error) => {
        const id = data.batch_id;
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
      },
    },
  );
}
