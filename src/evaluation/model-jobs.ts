/**
 * An evaluation's requests on the model version's queue, at batch priority (below online traffic).
 *
 * Each request is a BullMQ job with a deterministic id (`<evaluation id>-<item>-<part>`, `-r1`…
 * for retries): a resumed coordinator that asks again creates nothing new and finds the answer of
 * one that finished meanwhile. The job names a reply stream, so the worker keeps the whole answer
 * on the job's own hash (src/queue/kept-answers.ts) and returns only a receipt; this reads it from
 * there, a few times a second, and removes the job once read. The stream itself is not read: it
 * is cut back as answers are collected.
 */
import type { Queue } from "bullmq";
import {
  BATCH_PRIORITY,
  JOB_SCHEMA_VERSION,
  type JobPayloadInput,
  type Prompt,
  type SamplingParams,
  TextResult,
} from "../contracts/job.ts";
import { publicJobError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { QueueBase } from "../queue/base.ts";
import { cancelJobs } from "../queue/cancel.ts";
import { jobErrorFromFailure } from "../queue/failures.ts";
import { ANSWER_FIELD } from "../queue/kept-answers.ts";
import { recordUsage } from "../usage/counters.ts";

const POLL_MS = 100;
const MAX_ATTEMPTS = 3;
const KEEP_S = 86_400;

export type Answer = { ok: true; result: TextResult } | { ok: false; code: string; message: string };

type Waiter = { resolve: (a: Answer) => void; attempt: number; add: (attempt: number) => Promise<unknown> };

export class ModelJobs extends QueueBase {
  private readonly evaluationId: string;
  private readonly modelQueue: Queue;
  private readonly base: { model: string; version: string; adapter?: string };
  private readonly replies: string;
  private readonly waiters = new Map<string, Waiter>();
  private running = true;
  private readonly polling: Promise<void>;
  /** Whose usage (`/v1/usage`) the requests count in, as batch records count theirs. Absent: not counted. */
  private readonly usageKey: string | undefined;
  private unrecorded = { requests: 0, prompt_tokens: 0, completion_tokens: 0, errors: 0 };

  constructor(
    ctl: Control,
    evaluationId: string,
    queue: string,
    base: { model: string; version: string; adapter?: string },
    usageKey?: string,
  ) {
    super(ctl);
    this.usageKey = usageKey;
    this.evaluationId = evaluationId;
    this.modelQueue = this.queueNamed(queue);
    this.base = base;
    this.replies = ctl.keys.evaluationReplies(evaluationId);
    this.polling = this.poll();
  }

  get inFlight(): number {
    return this.waiters.size;
  }

  /** One prompt's answer; retried (a new job) on a busy, lost or failing replica. */
  ask(name: string, prompt: Prompt, params: SamplingParams): Promise<Answer> {
    const add = (attempt: number) => {
      const id = this.jobId(name, attempt);
      const payload: JobPayloadInput = {
        v: JOB_SCHEMA_VERSION,
        request_id: id,
        model: this.base.model,
        version: this.base.version,
        ...(this.base.adapter ? { adapter: this.base.adapter } : {}),
        stream: false,
        reply: { stream: this.replies },
        kind: "completion",
        prompt,
        params,
      };
      return this.modelQueue.add("completion", payload, {
        jobId: id,
        priority: BATCH_PRIORITY,
        removeOnComplete: { age: KEEP_S },
        removeOnFail: { age: KEEP_S },
      });
    };
    return new Promise<Answer>((resolve, reject) => {
      this.waiters.set(name, { resolve, attempt: 0, add });
      add(0).catch((e: unknown) => {
        this.waiters.delete(name);
        reject(e);
      });
    });
  }

  /** Stops the requests still waiting: queued ones are dropped, running ones aborted. */
  async cancel(): Promise<void> {
    const ids = [...this.waiters.entries()].map(([name, w]) => this.jobId(name, w.attempt));
    for (const w of this.waiters.values()) w.resolve({ ok: false, code: "cancelled", message: "cancelled" });
    this.waiters.clear();
    await cancelJobs(this.ctl, this.modelQueue, ids);
  }

  override async close(): Promise<void> {
    this.running = false;
    await this.polling;
    await this.recordUsage();
    await this.ctl.redis.del(this.replies).catch(() => 0);
    await super.close();
  }

  /** Never fails the evaluation: usage is bookkeeping. */
  private async recordUsage(): Promise<void> {
    const counts = this.unrecorded;
    if (!this.usageKey || counts.requests === 0) return;
    this.unrecorded = { requests: 0, prompt_tokens: 0, completion_tokens: 0, errors: 0 };
    await recordUsage(this.ctl, {
      key: this.usageKey,
      model: this.base.model,
      version: this.base.version,
      ...counts,
    }).catch((e: unknown) =>
      console.error(`[evaluation ${this.evaluationId}] usage not recorded: ${(e as Error).message}`),
    );
  }

  private jobId(name: string, attempt: number): string {
    return attempt === 0 ? `${this.evaluationId}-${name}` : `${this.evaluationId}-${name}-r${attempt}`;
  }

  private async poll(): Promise<void> {
    while (this.running) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      if (this.waiters.size === 0) continue;
      try {
        await this.collect();
      } catch {
        // Redis unavailable: the next round asks again.
      }
    }
  }

  private async collect(): Promise<void> {
    const entries = [...this.waiters.entries()];
    const pipeline = this.ctl.redis.pipeline();
    for (const [name, w] of entries)
      pipeline.hmget(
        this.modelQueue.toKey(this.jobId(name, w.attempt)),
        "timestamp",
        "finishedOn",
        ANSWER_FIELD,
        "failedReason",
      );
    const replies = (await pipeline.exec()) ?? [];
    let collected = 0;
    for (const [i, [name, w]] of entries.entries()) {
      const [err, fields] = replies[i] ?? [null, null];
      if (err) throw err;
      const [timestamp, finishedOn, answer, failedReason] = (fields ?? []) as (string | null)[];
      // Gone without an answer (removed, or Redis lost it): asked again under the same id.
      if (!timestamp) await w.add(w.attempt);
      if (!finishedOn) continue;
      const id = this.jobId(name, w.attempt);
      if (answer) {
        const parsed = TextResult.safeParse(parseJson(answer));
        this.unrecorded.requests++;
        if (parsed.success) {
          this.unrecorded.prompt_tokens += parsed.data.usage.prompt_tokens;
          this.unrecorded.completion_tokens += parsed.data.usage.completion_tokens;
        } else this.unrecorded.errors++;
        w.resolve(
          parsed.success
            ? { ok: true, result: parsed.data }
            : { ok: false, code: "invalid_result", message: "the worker returned an unexpected result" },
        );
        this.waiters.delete(name);
      } else {
        const error = jobErrorFromFailure(failedReason ?? "the job failed");
        const retryable = error.status === 500 || error.status === 503 || error.code === "replica_lost";
        if (retryable && w.attempt + 1 < MAX_ATTEMPTS) {
          w.attempt++;
          await w.add(w.attempt);
        } else {
          // As batch records: an engine's 5xx text may quote server paths; publicJobError keeps those out.
          const shown = publicJobError(error);
          this.unrecorded.requests++;
          this.unrecorded.errors++;
          w.resolve({ ok: false, code: error.code, message: shown.message });
          this.waiters.delete(name);
        }
      }
      await this.modelQueue.remove(id).catch(() => 0);
      collected++;
    }
    if (collected > 0) await this.ctl.redis.xtrim(this.replies, "MAXLEN", 0).catch(() => 0);
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
