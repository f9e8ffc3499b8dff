/**
 * Serving one text request (chat, completion or generate) through the fabric:
 * enqueue, then either wait for the result or relay tokens as SSE.
 *
 * Streaming: headers are sent only once the first token (or the result)
 * arrives, so failures before generation (context too long, no such model
 * version on the worker) come back as ordinary HTTP errors. After that, an
 * error becomes one `data: {"error": ...}` event and the stream ends without
 * `[DONE]` (documented in the README).
 */
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import type { FinishReason, JobEvent, TextResult, TokenLogprob, ToolCall, Usage } from "../contracts/job.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import type { EndpointRecord } from "../contracts/records.ts";
import type { VariantOutcome } from "../control/abtests.ts";
import { PlatformError, publicJobError } from "../errors.ts";
import type { AdmissionLimits } from "../queue/admission.ts";
import type { JobHandle, Submission } from "../queue/dispatcher.ts";
import { type GatewayMetrics, nonStreamingTtft, type Served } from "../telemetry/metrics.ts";
import { clientError, envelope } from "./errors.ts";
import { meterOf, type Reservation, reservationOf } from "./ratelimit.ts";
import { randomHex } from "./random-id.ts";
import type { Target } from "./routing.ts";
import { onClientGone } from "./client-gone.ts";

/** What one choice adds to a streamed chunk. */
export type Delta = {
  text?: string;
  logprobs?: TokenLogprob[];
  tool_calls?: ToolCall[];
  /** Characters of this choice's text sent before this chunk (the legacy logprobs' text_offset). */
  offset?: number;
  /** The opening chunk of a choice (chat's role delta). */
  first?: boolean;
  finish?: FinishReason;
};

export type TextFormat = {
  idPrefix: string;
  /** The non-streaming response body: one result per choice, in order, and their usage together. */
  response(base: Base, results: TextResult[], usage: Usage): unknown;
  /** One streamed chunk for choice `index`. */
  chunk(base: Base, index: number, delta: Delta): unknown;
  /** The usage-only chunk sent before [DONE] when asked for. */
  usageChunk(base: Base, usage: Usage): unknown;
};

export type Base = { id: string; created: number; model: string; version: string };

export type TextRequestContext = {
  /** `queue`: the endpoint's (engines.ts `endpointQueueName`). */
  submit: (submission: Submission, options: { queueWaitMs?: number; queue: string }) => Promise<JobHandle>;
  metrics: GatewayMetrics;
  /** Admission control (src/queue/admission.ts): throws the 429/503 to answer instead of queueing. */
  admit?: (endpoint: EndpointRecord) => Promise<AdmissionLimits>;
  /** Each request's outcome, for the A/B test's per-variant numbers (counted only when `target.abtest`). */
  onOutcome?: (target: Target, outcome: VariantOutcome) => void;
};

export async function serveText(
  c: Context,
  ctx: TextRequestContext,
  format: TextFormat,
  submission: Submission,
  options: { stream: boolean; includeUsage: boolean; label: string; target: Target; n?: number },
): Promise<Response> {
  const startedAt = performance.now();
  const target = options.target;
  // Which version answered, whichever way it was chosen (default, A/B variant, or pinned).
  c.header("x-model-version", submission.version);
  const outcome = (ok: boolean, usage?: Usage) => {
    if (target.abtest) ctx.onOutcome?.(target, { ok, latencyMs: performance.now() - startedAt, promptTokens: usage?.prompt_tokens, completionTokens: usage?.completion_tokens });
  };
  // As the route recorded it for errors, which the gateway's error handler counts (openai.ts).
  const served: Served = { model_name: target.name, version: submission.version };
  const base: Base = {
    id: `${format.idPrefix}${randomHex(12)}`,
    created: Math.floor(Date.now() / 1000),
    model: options.label,
    version: submission.version,
  };
  // The key's rate limits (src/gateway/ratelimit.ts), for the version routing chose, before the queue's own admission.
  const n = options.n ?? 1;
  const meter = meterOf(c);
  await meter?.admit({ model: target.name, version: target.version }, forChoices(reservationOf(submission), n));
  const limits = ctx.admit ? await ctx.admit(target.endpoint) : undefined;
  const queue = endpointQueueName(target.endpoint);
  const handles = await submitChoices(ctx, { ...submission, stream: options.stream }, n, { queueWaitMs: limits?.maxQueueWaitMs, queue });
  const cancelAll = () => Promise.all(handles.map((h) => h.cancel()));
  // A client that goes away cancels its generations on the workers.
  onClientGone(c, () => void cancelAll());

  let firsts: JobEvent[];
  try {
    firsts = await Promise.all(handles.map((h) => nextMeaningful(h.events)));
  } catch (e) {
    await cancelAll();
    if (e instanceof PlatformError && e.code === "queue_timeout") ctx.metrics.rateLimited.inc({ ...served, reason: e.code });
    outcome(false);
    throw e;
  }
  const refused = firsts.find((f) => f.type === "error");
  if (refused?.type === "error") {
    await cancelAll();
    // A replica that held the request without a free sequence past its max queue wait.
    if (refused.error.code === "queue_timeout") ctx.metrics.rateLimited.inc({ ...served, reason: refused.error.code });
    outcome(false);
    throw publicJobError(refused.error);
  }
  // Streamed: the first token's arrival here. Otherwise the worker's report says when it was made.
  const firstTokenSeconds = firsts.some((f) => f.type === "token") ? (performance.now() - startedAt) / 1000 : undefined;

  const finish = (results: TextResult[]): Usage => {
    const e2eSeconds = (performance.now() - startedAt) / 1000;
    const usage = usageOf(results);
    const first = results[0] as TextResult;
    const ttftSeconds = firstTokenSeconds ?? nonStreamingTtft(e2eSeconds, first);
    ctx.metrics.answered(served, "online", submission.kind, { usage, finish_reason: first.finish_reason, e2eSeconds, ttftSeconds, queuedMs: first.queued_ms });
    outcome(true, usage);
    meter?.complete(usage);
    return usage;
  };

  if (!options.stream) {
    const results = firsts.map((f) => {
      if (f.type !== "done" || f.result.type !== "text") throw new PlatformError(500, "internal_error", "worker sent an unexpected result");
      return f.result;
    });
    return c.json(format.response(base, results, finish(results)));
  }

  return streamSSE(c, async (sse) => {
    sse.onAbort(() => void cancelAll());
    const send = (data: unknown) => sse.writeSSE({ data: JSON.stringify(data) });
    const withUsage = (chunk: unknown) => (options.includeUsage ? { ...(chunk as object), usage: null } : chunk);
    const lastToken: (number | undefined)[] = [];
    const streamed: number[] = [];
    const results: TextResult[] = [];
    for (let i = 0; i < n; i++) await send(withUsage(format.chunk(base, i, { first: true })));
    try {
      for await (const { index, event } of mergeEvents(handles.map((h) => h.events), firsts)) {
        if (event.type === "token") {
          const now = performance.now();
          const last = lastToken[index];
          if (last !== undefined) ctx.metrics.interToken.observe({ ...served, source: "online" }, (now - last) / 1000);
          lastToken[index] = now;
          await send(withUsage(format.chunk(base, index, { text: event.text, logprobs: event.logprobs, offset: streamed[index] ?? 0 })));
          streamed[index] = (streamed[index] ?? 0) + event.text.length;
        } else if (event.type === "started") {
          // A second start means the first replica died mid-stream and the job was retried:
          // the client already has a prefix of a different generation, so end with an error.
          throw new PlatformError(502, "replica_lost", "the replica serving this stream stopped; retry the request");
        } else if (event.type === "error") {
          throw publicJobError(event.error);
        } else if (event.type === "done" && event.result.type === "text") {
          const result = event.result;
          results[index] = result;
          // What the engine could only say at the end (a tool call, text it had to parse first) comes whole.
          const unsent = streamed[index] === undefined ? result.text : "";
          if (unsent !== "" || result.tool_calls) {
            await send(withUsage(format.chunk(base, index, { text: unsent || undefined, tool_calls: result.tool_calls, logprobs: streamed[index] === undefined ? result.logprobs : undefined })));
          }
          await send(withUsage(format.chunk(base, index, { finish: result.finish_reason })));
        }
      }
      if (results.filter(Boolean).length !== n) throw new PlatformError(500, "internal_error", "the job ended without a result");
      const usage = finish(results);
      if (options.includeUsage) await send(format.usageChunk(base, usage));
      await sse.writeSSE({ data: "[DONE]" });
    } catch (e) {
      const err = clientError(c, e);
      // After the headers: the error handler never sees this one.
      ctx.metrics.failed(served, "online", submission.kind, err);
      outcome(false);
      meter?.fail();
      await cancelAll();
      await send(envelope(err));
    }
  });
}

/** One job per choice; with a seed, choice i samples with seed + i so the choices differ and each is reproducible. */
async function submitChoices(ctx: TextRequestContext, submission: Submission, n: number, options: { queueWaitMs?: number; queue: string }): Promise<JobHandle[]> {
  const seeded = (i: number): Submission => {
    if (i === 0 || submission.kind === "embedding" || submission.params?.seed === undefined) return submission;
    return { ...submission, params: { ...submission.params, seed: submission.params.seed + i } };
  };
  const settled = await Promise.allSettled(Array.from({ length: n }, (_, i) => ctx.submit(seeded(i), options)));
  const handles = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failure = settled.find((s) => s.status === "rejected");
  if (failure) {
    await Promise.all(handles.map((h) => h.cancel()));
    throw failure.reason;
  }
  return handles;
}

function forChoices(reservation: Reservation, n: number): Reservation {
  return n === 1 || reservation.maxTokens === undefined ? reservation : { ...reservation, maxTokens: reservation.maxTokens * n };
}

/** The prompt is read once whatever the number of choices; completions add up. */
function usageOf(results: TextResult[]): Usage {
  const prompt = results[0]?.usage.prompt_tokens ?? 0;
  const completion = results.reduce((sum, r) => sum + r.usage.completion_tokens, 0);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * The choices' events as they come, each tagged with its choice, starting from each one's first
 * meaningful event (already read), until every choice has ended.
 */
async function* mergeEvents(streams: AsyncGenerator<JobEvent>[], firsts: JobEvent[]): AsyncGenerator<{ index: number; event: JobEvent }> {
  type Next = { index: number; next: IteratorResult<JobEvent> };
  const pending = new Map<number, Promise<Next>>();
  const read = (index: number) => pending.set(index, (streams[index] as AsyncGenerator<JobEvent>).next().then((next) => ({ index, next })));
  for (const [index, event] of firsts.entries()) {
    yield { index, event };
    if (event.type === "token") read(index);
  }
  while (pending.size > 0) {
    const { index, next } = await Promise.race(pending.values());
    pending.delete(index);
    if (next.done) continue;
    yield { index, event: next.value };
    if (next.value.type !== "done" && next.value.type !== "error") read(index);
  }
}

/**
 * Skips `started` events (a retry before any token is invisible to the client); returns the
 * first token, result or error.
 * Reads with next() rather than for-await, which would close the generator on return.
 */
async function nextMeaningful(events: AsyncGenerator<JobEvent>): Promise<JobEvent> {
  for (;;) {
    const next = await events.next();
    if (next.done) throw new PlatformError(500, "internal_error", "the job ended without a result");
    if (next.value.type !== "started") return next.value;
  }
}

export function publicFinishReason(reason: FinishReason): "stop" | "length" | "tool_calls" {
  return reason === "cancelled" ? "stop" : reason;
}
