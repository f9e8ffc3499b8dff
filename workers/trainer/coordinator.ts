/**
 * The trainer: the coordinator (src/queue/coordinator.ts) on the `fine-tuning` queue, as the batch
 * coordinator is on `batches`. `platform up` starts one beside the batch coordinator; clusters run `platform trainer`
 * on machines with the Python stack (and GPUs). BullMQ gives each job to one trainer and keeps a
 * lock on it; if that process dies, the lock expires, the stalled-job check puts the job back, and
 * another trainer resumes it from its newest checkpoint in the artifact store.
 *
 * Jobs that ask for a GPU wait on a queue of their own that only a trainer offering a GPU reads
 * (`gpu`: its Python's torch must see CUDA); such a trainer reads the CPU queue too, with a worker
 * of its own, so CPU work never holds a GPU job back and a GPU machine never idles beside CPU work.
 */
import { FINE_TUNING_QUEUE, gpuQueueOf, type TrainJobData } from "../../src/finetuning/jobs.ts";
import { addEvent, readJob, updateIfActive } from "../../src/finetuning/store.ts";
import { holdTimings, MAX_STALLS, markRequeued } from "../../src/finetuning/trainers.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { type Coordinator, startCoordinator } from "../../src/queue/coordinator.ts";
import type { Control } from "../../src/redis/connection.ts";
import type { FineTuningSettings, Settings } from "../../src/settings/index.ts";
import { TRAINER_PYTHON_FIX } from "../../src/settings/finetuning.ts";
import { openStore } from "../../src/storage/index.ts";
import { describeOffer, probeGpu } from "./gpu.ts";
import type { QueueKind, TrainerHealth } from "./health.ts";
import { runFineTune } from "./run.ts";

export type TrainerOptions = {
  /** Jobs this process trains at once. Default 1: a training run uses the machine. */
  jobsPerProcess?: number;
  /** Default: the settings' heartbeat window (PLATFORM_TRAINER_HEARTBEAT_MS, src/finetuning/trainers.ts). */
  lockDurationMs?: number;
  /** Default: a third of the heartbeat window, at most a second (src/finetuning/trainers.ts). */
  stalledIntervalMs?: number;
  queue?: string;
  settings?: FineTuningSettings;
  /** Threads torch uses per job. Default 1 (the same numbers on any machine). */
  threads?: number;
  /**
   * Whether this trainer takes GPU jobs: `true` (`platform trainer --gpu`) refuses to start unless
   * its Python's torch sees a GPU; `"auto"` (`platform up`) offers one when torch sees one; default false.
   */
  gpu?: boolean | "auto";
  /** Where the line saying what the trainer offers goes (default: stdout). */
  log?: (line: string) => void;
  /** Told of runs and state, for `--health-port` (health.ts). */
  health?: TrainerHealth;
};

/**
 * `offersGpu` settles once the trainer knows whether it takes GPU jobs: at once without `gpu`, after
 * the probe with `"auto"` (which never delays the CPU queue: `platform up` starts at its own pace).
 */
export type Trainer = { stop(): Promise<void>; offersGpu: Promise<boolean> };

/** `platform trainer --gpu` on a machine whose torch sees no GPU: it must not take GPU jobs. */
export class NoGpuError extends Error {}

export async function startTrainer(ctl: Control, settings: Settings, options: TrainerOptions = {}): Promise<Trainer> {
  const tuning = options.settings ?? settings.fineTuning;
  const wanted = options.gpu ?? false;
  const probing = wanted === false ? undefined : probeGpu(tuning.python);
  const probe = wanted === true ? await probing : undefined;
  if (wanted === true && !probe?.cuda)
    throw new NoGpuError(
      probe?.torch
        ? `--gpu: this trainer's torch (${probe.torch}) sees no GPU (torch.cuda.is_available() is false): check the NVIDIA driver and that the pod got its nvidia.com/gpu, or run the trainer without --gpu`
        : `--gpu: this trainer's Python has no torch: ${TRAINER_PYTHON_FIX} (\`platform doctor\` checks it)`,
    );
  const artifacts = openStore(settings.artifactsUrl, settings.storage?.s3);
  const deps = {
    ctl,
    artifacts,
    s3: settings.storage?.s3 ?? {},
    dataDir: settings.dataDir,
    settings: tuning,
    threads: options.threads ?? 1,
  };
  const health = options.health;
  const runOn =
    (kind: QueueKind) =>
    async (data: TrainJobData, signal: AbortSignal): Promise<string> => {
      if (health) health.running[kind]++;
      try {
        const end = await runFineTune(deps, data.job_id, signal);
        if (end !== "handed_off") await release(ctl, data.job_id);
        if (health && (end === "succeeded" || end === "failed" || end === "cancelled"))
          health.finished(end, end === "failed" ? await errorCode(ctl, data.job_id) : undefined);
        return end;
      } finally {
        if (health) health.running[kind]--;
      }
    };
  const onFailed = async (data: TrainJobData, error: Error): Promise<void> => {
    const id = data.job_id;
    console.error(`[fine-tuning ${id}] failed:`, error);
    // BullMQ fails a job its trainers kept dying on (MAX_STALLS) when the next one takes it.
    const lost = /stalled more than allowable limit/.test(error.message);
    const code = lost ? "trainer_lost" : "trainer_error";
    await updateIfActive(ctl, id, {
      status: "failed",
      finished_at: Date.now(),
      error: {
        code,
        message: lost
          ? `the trainer running the job died ${MAX_STALLS} times (killed, out of memory, or cut off from Redis); job id ${id}, the trainers' logs have the details`
          : `the job failed unexpectedly and was retried without success; job id ${id}, the trainer log has the details`,
        param: null,
      },
    });
    await addEvent(
      ctl,
      id,
      "error",
      lost ? `Job failed: its trainer died ${MAX_STALLS} times` : "Job failed: the trainer could not run it",
    );
    await release(ctl, id);
    health?.finished("failed", code);
  };
  const queue = options.queue ?? FINE_TUNING_QUEUE;
  const coordinators: Coordinator[] = [];
  const queues = new QueueBase(ctl);
  const timings = holdTimings(tuning.heartbeatMs);
  const lockDurationMs = options.lockDurationMs ?? timings.lockDurationMs;
  const start = async (name: string, kind: QueueKind) => {
    const records = queues.queueNamed(name);
    coordinators.push(
      await startCoordinator(ctl, runOn(kind), {
        queue: name,
        concurrency: options.jobsPerProcess ?? 1,
        lockDurationMs,
        stalledIntervalMs: options.stalledIntervalMs ?? timings.stalledIntervalMs,
        maxStalls: MAX_STALLS,
        label: (data) => `fine-tuning ${data.job_id}`,
        onFailed,
        // Another trainer's job, back in the queue: its record says so until a trainer takes it.
        onStalled: (id) =>
          void markRequeued(ctl, records, id, lockDurationMs).catch((e: unknown) =>
            console.error(`[fine-tuning ${id}] could not mark it queued again:`, e),
          ),
      }),
    );
  };
  let stopped = false;
  await start(queue, "cpu");
  if (health) health.state.serving = true;
  const offersGpu = (async () => {
    const seen = await probing;
    if (!seen) return false;
    const offers = seen.cuda && !stopped;
    (options.log ?? console.log)(describeOffer(seen, seen.cuda));
    if (offers) await start(gpuQueueOf(queue), "gpu");
    if (health) health.state.offersGpu = offers;
    return offers;
  })();
  return {
    offersGpu,
    stop: async () => {
      stopped = true;
      if (health) health.state.serving = false;
      await offersGpu.catch(() => false);
      await Promise.all(coordinators.map((c) => c.stop()));
      await queues.close();
      artifacts.close();
    },
  };
}

/** The error code a failed job's record holds (for the trainer's metrics). */
async function errorCode(ctl: Control, id: string): Promise<string | undefined> {
  const raw = (await readJob(ctl, id))?.fields.error;
  try {
    return raw ? (JSON.parse(raw) as { code?: string }).code : undefined;
  } catch {
    return undefined;
  }
}

/** An ended job no longer counts against its organization's admission bound. */
async function release(ctl: Control, id: string): Promise<void> {
  const job = await readJob(ctl, id);
  if (job) await ctl.redis.srem(ctl.keys.fineTuningActive(job.spec.org), id);
}
