/**
 * Creating, reading, listing and cancelling batch jobs: what the gateway (and
 * anything else holding a Control) calls. The work itself is done by whichever
 * process runs a coordinator (coordinator.ts) and takes the job from the
 * `batches` queue.
 */
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import type { Queue } from "bullmq";
import {
  type BatchJobList,
  type BatchJob,
  BatchSampling,
  CreateBatchRequest,
  type CreateBatchRequestInput,
  KEPT_OUTPUT,
} from "./record.ts";
import { COORDINATOR_QUEUE } from "../contracts/naming.ts";
import { canSee, type Principal } from "../contracts/orgs.ts";
import type { Control } from "../redis/connection.ts";
import { PlatformError, parseRequest, withDetail } from "../contracts/errors.ts";
import { QueueBase } from "../queue/base.ts";
import { checkOutput, type Located, locate } from "../storage/located.ts";
import { StoragePolicy } from "../storage/policy.ts";
import { resolveAdapterTarget } from "./adapter-target.ts";
import type { Files, BatchResultFiles } from "../files/store.ts";
import { readOutputPicture, readOutput } from "./job-output.ts";
import {
  createRecord,
  hiddenFailure,
  isFinal,
  listIds,
  NOT_RESUMABLE,
  type OpenAiSpec,
  readRecord,
  readResultFiles,
  readSpec,
  reopenFailed,
  requestCancel,
  updateIfActive,
} from "./store.ts";

/** The BullMQ queue (under the platform prefix) whose jobs are batch jobs to coordinate; named in naming.ts. */
export { COORDINATOR_QUEUE };
export const COORDINATOR_JOB = "coordinate";
export type CoordinatorJobData = { batch_id: string };

/**
 * Who is asking (src/contracts/orgs.ts `canSee`): a user sees the jobs it created, an organization's
 * admin its organization's, an operator all. Absent: a trusted caller inside the platform, no restriction.
 */
export type Viewer = Principal;

const MAX_LIST = 100;

export class BatchJobs {
  private readonly ctl: Control;
  private readonly queues: QueueBase;
  private readonly queue: Queue<CoordinatorJobData>;
  private readonly storage: StoragePolicy;
  private readonly files: Files | undefined;

  /**
   * `queue`: another coordinator queue than `batches`, for a separate pool of coordinators (tests use one).
   * `storage`: the roots keys may name (none by default: every client-named URI is refused).
   * `files`: uploaded files, for `input_file_id`.
   */
  constructor(ctl: Control, options: { queue?: string; storage?: StoragePolicy; files?: Files } = {}) {
    this.ctl = ctl;
    this.storage = options.storage ?? new StoragePolicy();
    this.files = options.files;
    this.queues = new QueueBase(ctl);
    this.queue = this.queues.queueNamed<CoordinatorJobData>(options.queue ?? COORDINATOR_QUEUE);
  }

  /**
   * `viewer`: the key asking; its URIs are confined to its storage areas
   * (src/storage/policy.ts). Without one (trusted callers inside the platform)
   * URIs are taken as they are. `internal`: server-chosen locations (the
   * OpenAI shape's files), with the names the client knows them by.
   */
  async create(
    body: CreateBatchRequestInput,
    viewer?: Viewer,
    options: {
      openai?: OpenAiSpec;
      internal?: { input: Located; output: Located };
      queue?: string;
      /** A LoRA adapter of the version every record applies, `<name>@<version>` (docs/adapters.md). */
      adapter?: string;
    } = {},
  ): Promise<BatchJob> {
    const request = parseRequest(CreateBatchRequest, body);
    // `<endpoint>:<adapter>`: the endpoint's version and queue, every record with the adapter (as OpenAI batches).
    const target = request.model.includes(":")
      ? await resolveAdapterTarget(this.ctl, request.model, request.version, viewer)
      : undefined;
    const { input, output } = options.internal ?? (await this.locate(request, viewer));
    const id = `batch_${randomBytes(12).toString("hex")}`;
    await checkOutput(input, output, request.overwrite, this.storage.s3);
    const { concurrency, batch_size, overwrite } = request;
    const model = target?.model ?? request.model;
    const version = target?.version ?? request.version;
    const queue = target?.queue ?? options.queue;
    const adapter = target?.adapter ?? options.adapter;
    const sampling = BatchSampling.parse({
      temperature: request.temperature,
      top_p: request.top_p,
      seed: request.seed,
    });
    const shown: [string, string][] = [];
    for (const [real, name] of [...pairs(input, false), ...pairs(output, true)])
      if (real !== name) shown.push([real, name]);
    await createRecord(this.ctl, {
      id,
      model,
      version,
      input: input.given,
      output: output.given,
      input_uri: input.uri,
      output_uri: output.uri,
      overwrite,
      ...(viewer && !options.internal
        ? {
            scope: {
              key_id: viewer.id,
              role: viewer.role,
              org: viewer.org,
              input: input.confined,
              output: output.confined,
            },
          }
        : {}),
      ...(shown.length > 0 ? { shown } : {}),
      concurrency,
      batch_size,
      sampling: dropUndefined(sampling),
      created_by: viewer?.id ?? null,
      ...(viewer ? { org: viewer.org } : {}),
      created: Date.now(),
      ...(queue ? { queue } : {}),
      ...(options.openai ? { openai: options.openai } : {}),
      ...(adapter ? { adapter } : {}),
    });
    try {
      await this.enqueue(id);
    } catch (e) {
      // ioredis' message names the Redis address: it stays in the log.
      const error = hiddenFailure(
        id,
        "queue_unavailable",
        "the batch job could not be queued: the queue was unavailable; submit it again",
        e,
      );
      await updateIfActive(this.ctl, id, { state: "failed", error, finished: Date.now() }).catch(() => undefined);
      throw withDetail(
        new PlatformError(
          503,
          "queue_unavailable",
          `could not queue batch job ${id}: the queue is unavailable, retry shortly`,
          null,
          1,
        ),
        e,
      );
    }
    return this.get(id, viewer);
  }

  /** The request's input and output as real locations, confined to the viewer's areas when there is a viewer. */
  private async locate(
    request: CreateBatchRequest,
    viewer: Viewer | undefined,
  ): Promise<{ input: Located; output: Located }> {
    let input: Located;
    if (request.input_file_id !== undefined) {
      if (!this.files)
        throw new PlatformError(
          400,
          "invalid_request",
          "input_file_id: uploaded files are not available here; give input instead",
          "input_file_id",
        );
      const uri = await this.files.uri(request.input_file_id, viewer);
      input = { uri, given: request.input_file_id, shown: request.input_file_id, confined: false };
    } else {
      const given = request.input as string;
      if (given.endsWith("/"))
        throw new PlatformError(
          400,
          "invalid_uri",
          `input: "${given}" names a directory or prefix; give the JSONL object itself`,
          "input",
        );
      input = await locate(this.storage, given, viewer, "input");
    }
    const output =
      request.output === undefined ? this.keptOutput() : await locate(this.storage, request.output, viewer, "output");
    return { input, output };
  }

  /**
   * No output named (the input is an uploaded file): the server keeps the
   * result in the artifact store beside the uploaded files, as /v1/batches
   * does, where no client-named URI can reach it.
   */
  private keptOutput(): Located {
    if (!this.files)
      throw new PlatformError(
        400,
        "invalid_request",
        "output: required here (this server keeps no results); name where the result goes",
        "output",
      );
    return {
      uri: `${this.files.store.uri(KEPT_OUTPUT.slice(0, -1))}/`,
      given: KEPT_OUTPUT,
      shown: KEPT_OUTPUT,
      confined: false,
    };
  }

  /**
   * A failed job whose failure can be fixed (model not deployed, output not
   * writable, storage) goes back to the queue and continues from its
   * checkpoint: records already written are not sent again.
   */
  async resume(id: string, viewer?: Viewer): Promise<BatchJob> {
    const record = await this.get(id, viewer);
    if (record.state !== "failed") {
      throw new PlatformError(
        409,
        "batch_not_failed",
        `batch job ${id} is ${record.state}; only a failed job can be resumed`,
        "id",
      );
    }
    const why = record.error ? NOT_RESUMABLE[record.error.code] : undefined;
    if (why !== undefined || !record.resumable) {
      throw new PlatformError(
        409,
        "not_resumable",
        `batch job ${id} failed with ${record.error?.code ?? "an error"}, which resuming cannot fix${why ? `: ${why}` : ""}; download what it completed (GET /v1/batch-jobs/${id}/output) and submit a new job`,
        "id",
      );
    }
    if (!(await reopenFailed(this.ctl, id))) return this.get(id, viewer);
    // Each run has a coordinator job of its own. The failed run's job may still be active for a
    // moment after the record says failed (it ends once the run has returned), so it could be
    // neither removed nor replaced: a new job under its id would not be added, and the resumed
    // job would wait as "queued" for ever. BullMQ drops the old one with its retention.
    const run = await this.ctl.redis.hincrby(this.ctl.keys.batch(id), "runs", 1);
    await this.enqueue(id, `${id}.r${run}`);
    return this.get(id, viewer);
  }

  /**
   * The job's results: the result object of a finished job, or the parts
   * written so far (in order) of a failed, cancelled or running one.
   */
  async output(id: string, viewer?: Viewer): Promise<Readable> {
    const record = await this.get(id, viewer);
    return readOutput(this.ctl, this.storage, record);
  }

  /** One PNG of an image job, by the name its output line gives. */
  async picture(id: string, name: string, viewer?: Viewer): Promise<Readable> {
    const record = await this.get(id, viewer);
    return readOutputPicture(this.ctl, this.storage, record, name);
  }

  /** `jobId`: the coordinator job's id, the batch's own for its first run. */
  private async enqueue(id: string, jobId = id): Promise<void> {
    await this.queue.add(
      COORDINATOR_JOB,
      { batch_id: id },
      {
        jobId,
        // Unexpected failures (Redis or storage outages) are retried from the checkpoint.
        attempts: 3,
        backoff: { type: "exponential", delay: 5000 },
        removeOnComplete: { age: 86_400 },
        removeOnFail: { age: 7 * 86_400 },
      },
    );
  }

  async get(id: string, viewer?: Viewer): Promise<BatchJob> {
    const record = await readRecord(this.ctl, id);
    if (!record || !visible(record, viewer)) {
      throw new PlatformError(
        404,
        "batch_not_found",
        `no batch job "${id}"; \`platform inference batch list\` or GET /v1/batch-jobs lists them`,
        "id",
      );
    }
    return record;
  }

  /**
   * The job with what it was created from through /v1/batches (undefined for
   * other jobs), and the output and error files it ended with (undefined
   * until it ends, and for batches that ended before error files existed).
   */
  async getWithOpenAi(
    id: string,
    viewer?: Viewer,
  ): Promise<{ record: BatchJob; openai: OpenAiSpec | undefined; files: BatchResultFiles | undefined }> {
    const record = await this.get(id, viewer);
    const openai = (await readSpec(this.ctl, id))?.openai;
    return { record, openai, files: openai ? await readResultFiles(this.ctl, id) : undefined };
  }

  async list(options: { limit?: number; after?: string }, viewer?: Viewer): Promise<BatchJobList> {
    const limit = Math.min(Math.max(options.limit ?? 20, 1), MAX_LIST);
    const data: BatchJob[] = [];
    let after = options.after;
    // Other users' jobs are skipped, so a page may take several reads.
    for (;;) {
      const ids = await listIds(this.ctl, after, limit + 1);
      for (const id of ids) {
        const record = await readRecord(this.ctl, id);
        if (record && visible(record, viewer)) data.push(record);
        if (data.length > limit) return { object: "list", data: data.slice(0, limit), has_more: true };
      }
      if (ids.length < limit + 1) return { object: "list", data, has_more: false };
      after = ids.at(-1);
    }
  }

  /**
   * A queued job is cancelled at once; a running one is marked `cancelling`
   * and its coordinator stops it (and its in-flight records) within a second.
   */
  async cancel(id: string, viewer?: Viewer): Promise<BatchJob> {
    const record = await this.get(id, viewer);
    if (record.state === "cancelled") return record;
    if (isFinal(record.state)) {
      throw new PlatformError(
        409,
        "batch_finished",
        `batch job ${id} already ${record.state}; only queued or running jobs can be cancelled`,
        "id",
      );
    }
    await requestCancel(this.ctl, id);
    // remove() refuses a job a coordinator holds (it is locked): that one stops itself.
    if ((await this.queue.remove(id)) === 1) {
      if (await this.ctl.redis.exists(this.ctl.keys.batchCheckpoint(id))) {
        // It ran before: a coordinator must assemble what was written and clean up.
        await this.enqueue(id);
      } else {
        await updateIfActive(this.ctl, id, { state: "cancelled", finished: Date.now(), in_flight: 0 });
      }
    }
    return this.get(id, viewer);
  }

  async close(): Promise<void> {
    await this.queues.close();
  }
}

function visible(record: BatchJob, viewer: Viewer | undefined): boolean {
  return viewer === undefined || canSee(viewer, { id: record.created_by, org: record.org });
}

/** The [real, shown] prefix pairs for one location: the object itself, or for an output its directory. */
function pairs(located: Located, output: boolean): [string, string][] {
  if (!output) return [[located.uri, located.shown]];
  const named = /\.jsonl$/i.test(located.uri);
  const dir = (u: string) => (named ? u.slice(0, u.lastIndexOf("/") + 1) : u.endsWith("/") ? u : `${u}/`);
  return [[dir(located.uri), dir(located.shown)]];
}

function dropUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
