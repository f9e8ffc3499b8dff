/**
 * The trainer: a BullMQ worker on the `fine-tuning` queue, as the batch coordinator is on
 * `batches`. `platform up` starts one beside the batch coordinator; clusters run `platform trainer`
 * on machines with the Python stack (and GPUs). BullMQ gives each job to one trainer and keeps a
 * lock on it; if that process dies, the lock expires, the stalled-job check puts the job back, and
 * another trainer resumes it from its newest checkpoint in the artifact store.
 */
import { type Job, WaitingError } from "bullmq";
import { FINE_TUNING_QUEUE, type TrainJobData } from "../../src/finetuning/jobs.ts";
import { type FineTuningSettings, fineTuningSettings } from "../../src/finetuning/config.ts";
import { addEvent, readJob, updateIfActive } from "../../src/finetuning/store.ts";
import { QueueBase } from "../../src/queue/base.ts";
import type { Control } from "../../src/redis/connection.ts";
import type { Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { runFineTune } from "./run.ts";

export type TrainerOptions = {
  /** Jobs this process trains at once. Default 1: a training run uses the machine. */
  jobsPerProcess?: number;
  lockDurationMs?: number;
  stalledIntervalMs?: number;
  queue?: string;
  settings?: FineTuningSettings;
  /** Threads torch uses per job. Default 1 (the same numbers on any machine). */
  threads?: number;
};

export type Trainer = { stop(): Promise<void> };

const MAX_STALLS = 20;

export async function startTrainer(ctl: Control, settings: Settings, options: TrainerOptions = {}): Promise<Trainer> {
  const artifacts = openStore(settings.artifactsUrl, settings.storage?.s3);
  const tuning = options.settings ?? fineTuningSettings();
  const running = new Map<string, AbortController>();
  const deps = {
    ctl,
    artifacts,
    s3: settings.storage?.s3 ?? {},
    dataDir: settings.dataDir,
    settings: tuning,
    threads: options.threads ?? 1,
  };

  const processor = async (job: Job<TrainJobData>, token?: string): Promise<string> => {
    const handoff = new AbortController();
    running.set(job.data.job_id, handoff);
    try {
      const end = await runFineTune(deps, job.data.job_id, handoff.signal);
      if (end === "handed_off" && token !== undefined) {
        await job.moveToWait(token);
        throw new WaitingError();
      }
      if (end !== "handed_off") await release(ctl, job.data.job_id);
      return end;
    } finally {
      running.delete(job.data.job_id);
    }
  };

  const worker = new QueueBase(ctl).workerNamed<TrainJobData, string>(options.queue ?? FINE_TUNING_QUEUE, processor, {
    concurrency: options.jobsPerProcess ?? 1,
    lockDuration: options.lockDurationMs ?? 30_000,
    stalledInterval: options.stalledIntervalMs ?? 10_000,
    maxStalledCount: MAX_STALLS,
  });
  worker.on("lockRenewalFailed", (ids: string[]) => {
    for (const id of ids) running.get(id)?.abort("superseded");
  });
  worker.on("failed", (job, error) => {
    if (!job) return;
    void (async () => {
      if ((await job.getState()) !== "failed") return;
      const id = job.data.job_id;
      console.error(`[fine-tuning ${id}] failed:`, error);
      await updateIfActive(ctl, id, {
        status: "failed",
        finished_at: Date.now(),
        error: {
          code: "trainer_error",
          message: `the job failed unexpectedly and was retried without success; job id ${id}, the trainer log has the details`,
          param: null,
        },
      });
      await addEvent(ctl, id, "error", "Job failed: the trainer could not run it");
      await release(ctl, id);
    })().catch((e: unknown) => console.error(`[fine-tuning ${job.data.job_id}] could not record the failure:`, e));
  });
  await worker.waitUntilReady();
  return {
    stop: async () => {
      for (const handoff of running.values()) handoff.abort();
      await worker.close();
      artifacts.close();
    },
  };
}

/** An ended job no longer counts against its organization's admission bound. */
async function release(ctl: Control, id: string): Promise<void> {
  const job = await readJob(ctl, id);
  if (job) await ctl.redis.srem(ctl.keys.fineTuningActive(job.spec.org), id);
}
