/**
 * Sending a batch job's records to the model queue so that no record that has
 * been answered is ever sent again, whichever coordinator process asks.
 *
 * - Each record attempt is a BullMQ job with a deterministic id
 *   (`<batch id>-<line>`, then `-r1`, `-r2` for retries). Adding an id that
 *   exists is a no-op, so a resumed coordinator that re-sends a record which
 *   is still queued, running or finished creates nothing new.
 * - Workers append each job's `done`/`error` event to this batch job's own
 *   reply stream. The reader copies every final outcome into the job's results
 *   hash before moving past it, and trims the stream only behind that point:
 *   an answer that arrives while no coordinator runs waits in the stream.
 * - Before sending, a record is looked up in the results hash, then as a
 *   BullMQ job (finished: its return value is the answer; queued or running:
 *   wait for it). A once-a-second check of the jobs still awaited catches
 *   answers whose event never came (a job failed by BullMQ's stall limit).
 */
import type { Queue } from "bullmq";
import { z } from "zod";
import {
  BATCH_PRIORITY,
  JOB_SCHEMA_VERSION,
  type JobError,
  type JobPayloadInput,
  ImageResult,
  type SamplingParams,
  TextResult,
} from "../contracts/job.ts";
import type { Control } from "../redis/connection.ts";
import { recordUsage } from "../usage/counters.ts";
import { detailOf, publicJobError } from "../contracts/errors.ts";
import { QueueBase } from "../queue/base.ts";
import { cancelJobs } from "../queue/cancel.ts";
import { jobErrorFromFailure } from "../queue/failures.ts";
import { ANSWER_FIELD } from "../queue/kept-answers.ts";
import { replyHandler } from "../queue/replies.ts";
import type { EntryHandler, StreamReader } from "../queue/stream-reader.ts";
import { reportBatchRecord } from "./metrics.ts";
import { nonStreamingTtft } from "../telemetry/request-metrics.ts";
import type { Outcome, Work } from "./lines.ts";

/**
 * An answer, with whether asking again could help (engine errors, busy or not-ready replicas),
 * and the worker's timings for metrics (neither is kept with the record).
 */
type Answer = Outcome & {
  retryable?: boolean;
  timing?: Pick<TextResult, "queued_ms" | "first_token_ms" | "generation_ms">;
};

const MAX_ATTEMPTS = 3;
const CHECK_EVERY_MS = 1000;
// Normally removed as soon as their batch is written; this only bounds leftovers.
const KEEP_FINISHED_S = 7 * 86_400;

export type RecordJobsOptions = {
  ctl: Control;
  batchId: string;
  model: string;
  version: string;
  /** The queue to use; absent: the model version's default. */
  queue?: string;
  /** A LoRA adapter every record applies (`<name>@<version>`; job.ts `adapter`). */
  adapter?: string;
  /**
   * Whose usage (`/v1/usage`) every record counts in, and under which model name (the endpoint a
   * client named, as online requests count): the key that created the job. Absent: not counted.
   */
  usage?: { key: string; model: string };
  /** Lines before this one are written: late answers for them are not kept. */
  writtenBefore: () => number;
};

export class RecordJobs extends QueueBase {
  private readonly options: RecordJobsOptions;
  private readonly modelQueue: Queue;
  private readonly resultsKey: string;
  private readonly replies: StreamReader;
  private readonly waiters = new Map<
    string,
    { resolve: (a: Answer) => void; since: number; add: () => Promise<unknown> }
  >();
  /** Highest attempt used per line, so the jobs can be removed once the line is written. */
  private readonly attempts = new Map<number, number>();
  private pastEarlierRuns = false;
  private running = true;
  private cancelled = false;
  private checking: Promise<void> = Promise.resolve();
  /** Records answered since the last write to the usage counters (written every CHECK_EVERY_MS and at close). */
  private unrecorded = { requests: 0, prompt_tokens: 0, completion_tokens: 0, errors: 0, images: 0, steps: 0 };
  /** Keeps the final answers among a read's entries; the reader moves past them only then. */
  private readonly keep: EntryHandler;

  private constructor(options: RecordJobsOptions) {
    super(options.ctl);
    this.options = options;
    this.modelQueue = options.queue ? this.queueNamed(options.queue) : this.queue(options.model, options.version);
    this.resultsKey = this.ctl.keys.batchResults(options.batchId);
    this.replies = this.reader(this.ctl.keys.batchReplies(options.batchId));
    // A bad entry is skipped, never retried: reading it again would fail the same way forever.
    this.keep = replyHandler(`batch ${options.batchId}`, (jobId, event) => {
      if (event.type === "done") return this.resolve(jobId, fromResult(event.result));
      if (event.type === "error") return this.resolve(jobId, fromError(event.error, options.batchId));
      return undefined;
    });
  }

  /**
   * Answers that arrived while no coordinator ran are kept first, before any
   * record is looked up: a record answered then is found, never sent again.
   */
  static async open(options: RecordJobsOptions): Promise<RecordJobs> {
    const jobs = new RecordJobs(options);
    try {
      while ((await jobs.replies.readOnce(jobs.keep, { block: false })) > 0);
    } catch (e) {
      await jobs.close();
      throw e;
    }
    jobs.replies.start(jobs.keep);
    jobs.checking = jobs.checkAwaited();
    return jobs;
  }

  /** Records sent and not answered yet. */
  get inFlight(): number {
    return this.waiters.size;
  }

  /** The record's final answer: from an earlier run if there was one, else from the model. */
  async run(line: number, recordId: string, work: Work, params: SamplingParams): Promise<Outcome> {
    this.attempts.set(line, Math.max(this.attempts.get(line) ?? 0, 0));
    // Earlier runs sent records in input order, so past the first record they
    // never sent, there is nothing to look up.
    const lookUp = !this.pastEarlierRuns;
    if (lookUp) {
      const kept = await this.ctl.redis.hget(this.resultsKey, String(line));
      if (kept) return this.readKept(line, kept);
    }
    for (let attempt = 0; ; attempt++) {
      this.attempts.set(line, Math.max(this.attempts.get(line) ?? 0, attempt));
      const id = this.jobId(line, attempt);
      const common = {
        v: JOB_SCHEMA_VERSION,
        request_id: id,
        model: this.options.model,
        version: this.options.version,
        ...(this.options.adapter ? { adapter: this.options.adapter } : {}),
        stream: false,
        reply: { stream: this.replies.key },
      };
      // Chat records (OpenAI batch files) go as chat jobs, image records as image jobs: batch_record carries a prompt only.
      const payload: JobPayloadInput =
        work.kind === "chat"
          ? { ...common, params, kind: "chat", messages: work.messages }
          : work.kind === "image"
            ? { ...common, kind: "image", ...work.image }
            : {
                ...common,
                params,
                kind: "batch_record",
                batch_id: this.options.batchId,
                record_id: recordId,
                prompt: work.prompt,
              };
      const add = () =>
        this.modelQueue.add(payload.kind, payload, {
          jobId: id,
          priority: BATCH_PRIORITY,
          removeOnComplete: { age: KEEP_FINISHED_S },
          removeOnFail: { age: KEEP_FINISHED_S },
        });
      const answer = await this.settle(id, add, lookUp || attempt > 0);
      if (answer.ok || !answer.retryable || attempt + 1 >= MAX_ATTEMPTS) return strip(answer);
    }
  }

  /** Stop this job's records: workers abort the running ones, queued ones are dropped. */
  async cancelInFlight(): Promise<void> {
    this.cancelled = true;
    const ids = [...this.waiters.keys()];
    for (const { resolve } of this.waiters.values())
      resolve({ ok: false, code: "cancelled", message: "the batch job was cancelled" });
    this.waiters.clear();
    await cancelJobs(this.ctl, this.modelQueue, ids);
  }

  /** Drops the model jobs of written lines (their answers are in a part now). */
  async forget(lines: readonly number[]): Promise<void> {
    const ids: string[] = [];
    for (const line of lines) {
      const last = this.attempts.get(line) ?? 0;
      for (let a = 0; a <= last; a++) ids.push(this.jobId(line, a));
      this.attempts.delete(line);
    }
    for (let i = 0; i < ids.length; i += 500) {
      await Promise.all(ids.slice(i, i + 500).map((id) => this.modelQueue.remove(id).catch(() => 0)));
    }
  }

  /** Stream entries already copied into the results hash are no longer needed. */
  async trim(): Promise<void> {
    await this.replies.trim(this.ctl.redis);
  }

  override async close(): Promise<void> {
    this.running = false;
    // The reader first: no answer is kept once closing has begun.
    await this.replies.close();
    await this.checking;
    await this.recordUsage();
    await super.close();
  }

  /** The key's usage, as online requests count theirs: a record is a request. Never fails the job. */
  private async recordUsage(): Promise<void> {
    const counts = this.unrecorded;
    const labels = this.options.usage;
    if (!labels || counts.requests === 0) return;
    this.unrecorded = { requests: 0, prompt_tokens: 0, completion_tokens: 0, errors: 0, images: 0, steps: 0 };
    await recordUsage(this.ctl, { ...labels, version: this.options.version, ...counts }).catch((e: unknown) => {
      console.error(`[batch ${this.options.batchId}] usage not recorded: ${(e as Error).message}`);
    });
  }

  /**
   * An answer kept by an earlier run. One that does not parse (anything that can write to Redis
   * can write there) fails its record rather than the job; sending it again could answer a record twice.
   */
  private readKept(line: number, kept: string): Outcome {
    const parsed = KeptOutcome.safeParse(parseJson(kept));
    if (parsed.success) return parsed.data;
    console.error(
      `[batch ${this.options.batchId}] line ${line}: the kept answer does not parse; the record is failed with invalid_result`,
    );
    return unreadable();
  }

  private jobId(line: number, attempt: number): string {
    return attempt === 0 ? `${this.options.batchId}-${line}` : `${this.options.batchId}-${line}-r${attempt}`;
  }

  private parseJobId(id: string): { line: number; attempt: number } | undefined {
    const prefix = `${this.options.batchId}-`;
    if (!id.startsWith(prefix)) return undefined;
    const m = /^(\d+)(?:-r(\d+))?$/.exec(id.slice(prefix.length));
    return m ? { line: Number(m[1]), attempt: Number(m[2] ?? 0) } : undefined;
  }

  /** Waits for job `id`'s answer, adding the job unless the lookup finds that an earlier run did. */
  private async settle(id: string, add: () => Promise<unknown>, lookUp: boolean): Promise<Answer> {
    // Registered first, so an event that arrives during the lookup is not missed.
    const answer = new Promise<Answer>((resolve) => this.waiters.set(id, { resolve, since: Date.now(), add }));
    if (this.cancelled) {
      await this.resolve(id, { ok: false, code: "cancelled", message: "the batch job was cancelled" });
      return answer;
    }
    const found = lookUp ? (await this.lookup([id])).get(id) : "missing";
    if (found === "missing") {
      if (lookUp && this.parseJobId(id)?.attempt === 0) this.pastEarlierRuns = true;
      await add();
    } else if (found !== undefined && found !== "pending") {
      await this.resolve(id, found, { earlier: true });
    }
    return answer;
  }

  /** `earlier`: the answer is an earlier run's, found by a lookup (it took no time in this run). */
  private async resolve(id: string, answer: Answer, { earlier = false } = {}): Promise<void> {
    const at = this.parseJobId(id);
    const final = answer.ok || !answer.retryable || (at !== undefined && at.attempt + 1 >= MAX_ATTEMPTS);
    const waiter = this.waiters.get(id);
    if (final && at !== undefined && at.line >= this.options.writtenBefore()) {
      await this.ctl.redis.hset(this.resultsKey, String(at.line), JSON.stringify(strip(answer)));
      // Counted once, where the record's final answer is first kept.
      this.report(answer, earlier ? undefined : waiter?.since);
    }
    this.waiters.delete(id);
    waiter?.resolve(answer);
  }

  /** A record's final answer for the metrics; `since`: when its last attempt was sent, if in this run. */
  private report(answer: Answer, since: number | undefined): void {
    const served = { model_name: this.options.model, version: this.options.version };
    this.unrecorded.requests += 1;
    if (answer.ok) {
      this.unrecorded.prompt_tokens += answer.prompt_tokens ?? 0;
      this.unrecorded.completion_tokens += answer.completion_tokens ?? 0;
      if (answer.image) {
        this.unrecorded.images += 1;
        this.unrecorded.steps += answer.image.steps;
      }
    } else if (answer.code !== "cancelled") this.unrecorded.errors += 1;
    if (!answer.ok) {
      // A record stopped by the job's cancellation has no status: 499, as a client that left.
      reportBatchRecord({
        served,
        ok: false,
        failure: { code: answer.code, status: answer.status ?? (answer.code === "cancelled" ? 499 : 500) },
      });
      return;
    }
    const e2eSeconds = since === undefined ? undefined : (Date.now() - since) / 1000;
    const usage = {
      prompt_tokens: answer.prompt_tokens ?? 0,
      completion_tokens: answer.completion_tokens ?? 0,
      total_tokens: answer.tokens,
    };
    reportBatchRecord({
      served,
      ok: true,
      answered: {
        usage,
        finish_reason: answer.finish_reason ?? "stop",
        e2eSeconds,
        ttftSeconds:
          e2eSeconds === undefined || !answer.timing ? undefined : nonStreamingTtft(e2eSeconds, answer.timing),
        queuedMs: answer.timing?.queued_ms,
      },
    });
  }

  /** Each job's answer if it has finished, "pending" while queued or running, "missing" if it does not exist. */
  private async lookup(ids: readonly string[]): Promise<Map<string, Answer | "pending" | "missing">> {
    const pipeline = this.ctl.redis.pipeline();
    for (const id of ids)
      pipeline.hmget(this.modelQueue.toKey(id), "timestamp", "finishedOn", ANSWER_FIELD, "returnvalue", "failedReason");
    const replies = (await pipeline.exec()) ?? [];
    const out = new Map<string, Answer | "pending" | "missing">();
    ids.forEach((id, i) => {
      const [err, fields] = replies[i] ?? [null, null];
      if (err) throw err;
      const [timestamp, finishedOn, answer, returnvalue, failedReason] = (fields ?? []) as (string | null)[];
      // The answer the worker kept; a return value is one only from a worker that returned the whole result.
      const value = answer ?? returnvalue;
      if (!timestamp) out.set(id, "missing");
      else if (!finishedOn) out.set(id, "pending");
      else if (value !== null && value !== undefined) out.set(id, this.readAnswer(id, value));
      else out.set(id, fromError(jobErrorFromFailure(failedReason ?? "the job failed"), this.options.batchId));
    });
    return out;
  }

  /**
   * A finished model job's kept answer. Garbage there must not throw out of a lookup: every
   * periodic check would fail on it and the records waiting with it would never settle.
   */
  private readAnswer(id: string, kept: string): Answer {
    const value = parseJson(kept);
    if (value !== undefined) return fromResult(value);
    const line = this.parseJobId(id)?.line;
    console.error(
      `[batch ${this.options.batchId}] ${line !== undefined ? `line ${line}` : id}: model job ${id} has a kept answer that is not JSON; the record is failed with invalid_result`,
    );
    return { ...unreadable(), retryable: false };
  }

  private async checkAwaited(): Promise<void> {
    while (this.running) {
      await new Promise((r) => setTimeout(r, CHECK_EVERY_MS));
      await this.recordUsage();
      if (!this.running || this.cancelled) continue;
      const due = [...this.waiters.entries()]
        .filter(([, w]) => Date.now() - w.since >= CHECK_EVERY_MS)
        .map(([id]) => id);
      if (due.length === 0) continue;
      try {
        const states = await this.lookup(due);
        for (const [id, state] of states) {
          const waiter = this.waiters.get(id);
          if (!waiter || this.cancelled) continue;
          // Gone without an answer (Redis lost it, or someone removed it): ask again.
          if (state === "missing") await waiter.add();
          else if (state !== "pending") await this.resolve(id, state);
        }
      } catch {
        // Redis unavailable: the next round tries again.
      }
    }
  }
}

/** The shape of an Outcome (src/batch/output.ts) as kept in the results hash. */
const KeptOutcome: z.ZodType<Outcome> = z.union([
  z.object({
    ok: z.literal(true),
    text: z.string(),
    tokens: z.number(),
    prompt_tokens: z.number().optional(),
    completion_tokens: z.number().optional(),
    finish_reason: TextResult.shape.finish_reason.optional(),
    image: z
      .object({
        key: z.string().optional(),
        uri: z.string().optional(),
        seed: z.number(),
        steps: z.number(),
        width: z.number(),
        height: z.number(),
      })
      .optional(),
  }),
  z.object({
    ok: z.literal(false),
    code: z.string(),
    message: z.string(),
    status: z.number().optional(),
    param: z.string().nullable().optional(),
  }),
]);

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function unreadable(): Outcome {
  return {
    ok: false,
    code: "invalid_result",
    message: "the answer stored for this record could not be read; submit the record again in a new job",
  };
}

function fromResult(value: unknown): Answer {
  const image = ImageResult.safeParse(value);
  if (image.success) {
    const { usage, seed, steps, width, height, queued_ms, generation_ms } = image.data;
    return {
      ok: true,
      text: "",
      tokens: usage.total_tokens,
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: 0,
      finish_reason: "stop",
      image: { key: image.data.image.key, seed, steps, width, height },
      timing: { queued_ms, generation_ms },
    };
  }
  const parsed = TextResult.safeParse(value);
  if (!parsed.success)
    return {
      ok: false,
      code: "engine_error",
      message: "the worker returned an unexpected result",
      status: 500,
      retryable: true,
    };
  const { text, usage, finish_reason, queued_ms, first_token_ms, generation_ms } = parsed.data;
  return {
    ok: true,
    text,
    tokens: usage.total_tokens,
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    finish_reason,
    timing: { queued_ms, first_token_ms, generation_ms },
  };
}

/**
 * A model job's failure as its output line shows it: by the same rule as online answers
 * (`publicJobError`), an engine's 5xx text may quote server paths, so it is logged under
 * the batch id and the line says where to look.
 */
function fromError(error: JobError, batchId: string): Answer {
  const shown = publicJobError(error);
  const hidden = detailOf(shown);
  if (hidden) console.error(`[batch ${batchId}] ${error.code}: ${String(hidden.detail)}`);
  const message = hidden ? `${shown.message}; job id ${batchId}, the gateway log has the details` : shown.message;
  // replica_lost (502): BullMQ gave up on the job after its replicas died; a new attempt is a new job.
  return {
    ok: false,
    code: error.code,
    message,
    status: error.status,
    param: error.param,
    retryable: error.status === 500 || error.status === 503 || error.code === "replica_lost",
  };
}

function strip(answer: Answer): Outcome {
  const { retryable: _retryable, timing: _timing, ...outcome } = answer;
  return outcome;
}
