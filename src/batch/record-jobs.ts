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
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { z } from "zod";
import { JOB_SCHEMA_VERSION, JobError, decodeReplyEntry, type JobPayloadInput, type SamplingParams, TextResult, BATCH_PRIORITY } from "../contracts/job.ts";
import { queueName } from "../contracts/naming.ts";
import { type Control, duplicate } from "../control/redis.ts";
import { detailOf, publicJobError } from "../errors.ts";
import type { Work } from "./input.ts";
import type { Outcome } from "./output.ts";

type StreamRead = [string, [string, string[]][]][] | null;

/** An answer, with whether asking again could help (engine errors, busy or not-ready replicas). */
type Answer = Outcome & { retryable?: boolean };

const MAX_ATTEMPTS = 3;
const CHECK_EVERY_MS = 1000;
const CANCEL_MARK_TTL_MS = 600_000;
// Normally removed as soon as their batch is written; this only bounds leftovers.
const KEEP_FINISHED_S = 7 * 86_400;

export type RecordJobsOptions = {
  ctl: Control;
  batchId: string;
  model: string;
  version: string;
  /** Lines before this one are written: late answers for them are not kept. */
  writtenBefore: () => number;
};

export class RecordJobs {
  private readonly ctl: Control;
  private readonly options: RecordJobsOptions;
  private readonly queue: Queue;
  private readonly resultsKey: string;
  private readonly repliesKey: string;
  private readonly reader: Redis;
  private readonly waiters = new Map<string, { resolve: (a: Answer) => void; since: number; add: () => Promise<unknown> }>();
  /** Highest attempt used per line, so the jobs can be removed once the line is written. */
  private readonly attempts = new Map<number, number>();
  private lastEntry = "0-0";
  private pastEarlierRuns = false;
  private running = true;
  private cancelled = false;
  private readonly loops: Promise<void>[] = [];

  private constructor(options: RecordJobsOptions) {
    this.options = options;
    this.ctl = options.ctl;
    this.queue = new Queue(queueName(options.model, options.version), { connection: this.ctl.redis, prefix: this.ctl.prefix });
    this.queue.on("error", () => undefined); // surfaced on the calls that fail
    this.resultsKey = this.ctl.keys.batchResults(options.batchId);
    this.repliesKey = this.ctl.keys.batchReplies(options.batchId);
    this.reader = duplicate(this.ctl);
  }

  /**
   * Answers that arrived while no coordinator ran are kept first, before any
   * record is looked up: a record answered then is found, never sent again.
   */
  static async open(options: RecordJobsOptions): Promise<RecordJobs> {
    const jobs = new RecordJobs(options);
    try {
      for (;;) {
        const result = (await jobs.reader.xread("COUNT", 1000, "STREAMS", jobs.repliesKey, jobs.lastEntry)) as StreamRead;
        const entries = result?.[0]?.[1] ?? [];
        if (entries.length === 0) break;
        await jobs.keep(entries);
      }
    } catch (e) {
      jobs.reader.disconnect();
      await jobs.queue.close();
      throw e;
    }
    jobs.loops.push(jobs.readReplies(), jobs.checkAwaited());
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
      const common = { v: JOB_SCHEMA_VERSION, request_id: id, model: this.options.model, version: this.options.version, stream: false, reply: { stream: this.repliesKey }, params };
      // Chat records (OpenAI batch files) go as chat jobs: batch_record carries a prompt only.
      const payload: JobPayloadInput =
        work.kind === "chat"
          ? { ...common, kind: "chat", messages: work.messages }
          : { ...common, kind: "batch_record", batch_id: this.options.batchId, record_id: recordId, prompt: work.prompt };
      const add = () =>
        this.queue.add(payload.kind, payload, {
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
    for (const { resolve } of this.waiters.values()) resolve({ ok: false, code: "cancelled", message: "the batch job was cancelled" });
    this.waiters.clear();
    if (ids.length === 0) return;
    const marks = this.ctl.redis.multi();
    for (const id of ids) marks.set(this.ctl.keys.cancelled(id), "1", "PX", CANCEL_MARK_TTL_MS).publish(this.ctl.keys.cancelChannel, id);
    await marks.exec();
    await Promise.all(ids.map((id) => this.queue.remove(id).catch(() => 0)));
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
      await Promise.all(ids.slice(i, i + 500).map((id) => this.queue.remove(id).catch(() => 0)));
    }
  }

  /** Stream entries already copied into the results hash are no longer needed. */
  async trim(): Promise<void> {
    await this.ctl.redis.xtrim(this.repliesKey, "MINID", this.lastEntry).catch(() => undefined);
  }

  async close(): Promise<void> {
    this.running = false;
    this.reader.disconnect();
    await Promise.all(this.loops);
    await this.queue.close();
  }

  /**
   * An answer kept by an earlier run. One that does not parse (anything that can write to Redis
   * can write there) fails its record rather than the job; sending it again could answer a record twice.
   */
  private readKept(line: number, kept: string): Outcome {
    const parsed = KeptOutcome.safeParse(parseJson(kept));
    if (parsed.success) return parsed.data;
    console.error(`[batch ${this.options.batchId}] line ${line}: the kept answer does not parse; the record is failed with invalid_result`);
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
      await this.resolve(id, found);
    }
    return answer;
  }


  private async resolve(id: string, answer: Answer): Promise<void> {
    const at = this.parseJobId(id);
    const final = answer.ok || !answer.retryable || (at !== undefined && at.attempt + 1 >= MAX_ATTEMPTS);
    if (final && at !== undefined && at.line >= this.options.writtenBefore()) {
      await this.ctl.redis.hset(this.resultsKey, String(at.line), JSON.stringify(strip(answer)));
    }
    const waiter = this.waiters.get(id);
    this.waiters.delete(id);
    waiter?.resolve(answer);
  }

  /** Each job's answer if it has finished, "pending" while queued or running, "missing" if it does not exist. */
  private async lookup(ids: readonly string[]): Promise<Map<string, Answer | "pending" | "missing">> {
    const pipeline = this.ctl.redis.pipeline();
    for (const id of ids) pipeline.hmget(this.queue.toKey(id), "timestamp", "finishedOn", "returnvalue", "failedReason");
    const replies = (await pipeline.exec()) ?? [];
    const out = new Map<string, Answer | "pending" | "missing">();
    ids.forEach((id, i) => {
      const [err, fields] = replies[i] ?? [null, null];
      if (err) throw err;
      const [timestamp, finishedOn, returnvalue, failedReason] = (fields ?? []) as (string | null)[];
      if (!timestamp) out.set(id, "missing");
      else if (!finishedOn) out.set(id, "pending");
      else if (returnvalue !== null && returnvalue !== undefined) out.set(id, this.readReturnValue(id, returnvalue));
      else out.set(id, fromFailure(failedReason ?? "the job failed", this.options.batchId));
    });
    return out;
  }

  /**
   * A finished model job's return value. Garbage there must not throw out of a lookup: every
   * periodic check would fail on it and the records waiting with it would never settle.
   */
  private readReturnValue(id: string, returnvalue: string): Answer {
    const value = parseJson(returnvalue);
    if (value !== undefined) return fromResult(value);
    const line = this.parseJobId(id)?.line;
    console.error(`[batch ${this.options.batchId}] ${line !== undefined ? `line ${line}` : id}: model job ${id} has a return value that is not JSON; the record is failed with invalid_result`);
    return { ...unreadable(), retryable: false };
  }

  private async readReplies(): Promise<void> {
    while (this.running) {
      let result: StreamRead;
      try {
        result = (await this.reader.xread("COUNT", 1000, "BLOCK", 1000, "STREAMS", this.repliesKey, this.lastEntry)) as StreamRead;
      } catch {
        if (!this.running) return;
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      try {
        await this.keep(result?.[0]?.[1] ?? []);
      } catch {
        // Not kept yet, so these entries are read again.
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** Keeps the final answers among `entries`, then moves past them. */
  private async keep(entries: [string, string[]][]): Promise<void> {
    await Promise.all(
      entries.map(([entryId, fields]) => {
        // A bad entry is skipped, never retried: reading it again would fail the same way forever.
        const entry = decodeReplyEntry(fields);
        if ("problem" in entry) {
          console.error(`[batch ${this.options.batchId}] skipped reply entry ${entryId}: ${entry.problem}`);
          return undefined;
        }
        const { jobId, event } = entry;
        if (event.type === "done") return this.resolve(jobId, fromResult(event.result));
        if (event.type === "error") return this.resolve(jobId, fromError(event.error, this.options.batchId));
        return undefined;
      }),
    );
    const last = entries.at(-1);
    if (last) this.lastEntry = last[0];
  }

  private async checkAwaited(): Promise<void> {
    while (this.running) {
      await new Promise((r) => setTimeout(r, CHECK_EVERY_MS));
      if (!this.running || this.cancelled) continue;
      const due = [...this.waiters.entries()].filter(([, w]) => Date.now() - w.since >= CHECK_EVERY_MS).map(([id]) => id);
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
  }),
  z.object({ ok: z.literal(false), code: z.string(), message: z.string(), status: z.number().optional(), param: z.string().nullable().optional() }),
]);

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function unreadable(): Outcome {
  return { ok: false, code: "invalid_result", message: "the answer stored for this record could not be read; submit the record again in a new job" };
}

function fromResult(value: unknown): Answer {
  const parsed = TextResult.safeParse(value);
  if (!parsed.success) return { ok: false, code: "engine_error", message: "the worker returned an unexpected result", status: 500, retryable: true };
  const { text, usage, finish_reason } = parsed.data;
  return { ok: true, text, tokens: usage.total_tokens, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, finish_reason };
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
  return { ok: false, code: error.code, message, status: error.status, param: error.param, retryable: error.status === 500 || error.status === 503 };
}

/** Workers fail jobs with a JSON JobError; BullMQ itself (stall limit) with plain text. */
function fromFailure(reason: string, batchId: string): Answer {
  try {
    const parsed = JobError.safeParse(JSON.parse(reason));
    if (parsed.success) return fromError(parsed.data, batchId);
  } catch {
    // plain text
  }
  return fromError({ code: "engine_error", message: reason, status: 500, param: null }, batchId);
}

function strip(answer: Answer): Outcome {
  if (answer.ok) return answer;
  const { retryable: _retryable, ...outcome } = answer;
  return outcome;
}
