/**
 * Creating, reading, listing and cancelling fine-tuning jobs: what the gateway (and anything
 * else holding a Control) calls. The training itself runs in whichever process runs a trainer
 * (workers/trainer) and takes the job from the `fine-tuning` queue; a job is a queue job like a
 * batch, and a trainer that dies hands it to another, which resumes from the last checkpoint.
 */
import { randomBytes } from "node:crypto";
import { isAbsolute } from "node:path";
import type { Queue } from "bullmq";
import { ModelName } from "../contracts/deployment.ts";
import { PlatformError, parseRequest } from "../contracts/errors.ts";
import { FINE_TUNING_QUEUE, gpuQueueOf } from "../contracts/naming.ts";
import { canSee, type Principal } from "../contracts/orgs.ts";
import { QueueBase } from "../queue/base.ts";
import type { Control } from "../redis/connection.ts";
import { checkNameFor, type NameViewer, ownedName } from "../models/owners.ts";
import { resolveModelVersion } from "../models/versions.ts";
import type { RegisteredVersion } from "../models/record.ts";
import { openObject, parseStorageUri, StorageError } from "../storage/index.ts";
import { StoragePolicy } from "../storage/policy.ts";
import type { Files } from "../files/store.ts";
import { type FineTuningSettings, loadSettings } from "../settings/index.ts";
import { type DatasetSummary, validateDataset } from "./dataset.ts";
import {
  CreateFineTuneRequest,
  FINAL_STATUSES,
  type FineTuneCheckpoint,
  type FineTuneEvent,
  type FineTuneSpec,
  type FineTuningJob,
  LoraOptions,
  BASE_LEARNING_RATE,
} from "./record.ts";
import {
  addEvent,
  createRecord,
  listCheckpoints,
  listEvents,
  listIds,
  readJob,
  type StoredJob,
  toJob,
  trimJobs,
  updateIfActive,
} from "./store.ts";
import { countTrainers, TrainerWatch, waitingForGpu } from "./trainers.ts";

export { FINE_TUNING_QUEUE, gpuQueueOf, waitingForGpu };
export type TrainJobData = { job_id: string };

export const DEFAULTS = { n_epochs: 3, batch_size: 1, learning_rate_multiplier: 1 };

export type Viewer = Principal;

export class FineTuningJobs {
  private readonly ctl: Control;
  private readonly queues: QueueBase;
  private readonly queue: Queue<TrainJobData>;
  /** GPU jobs' queue, read only by trainers that offer a GPU (docs/fine-tuning.md, "GPU jobs"). */
  private readonly gpuQueue: Queue<TrainJobData>;
  private readonly storage: StoragePolicy;
  private readonly files: Files | undefined;
  private readonly watch: TrainerWatch | undefined;
  readonly settings: FineTuningSettings;

  constructor(
    ctl: Control,
    options: {
      queue?: string;
      storage?: StoragePolicy;
      files?: Files;
      settings?: FineTuningSettings;
      /** Also look for jobs whose trainer died (trainers.ts); gateways do. Call start() then. */
      watchTrainers?: boolean;
    } = {},
  ) {
    this.ctl = ctl;
    this.storage = options.storage ?? new StoragePolicy();
    this.files = options.files;
    this.settings = options.settings ?? loadSettings().fineTuning;
    this.queues = new QueueBase(ctl);
    this.queue = this.queues.queueNamed<TrainJobData>(options.queue ?? FINE_TUNING_QUEUE);
    this.gpuQueue = this.queues.queueNamed<TrainJobData>(gpuQueueOf(options.queue ?? FINE_TUNING_QUEUE));
    this.watch = options.watchTrainers
      ? new TrainerWatch(ctl, [this.queue.name, this.gpuQueue.name], this.settings.heartbeatMs)
      : undefined;
  }

  /** Starts the watch for jobs whose trainer died, where asked for. */
  async start(): Promise<void> {
    await this.watch?.start();
  }

  async create(body: unknown, viewer: Viewer): Promise<FineTuningJob> {
    const request = parseRequest(CreateFineTuneRequest, body);
    const base = await trainableBase(this.ctl, request.model, viewer);
    const method = request.method?.training ?? "lora";
    const hp = { ...request.hyperparameters, ...request.method?.supervised?.hyperparameters };
    const resolve = <K extends keyof typeof DEFAULTS>(k: K): number => {
      const v = hp[k];
      return v === undefined || v === "auto" ? DEFAULTS[k] : v;
    };
    const hyperparameters = {
      n_epochs: resolve("n_epochs"),
      batch_size: resolve("batch_size"),
      learning_rate_multiplier: resolve("learning_rate_multiplier"),
    };
    const training = await this.locate(request.training_file, "training_file", viewer);
    const validation = request.validation_file
      ? await this.locate(request.validation_file, "validation_file", viewer)
      : undefined;
    const dataset = await this.check(training, "training_file");
    const validated = validation ? await this.check(validation, "validation_file") : undefined;
    const hex = randomBytes(12).toString("hex");
    const id = `ftjob-${hex}`;
    // The organization's namespace (src/models/owners.ts): `<org>.<suffix>`, never another's name.
    const resultName = ownedName(viewer.org, request.suffix ?? `${base.name}-ft-${hex.slice(0, 8)}`.slice(0, 40));
    if (!ModelName.safeParse(resultName).success)
      throw new PlatformError(
        400,
        "invalid_request",
        `suffix: "${resultName}" is not a valid model name (the result is named "<organization>.<suffix>", at most 63 letters, digits, ".", "_" or "-"); choose a shorter suffix`,
        "suffix",
      );
    await checkNameFor(this.ctl, resultName, viewer.org);
    const lora = request.method?.lora ?? LoraOptions.parse({});
    const spec: FineTuneSpec = {
      id,
      org: viewer.org,
      created_by: viewer.id,
      created_at: Date.now(),
      base: { name: base.name, version: base.version },
      method,
      lora: method === "lora" ? lora : null,
      hyperparameters,
      learning_rate: BASE_LEARNING_RATE[method] * hyperparameters.learning_rate_multiplier,
      seed: request.seed ?? Number.parseInt(hex.slice(0, 7), 16),
      checkpoint_interval: request.checkpoint_interval ?? 0,
      gpu: request.resources?.gpu ?? 0,
      result_name: resultName,
      training_file: training.given,
      validation_file: validation?.given ?? null,
      training_uri: training.uri,
      validation_uri: validation?.uri ?? null,
      dataset_sha256: dataset.sha256,
      validation_sha256: validated?.sha256 ?? null,
      dataset_lines: dataset.lines,
      metadata: request.metadata ?? null,
    };
    await this.admit(spec);
    await createRecord(this.ctl, spec);
    await addEvent(this.ctl, id, "info", `Created fine-tuning job ${id}`);
    await addEvent(
      this.ctl,
      id,
      "info",
      `Validated training file: ${dataset.lines} ${dataset.format === "chat" ? "chat" : "prompt/completion"} examples, sha256 ${dataset.sha256}${validated ? `; validation file: ${validated.lines} examples` : ""}`,
    );
    try {
      await this.queueFor(spec).add(
        "train",
        { job_id: id },
        {
          jobId: id,
          attempts: 3,
          backoff: { type: "exponential", delay: 5000 },
          removeOnComplete: true,
          removeOnFail: { age: 86_400 },
        },
      );
    } catch (e) {
      console.error(`[fine-tuning ${id}] could not queue:`, e);
      await this.end(id, spec.org, {
        code: "queue_unavailable",
        message: "the job could not be queued; submit it again",
        param: null,
      });
      throw new PlatformError(
        503,
        "queue_unavailable",
        `could not queue fine-tuning job ${id}; retry shortly`,
        null,
        1,
      );
    }
    if (spec.gpu === 0) await addEvent(this.ctl, id, "info", "Job queued");
    else if ((await this.gpuTrainers()) === 0) await addEvent(this.ctl, id, "warn", waitingForGpu(spec.gpu));
    else await addEvent(this.ctl, id, "info", `Job queued for a GPU trainer (resources.gpu: ${spec.gpu})`);
    await trimJobs(this.ctl, spec.org, this.settings.maxJobsPerOrg, this.files?.store);
    return this.get(id, viewer);
  }

  /** Queued and running jobs per organization are bounded: a 429 naming the bound past it. */
  private async admit(spec: FineTuneSpec): Promise<void> {
    const key = this.ctl.keys.fineTuningActive(spec.org);
    // Members whose jobs ended (or were trimmed) no longer count.
    for (const id of await this.ctl.redis.smembers(key)) {
      const status = await this.ctl.redis.hget(this.ctl.keys.fineTuningJob(id), "status");
      if (status === null || FINAL_STATUSES.includes(status as never)) await this.ctl.redis.srem(key, id);
    }
    await this.ctl.redis.sadd(key, spec.id);
    if ((await this.ctl.redis.scard(key)) > this.settings.maxActivePerOrg) {
      await this.ctl.redis.srem(key, spec.id);
      throw new PlatformError(
        429,
        "too_many_fine_tuning_jobs",
        `organization "${spec.org}" already has ${this.settings.maxActivePerOrg} queued or running fine-tuning jobs (PLATFORM_FINETUNE_MAX_ACTIVE); wait for one to end or cancel one`,
        null,
        30,
      );
    }
  }

  /** A file id of /v1/files, or a storage URI confined as batch inputs are. */
  private async locate(given: string, field: string, viewer: Viewer): Promise<Located> {
    if (/^file-[0-9a-f]{24}$/.test(given)) {
      if (!this.files)
        throw new PlatformError(400, "invalid_request", `${field}: uploaded files are not available here`, field);
      return { uri: await this.files.uri(given, viewer), given };
    }
    if (given.endsWith("/"))
      throw new PlatformError(400, "invalid_uri", `${field}: "${given}" names a directory; give the JSONL file`, field);
    if (/^[a-z][a-z0-9+.-]+:/i.test(given) || isAbsolute(given) || given.includes("/") || given.endsWith(".jsonl")) {
      const confined = await this.storage.confine(given, viewer, field);
      return { uri: confined.uri, given };
    }
    throw new PlatformError(
      404,
      "file_not_found",
      `${field}: no file "${given}"; upload it with POST /v1/files (purpose "fine-tune") or give a storage URI`,
      field,
    );
  }

  private async check(located: Located, field: string): Promise<DatasetSummary> {
    let opened: ReturnType<typeof openObject>;
    try {
      parseStorageUri(located.uri);
      opened = openObject(located.uri, this.storage.s3);
    } catch (e) {
      if (e instanceof StorageError) throw new PlatformError(400, "invalid_uri", `${field}: ${e.message}`, field);
      throw e;
    }
    try {
      const stream = await opened.store.get(opened.key).catch((e: unknown) => {
        if (e instanceof StorageError && e.code === "not_found")
          throw new PlatformError(404, "file_not_found", `${field}: "${located.given}" does not exist`, field);
        throw e;
      });
      return await validateDataset(stream, field, `"${located.given}"`, this.settings.dataset);
    } finally {
      opened.store.close();
    }
  }

  async get(id: string, viewer?: Viewer): Promise<FineTuningJob> {
    const job = await this.stored(id, viewer);
    return toJob(job, await this.waitingFor(job, new Map()));
  }

  private queueFor(spec: FineTuneSpec): Queue<TrainJobData> {
    return spec.gpu > 0 ? this.gpuQueue : this.queue;
  }

  /** Trainers reading the GPU queue now (trainers.ts). */
  private gpuTrainers(): Promise<number | undefined> {
    return countTrainers(this.gpuQueue);
  }

  /** `gpu_trainer` for a queued GPU job while no trainer offers a GPU; `memo` holds one look per call. */
  private async waitingFor(job: StoredJob, memo: Map<string, number | undefined>): Promise<"gpu_trainer" | null> {
    if (job.spec.gpu === 0 || (job.fields.status ?? "queued") !== "queued") return null;
    if (!memo.has("gpu")) memo.set("gpu", await this.gpuTrainers());
    return memo.get("gpu") === 0 ? "gpu_trainer" : null;
  }

  private async stored(id: string, viewer: Viewer | undefined): Promise<StoredJob> {
    const job = await readJob(this.ctl, id);
    if (!job || (viewer && !canSee(viewer, { id: job.spec.created_by, org: job.spec.org })))
      throw new PlatformError(404, "fine_tuning_job_not_found", `no fine-tuning job "${id}"`, "fine_tuning_job_id");
    return job;
  }

  async list(
    viewer: Viewer,
    options: { after?: string; limit?: number } = {},
  ): Promise<{ object: "list"; data: FineTuningJob[]; has_more: boolean }> {
    const limit = Math.min(Math.max(options.limit ?? 20, 1), 100);
    const data: FineTuningJob[] = [];
    const memo = new Map<string, number | undefined>();
    let after = options.after;
    for (;;) {
      const ids = await listIds(this.ctl, viewer.org, after, limit + 1);
      for (const id of ids) {
        const job = await readJob(this.ctl, id);
        if (job && canSee(viewer, { id: job.spec.created_by, org: job.spec.org }))
          data.push(toJob(job, await this.waitingFor(job, memo)));
        if (data.length > limit) return { object: "list", data: data.slice(0, limit), has_more: true };
      }
      if (ids.length < limit + 1) return { object: "list", data, has_more: false };
      after = ids.at(-1);
    }
  }

  /** A queued job ends at once; a running one too, and its trainer stops the child within a second. */
  async cancel(id: string, viewer: Viewer): Promise<FineTuningJob> {
    const stored = await this.stored(id, viewer);
    const job = toJob(stored);
    if (job.status === "cancelled") return job;
    if (FINAL_STATUSES.includes(job.status))
      throw new PlatformError(
        409,
        "fine_tuning_job_ended",
        `fine-tuning job ${id} already ${job.status}; only queued or running jobs can be cancelled`,
        "fine_tuning_job_id",
      );
    await this.end(id, job.organization_id, null, "cancelled");
    await addEvent(this.ctl, id, "info", "Job cancelled");
    // A job a trainer holds is locked and stays; that trainer sees the status and stops.
    await this.queueFor(stored.spec)
      .remove(id)
      .catch(() => 0);
    return this.get(id, viewer);
  }

  private async end(
    id: string,
    org: string,
    error: FineTuningJob["error"],
    status: "failed" | "cancelled" = "failed",
  ): Promise<void> {
    await updateIfActive(this.ctl, id, { status, finished_at: Date.now(), ...(error ? { error } : {}) });
    await this.ctl.redis.srem(this.ctl.keys.fineTuningActive(org), id);
  }

  async events(
    id: string,
    viewer: Viewer,
    options: { after?: string; limit?: number } = {},
  ): Promise<{ object: "list"; data: FineTuneEvent[]; has_more: boolean }> {
    await this.stored(id, viewer);
    const limit = Math.min(Math.max(options.limit ?? 20, 1), 1000);
    return { object: "list", ...(await listEvents(this.ctl, id, options.after, limit)) };
  }

  async checkpoints(
    id: string,
    viewer: Viewer,
    options: { after?: string; limit?: number } = {},
  ): Promise<{
    object: "list";
    data: FineTuneCheckpoint[];
    has_more: boolean;
    first_id: string | null;
    last_id: string | null;
  }> {
    await this.stored(id, viewer);
    let all = (await listCheckpoints(this.ctl, id)).map(({ key: _key, ...shown }) => shown);
    if (options.after) {
      const at = all.findIndex((c) => c.id === options.after);
      all = at === -1 ? [] : all.slice(at + 1);
    }
    const limit = Math.min(Math.max(options.limit ?? 10, 1), 100);
    const data = all.slice(0, limit);
    return {
      object: "list",
      data,
      has_more: all.length > limit,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
    };
  }

  /** Jobs waiting for a trainer and being trained, from the queue (metrics.ts). */
  async queueCounts(): Promise<{ queued: number; running: number }> {
    const out = { queued: 0, running: 0 };
    for (const queue of [this.queue, this.gpuQueue]) {
      const c = await queue.getJobCounts("waiting", "delayed", "prioritized", "active");
      out.queued += (c.waiting ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
      out.running += c.active ?? 0;
    }
    return out;
  }

  async close(): Promise<void> {
    await this.watch?.close();
    await this.queues.close();
  }
}

type Located = { uri: string; given: string };

/**
 * The base version a job trains from: `<name>@<version>` (or `<name>`, its newest), registered as a
 * Hugging Face checkpoint. A GGUF-only version or an adapter is refused (400): training needs the
 * checkpoint's weights in the form torch loads.
 */
export async function trainableBase(ctl: Control, model: string, viewer?: NameViewer): Promise<RegisteredVersion> {
  const [name = "", version = "latest", ...rest] = model.split("@");
  if (rest.length > 0 || !ModelName.safeParse(name).success)
    throw new PlatformError(400, "invalid_request", `model: "${model}" is not <model>@<version>`, "model");
  let base: RegisteredVersion;
  try {
    base = await resolveModelVersion(ctl, name, version, viewer);
  } catch (e) {
    if (e instanceof PlatformError && e.status === 404)
      throw new PlatformError(404, "model_not_found", `model: ${e.message}`, "model");
    throw e;
  }
  if (base.kind !== "hf")
    throw new PlatformError(
      400,
      "invalid_request",
      base.kind === "adapter"
        ? `model: ${base.name}@${base.version} is an adapter; fine-tune its base version instead`
        : `model: ${base.name}@${base.version} is registered as a GGUF file only; fine-tuning needs the Hugging Face checkpoint (config.json + safetensors): register the checkpoint directory as a version and fine-tune that`,
      "model",
    );
  return base;
}
