/**
 * One job from the queue to its reply: parse it, check its deadline and cancellation, wait for a
 * sequence, run the engine with its tokens streamed, then reply (and keep a batch record's
 * answer), measured and traced. A job the drain aborts goes back to the queue instead.
 */
import { type Job, UnrecoverableError, WaitingError } from "bullmq";
import { describeIssues } from "../src/contracts/issues.ts";
import { PlatformError } from "../src/contracts/errors.ts";
import {
  adapterRefusal,
  BATCH_PRIORITY,
  type JobError,
  type JobEvent,
  JobPayload,
  type JobReceipt,
  type JobResult,
  receiptOf,
  type TokenLogprob,
  takesAdapter,
} from "../src/contracts/job.ts";
import { type SchemaLimits, schemaLimitError } from "../src/contracts/schema-limits.ts";
import { isCancelled } from "../src/queue/cancel.ts";
import { bandOf } from "../src/queue/fair-share.ts";
import { keepAnswer } from "../src/queue/kept-answers.ts";
import { QueueBase } from "../src/queue/base.ts";
import { moveWaiting, sharedOf } from "../src/queue/lanes.ts";
import { appendReply, TokenCoalescer } from "../src/queue/replies.ts";
import { causeFields, logger } from "../src/telemetry/log.ts";
import type { Source } from "../src/telemetry/request-metrics.ts";
import { traceFieldsOf, traceJob } from "../src/telemetry/tracing.ts";
import type { JobTrace } from "../src/telemetry/tracing-contract.ts";
import { diedWithEngine } from "./engine-lost.ts";
import type { AdapterResolver } from "./adapters.ts";
import { type AppliedAdapter, type Engine, type GenerationHooks, type TextRequest, usage } from "./engines/engine.ts";
import type { ObjectStore } from "../src/storage/store.ts";
import { runPictureJob } from "./picture-job.ts";
import type { WorkerMetrics } from "./metrics.ts";
import type { Slots } from "./slots.ts";
import type { WorkerState } from "./state.ts";

const CANCEL_LOOKUP_AFTER_MS = 1000;
const log = logger("worker");

export class JobHandler {
  private readonly w: WorkerState;
  private readonly engine: Engine;
  private readonly slots: Slots;
  private readonly metrics: WorkerMetrics | undefined;
  private readonly schemaLimits: SchemaLimits;
  private readonly adapters: AdapterResolver | undefined;
  private readonly images: ObjectStore | undefined;
  /** For handing a lane's job back to its shared queue. */
  private readonly queues: QueueBase;

  /**
   * `schemaLimits`: a producer may enqueue directly, so a job's JSON schemas are held to them here too.
   * `images`: where image jobs' PNGs are written (the artifact store).
   */
  constructor(
    w: WorkerState,
    engine: Engine,
    slots: Slots,
    metrics: WorkerMetrics | undefined,
    schemaLimits: SchemaLimits,
    adapters?: AdapterResolver,
    images?: ObjectStore,
  ) {
    this.queues = new QueueBase(w.ctl);
    this.adapters = adapters;
    this.images = images;
    this.w = w;
    this.engine = engine;
    this.slots = slots;
    this.metrics = metrics;
    this.schemaLimits = schemaLimits;
  }

  /** BullMQ's processor: the job's result, or only its receipt when the result went to a reply stream. */
  readonly handle = async (job: Job, token?: string): Promise<JobResult | JobReceipt> => {
    const { w, metrics } = this;
    const jobId = job.id as string;
    const parsed = JobPayload.safeParse(job.data);
    if (!parsed.success) {
      const err: JobError = {
        code: "invalid_job",
        status: 400,
        param: null,
        message: `invalid job payload: ${describeIssues(parsed.error)}`,
      };
      await this.emit(job.data ?? {}, jobId, { type: "error", error: err });
      throw new UnrecoverableError(JSON.stringify(err));
    }
    const payload = parsed.data;
    const source: Source = (job.opts.priority ?? 0) >= BATCH_PRIORITY ? "batch" : "online";
    const taken = performance.now();
    const overLimit =
      payload.kind === "embedding" || payload.kind === "image" || payload.kind === "tokenize"
        ? undefined
        : schemaLimitError(
            {
              response_format: payload.params.response_format,
              tools: payload.kind === "chat" ? payload.tools : undefined,
            },
            this.schemaLimits,
          );
    if (overLimit) throw this.fail(payload, jobId, overLimit, source);
    if (payload.deadline !== undefined && Date.now() > payload.deadline) {
      throw this.fail(
        payload,
        jobId,
        new PlatformError(504, "timeout", "the request waited in the queue past its deadline"),
        source,
      );
    }
    // A worker hears cancellations on pub/sub; only a job that waited long enough to have been
    // cancelled before this worker subscribed needs the Redis lookup.
    const waited = Date.now() - job.timestamp;
    if (w.cancelled.has(jobId) || (waited > CANCEL_LOOKUP_AFTER_MS && (await isCancelled(w.ctl, jobId)))) {
      throw this.fail(
        payload,
        jobId,
        new PlatformError(499, "cancelled", "the request was cancelled by its client"),
        source,
      );
    }
    const abort = new AbortController();
    w.inFlight.set(jobId, abort);
    if (w.draining) {
      // Prefetched while the drain began: not started, so back to the queue.
      w.releasing.add(jobId);
      abort.abort();
    }
    let span: JobTrace | undefined;
    // Its turn among the jobs waiting here for a sequence (workers/slots.ts): band, then tenant.
    const rank = { band: bandOf(job.opts.priority), flow: payload.tenant?.org ?? "" };
    try {
      await this.slots.acquire(abort.signal, payload.queue_deadline, rank);
      w.generating.add(jobId);
      if (payload.stream)
        void this.emit(payload, jobId, { type: "started", replica: w.replicaId, attempt: job.attemptsStarted });
      const queuedMs = Date.now() - job.timestamp;
      // Tracing (when on): the queue wait ends here, the inference span starts (docs/tracing.md).
      span = traceJob({
        traceparent: payload.traceparent,
        enqueuedAt: job.timestamp,
        queue: job.queueName,
        jobId,
        requestId: payload.request_id,
        kind: payload.kind,
        model: payload.model,
        version: payload.version,
        replica: w.replicaId,
        attempt: job.attemptsStarted,
        maxTokens: "params" in payload && payload.kind !== "image" ? payload.params.max_tokens : undefined,
      });
      const started = performance.now();
      let firstText: number | undefined;
      let lastText = started;
      // A stream's tokens, a few to a reply entry (src/queue/replies.ts).
      const tokens =
        payload.stream && payload.reply
          ? new TokenCoalescer((event) => void this.emit(payload, jobId, event))
          : undefined;
      const onText = (text: string, logprobs?: TokenLogprob[]) => {
        const now = performance.now();
        if (firstText === undefined) firstText = now;
        else metrics?.interToken(source, (now - lastText) / 1000);
        lastText = now;
        tokens?.push(text, logprobs);
      };
      let result: JobResult;
      try {
        result = await this.run(payload, jobId, abort.signal, onText);
      } finally {
        // The tokens still waiting go before the job's last event.
        tokens?.flush();
        // Before the reply's round trip: a prefetched job can use the sequence meanwhile.
        this.slots.release(rank.flow);
        w.generating.delete(jobId);
      }
      const ended = performance.now();
      if (w.releasing.has(jobId)) return await release(job, token, this.queues);
      result.queued_ms = queuedMs;
      if (result.type === "image") result.generation_ms = ended - started;
      if (result.type === "text") {
        // For the gateway's TTFT of a non-streaming request (src/gateway/metrics.ts, nonStreamingTtft).
        result.generation_ms = ended - started;
        if (firstText !== undefined) result.first_token_ms = firstText - started;
      }
      metrics?.answered(source, payload.kind, { taken, started, firstText, ended }, result);
      span?.end({ usage: result.usage, finishReason: result.type === "text" ? result.finish_reason : undefined });
      if (log.isEnabled("debug"))
        log.debug(
          {
            request_id: payload.request_id,
            job_id: jobId,
            ...traceFieldsOf(payload.traceparent),
            replica: w.replicaId,
            queued_ms: queuedMs,
            usage: result.usage,
          },
          "job done",
        );
      // A batch record's answer is also kept on its job, for a coordinator that resumes (src/queue/kept-answers.ts).
      await Promise.all([
        this.emit(payload, jobId, { type: "done", result }),
        payload.reply && source === "batch" ? keepAnswer(w.ctl.redis, job, result) : undefined,
      ]);
      return payload.reply ? receiptOf(result) : result;
    } catch (e) {
      if (e instanceof WaitingError) throw e;
      if (w.releasing.has(jobId)) return await release(job, token, this.queues);
      // The engine's process died under the job (its connection broke first): not the request's
      // failure. The replica goes down and the job is reclaimed with it, so it is left as it is.
      if (await diedWithEngine(w, e)) return await new Promise<never>(() => undefined);
      span?.end({ error: toJobError(e) });
      throw this.fail(payload, jobId, e, source);
    } finally {
      // A job handed back to the queue (drain): its span ends here; ended spans ignore this.
      span?.end({ released: true });
      w.inFlight.delete(jobId);
      w.releasing.delete(jobId);
    }
  };

  /** The job's adapter as the engine applies it: a 400 where this replica cannot apply one. */
  private async adapterOf(payload: JobPayload): Promise<AppliedAdapter | undefined> {
    if (payload.adapter === undefined) return undefined;
    if (!takesAdapter(payload.kind))
      throw new PlatformError(400, "invalid_request", adapterRefusal(payload.kind), "adapter");
    if (!this.engine.servesAdapters || !this.adapters)
      throw new PlatformError(
        400,
        "invalid_request",
        `this replica's engine (${this.engine.name}) does not apply LoRA adapters`,
        "adapter",
      );
    return this.adapters.resolve(payload.adapter);
  }

  private async run(
    payload: JobPayload,
    jobId: string,
    signal: AbortSignal,
    onToken: GenerationHooks["onText"],
  ): Promise<JobResult> {
    const adapter = await this.adapterOf(payload);
    if (payload.kind === "image") {
      const deps = { engine: this.engine, store: this.images, replica: this.w.replicaId };
      return runPictureJob(deps, payload, signal, (step, steps) => {
        if (payload.stream) void this.emit(payload, jobId, { type: "progress", step, steps });
      });
    }
    if (payload.kind === "tokenize") {
      if (!this.engine.tokenize)
        throw new PlatformError(
          400,
          "invalid_request",
          `this replica's engine (${this.engine.name}) does not tokenize`,
        );
      const out = await this.engine.tokenize(payload.input);
      const counted = "tokens" in payload.input ? payload.input.tokens.length : out.tokens.length;
      return { type: "tokens", ...out, usage: usage(counted, 0), replica: this.w.replicaId };
    }
    if (payload.kind === "embedding") {
      const out = await this.engine.embed(payload.input);
      return { type: "embedding", embeddings: out.embeddings, usage: out.usage, replica: this.w.replicaId };
    }
    const request: TextRequest =
      payload.kind === "chat"
        ? {
            kind: "chat" as const,
            adapter,
            messages: payload.messages,
            params: payload.params,
            tools:
              payload.tools && payload.tool_choice !== "none"
                ? {
                    tools: payload.tools,
                    tool_choice: payload.tool_choice,
                    parallel_tool_calls: payload.parallel_tool_calls,
                  }
                : undefined,
          }
        : { kind: "prompt" as const, adapter, prompt: payload.prompt, params: payload.params };
    if (payload.priority !== undefined) request.priority = payload.priority;
    // Always observed: the first text's time is reported even when nothing is streamed.
    const out = await this.engine.generate(request, { signal, onText: onToken });
    return { type: "text", ...out, replica: this.w.replicaId };
  }

  /** Report the failure to the waiting client and make BullMQ fail the job without retrying it. */
  private fail(payload: JobPayload, jobId: string, e: unknown, source: Source): UnrecoverableError {
    const err = toJobError(e);
    this.metrics?.failed(source, payload.kind, err);
    // The full story (stack included) stays here; the gateway logs the message under the same request id.
    if (!(e instanceof PlatformError))
      log.error(
        { request_id: payload.request_id, job_id: jobId, ...traceFieldsOf(payload.traceparent), ...causeFields(e) },
        `job ${jobId} failed`,
      );
    void this.emit(payload, jobId, { type: "error", error: err });
    return new UnrecoverableError(JSON.stringify(err));
  }

  private emit(payload: { reply?: { stream: string } }, jobId: string, event: JobEvent): Promise<unknown> {
    return payload.reply ? appendReply(this.w.ctl.redis, payload.reply.stream, jobId, event) : Promise.resolve();
  }
}

/**
 * Hands a job back to the queue (not a failure, so no retry is spent): another replica runs it
 * from the start. If Redis is gone this cannot happen; the job's lock then lapses and BullMQ's
 * stalled-job check requeues it.
 */
async function release(job: Job, token: string | undefined, queues: QueueBase): Promise<never> {
  if (token !== undefined) await job.moveToWait(token);
  // A lane's job goes to the shared queue: this replica serves its lane no more (src/queue/lanes.ts).
  const shared = sharedOf(job.queueName);
  if (shared)
    await moveWaiting(queues.ctl.redis, queues.queueNamed(job.queueName), queues.queueNamed(shared), job.id as string);
  throw new WaitingError();
}

function toJobError(e: unknown): JobError {
  if (e instanceof PlatformError)
    return { code: e.code, message: e.message, status: e.status, param: e.param, retry_after: e.retryAfter };
  return { code: "engine_error", message: e instanceof Error ? e.message : String(e), status: 500, param: null };
}
