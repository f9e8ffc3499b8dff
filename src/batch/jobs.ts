/**
 * Creating, reading, listing and cancelling batch jobs: what the gateway (and
 * anything else holding a Control) calls. The work itself is done by whichever
 * process runs a coordinator (coordinator.ts) and takes the job from the
 * `batches` queue.
 */
import { randomBytes } from "node:crypto";
import { isAbsolute } from "node:path";
import { Queue } from "bullmq";
import { type BatchJobList, type BatchJobRecord, CreateBatchRequest, type CreateBatchRequestInput } from "../contracts/batch.ts";
import { describeIssues } from "../contracts/deployment.ts";
import type { ApiKeyRole } from "../contracts/records.ts";
import type { Control } from "../control/redis.ts";
import { PlatformError } from "../errors.ts";
import { parseStorageUri, StorageError } from "../storage/index.ts";
import { createRecord, isFinal, listIds, type OpenAiSpec, readRecord, readSpec, requestCancel, updateIfActive } from "./records.ts";

/** The BullMQ queue (under the platform prefix) whose jobs are batch jobs to coordinate. */
export const COORDINATOR_QUEUE = "batches";
export const COORDINATOR_JOB = "coordinate";
export type CoordinatorJobData = { batch_id: string };

/** Who is asking: keys without the admin role only see the jobs they created. Absent: no restriction. */
export type Viewer = { id: string; role: ApiKeyRole };

const MAX_LIST = 100;

export class BatchJobs {
  private readonly ctl: Control;
  private readonly queue: Queue<CoordinatorJobData>;

  /** `queue`: another coordinator queue than `batches`, for a separate pool of coordinators (tests use one). */
  constructor(ctl: Control, options: { queue?: string } = {}) {
    this.ctl = ctl;
    this.queue = new Queue<CoordinatorJobData>(options.queue ?? COORDINATOR_QUEUE, { connection: ctl.redis, prefix: ctl.prefix });
    this.queue.on("error", () => undefined); // surfaced on the calls that fail
  }

  /** `openai`: the job was made through /v1/batches; its lines are OpenAI requests (src/batch/openai-lines.ts). */
  async create(body: CreateBatchRequestInput, viewer?: Viewer, options: { openai?: OpenAiSpec } = {}): Promise<BatchJobRecord> {
    const parsed = CreateBatchRequest.safeParse(body);
    if (!parsed.success) {
      throw new PlatformError(400, "invalid_request", describeIssues(parsed.error), parsed.error.issues[0]?.path.join(".") || null);
    }
    const request = parsed.data;
    checkUri(request.input, "input", true);
    checkUri(request.output, "output", false);
    const id = `batch_${randomBytes(12).toString("hex")}`;
    const { model, version, input, output, concurrency, batch_size, ...sampling } = request;
    await createRecord(this.ctl, {
      id,
      model,
      version,
      input,
      output,
      concurrency,
      batch_size,
      sampling,
      created_by: viewer?.id ?? null,
      created: Date.now(),
      ...(options.openai ? { openai: options.openai } : {}),
    });
    try {
      await this.enqueue(id);
    } catch (e) {
      await updateIfActive(this.ctl, id, { state: "failed", error: { code: "queue_unavailable", message: (e as Error).message }, finished: Date.now() }).catch(() => undefined);
      throw new PlatformError(503, "queue_unavailable", `could not queue the batch job: ${(e as Error).message}`, null, 1);
    }
    return this.get(id, viewer);
  }

  private async enqueue(id: string): Promise<void> {
    await this.queue.add(
      COORDINATOR_JOB,
      { batch_id: id },
      {
        jobId: id,
        // Unexpected failures (Redis or storage outages) are retried from the checkpoint.
        attempts: 3,
        backoff: { type: "exponential", delay: 5000 },
        removeOnComplete: { age: 86_400 },
        removeOnFail: { age: 7 * 86_400 },
      },
    );
  }

  async get(id: string, viewer?: Viewer): Promise<BatchJobRecord> {
    const record = await readRecord(this.ctl, id);
    if (!record || !visible(record, viewer)) {
      throw new PlatformError(404, "batch_not_found", `no batch job "${id}"; \`platform inference batch list\` or GET /v1/batch-jobs lists them`, "id");
    }
    return record;
  }

  /** The job with what it was created from through /v1/batches (undefined for other jobs). */
  async getWithOpenAi(id: string, viewer?: Viewer): Promise<{ record: BatchJobRecord; openai: OpenAiSpec | undefined }> {
    const record = await this.get(id, viewer);
    return { record, openai: (await readSpec(this.ctl, id))?.openai };
  }

  async list(options: { limit?: number; after?: string }, viewer?: Viewer): Promise<BatchJobList> {
    const limit = Math.min(Math.max(options.limit ?? 20, 1), MAX_LIST);
    const data: BatchJobRecord[] = [];
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
  async cancel(id: string, viewer?: Viewer): Promise<BatchJobRecord> {
    const record = await this.get(id, viewer);
    if (record.state === "cancelled") return record;
    if (isFinal(record.state)) {
      throw new PlatformError(409, "batch_finished", `batch job ${id} already ${record.state}; only queued or running jobs can be cancelled`, "id");
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
    await this.queue.close();
  }
}

function visible(record: BatchJobRecord, viewer: Viewer | undefined): boolean {
  return viewer === undefined || viewer.role === "admin" || record.created_by === viewer.id;
}

/**
 * The coordinator may run on another machine than the caller, so a relative
 * path would name a different file there: only absolute ones are accepted.
 */
function checkUri(uri: string, field: "input" | "output", object: boolean): void {
  try {
    parseStorageUri(uri);
  } catch (e) {
    if (e instanceof StorageError) throw new PlatformError(400, "invalid_uri", e.message, field);
    throw e;
  }
  if (!/^[a-z][a-z0-9+.-]+:/i.test(uri) && !isAbsolute(uri)) {
    throw new PlatformError(400, "invalid_uri", `${field}: "${uri}" is a relative path; send an absolute path, a file:// URL or s3://bucket/key`, field);
  }
  if (object && uri.endsWith("/")) {
    throw new PlatformError(400, "invalid_uri", `${field}: "${uri}" names a directory or prefix; give the JSONL object itself`, field);
  }
}
