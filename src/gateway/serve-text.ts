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
import { randomBytes } from "node:crypto";
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import type { FinishReason, JobEvent, TextResult, Usage } from "../contracts/job.ts";
import type { EndpointRecord } from "../contracts/records.ts";
import type { VariantOutcome } from "../control/abtests.ts";
import { PlatformError, publicJobError } from "../errors.ts";
import type { AdmissionLimits } from "../queue/admission.ts";
import type { JobHandle, Submission } from "../queue/dispatcher.ts";
import { type GatewayMetrics, nonStreamingTtft, type Served } from "../telemetry/metrics.ts";
import { clientError, envelope } from "./errors.ts";
import { meterOf, reservationOf } from "./ratelimit.ts";
import type { Target } from "./routing.ts";

export type TextFormat = {
  idPrefix: string;
  /** The non-streaming response body. */
  response(base: Base, result: TextResult): unknown;
  /** One streamed chunk: a text delta, the opening (role) chunk, or the closing one with a finish reason. */
  chunk(base: Base, delta: { text?: string; first?: boolean; finish?: FinishReason }): unknown;
  /** The usage-only chunk sent before [DONE] when asked for. */
  usageChunk(base: Base, usage: Usage): unknown;
};

export type Base = { id: string; created: number; model: string; version: string };

export type TextRequestContext = {
  submit: (submission: Submission, options?: { queueWaitMs?: number }) => Promise<JobHandle>;
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
  options: { stream: boolean; includeUsage: boolean; label: string; target?: Target },
): Promise<Response> {
  const startedAt = performance.now();
  const target = options.target;
  // Which version answered, whichever way it was chosen (default, A/B variant, or pinned).
  c.header("x-model-version", submission.version);
  const outcome = (ok: boolean, usage?: Usage) => {
    if (target?.abtest) ctx.onOutcome?.(target, { ok, latencyMs: performance.now() - startedAt, promptTokens: usage?.prompt_tokens, completionTokens: usage?.completion_tokens });
  };
  // As the route recorded it for errors, which the gateway's error handler counts (openai.ts).
  const served: Served = { model_name: target?.name ?? options.label, version: submission.version };
  const base: Base = {
    id: `${format.idPrefix}${randomBytes(12).toString("hex")}`,
    created: Math.floor(Date.now() / 1000),
    model: options.label,
    version: submission.version,
  };
  // The key's rate limits (src/gateway/ratelimit.ts), for the version routing chose, before the queue's own admission.
  const meter = meterOf(c);
  await meter?.admit({ model: target?.name ?? options.label, version: target?.version ?? submission.version }, reservationOf(submission));
  const limits = target && ctx.admit ? await ctx.admit(target.endpoint) : undefined;
  const handle = await ctx.submit({ ...submission, stream: options.stream }, { queueWaitMs: limits?.maxQueueWaitMs });
  const events = handle.events;
  // A client that goes away cancels its generation on the worker.
  c.req.raw.signal.addEventListener("abort", () => void handle.cancel(), { once: true });

  let first: JobEvent;
  try {
    first = await nextMeaningful(events);
  } catch (e) {
    await handle.cancel();
    if (e instanceof PlatformError && e.code === "queue_timeout") ctx.metrics.rateLimited.inc({ ...served, reason: e.code });
    outcome(false);
    throw e;
  }
  if (first.type === "error") {
    // A replica that held the request without a free sequence past its max queue wait.
    if (first.error.code === "queue_timeout") ctx.metrics.rateLimited.inc({ ...served, reason: first.error.code });
    outcome(false);
    throw publicJobError(first.error);
  }
  // Streamed: the first token's arrival here. Otherwise the worker's report says when it was made.
  const firstTokenSeconds = first.type === "token" ? (performance.now() - startedAt) / 1000 : undefined;

  const finish = (result: TextResult) => {
    const e2eSeconds = (performance.now() - startedAt) / 1000;
    const ttftSeconds = firstTokenSeconds ?? nonStreamingTtft(e2eSeconds, result);
    ctx.metrics.answered(served, "online", submission.kind, { usage: result.usage, finish_reason: result.finish_reason, e2eSeconds, ttftSeconds, queuedMs: result.queued_ms });
    outcome(true, result.usage);
    meter?.complete(result.usage);
  };

  if (!options.stream) {
    if (first.type !== "done" || first.result.type !== "text") throw new PlatformError(500, "internal_error", "worker sent an unexpected result");
    finish(first.result);
    return c.json(format.response(base, first.result));
  }

  return streamSSE(c, async (sse) => {
    sse.onAbort(() => void handle.cancel());
    const send = (data: unknown) => sse.writeSSE({ data: JSON.stringify(data) });
    const withUsage = (chunk: unknown) => (options.includeUsage ? { ...(chunk as object), usage: null } : chunk);
    let lastToken: number | undefined;
    await send(withUsage(format.chunk(base, { first: true })));
    let event: JobEvent | undefined = first;
    try {
      while (event) {
        if (event.type === "token") {
          const now = performance.now();
          if (lastToken !== undefined) ctx.metrics.interToken.observe({ ...served, source: "online" }, (now - lastToken) / 1000);
          lastToken = now;
          await send(withUsage(format.chunk(base, { text: event.text })));
        } else if (event.type === "started") {
          // A second start means the first replica died mid-stream and the job was retried:
          // the client already has a prefix of a different generation, so end with an error.
          throw new PlatformError(502, "replica_lost", "the replica serving this stream stopped; retry the request");
        } else if (event.type === "error") {
          throw publicJobError(event.error);
        } else if (event.type === "done" && event.result.type === "text") {
          finish(event.result);
          await send(withUsage(format.chunk(base, { finish: event.result.finish_reason })));
          if (options.includeUsage) await send(format.usageChunk(base, event.result.usage));
          await sse.writeSSE({ data: "[DONE]" });
          return;
        }
        const next = await events.next();
        event = next.done ? undefined : next.value;
      }
    } catch (e) {
      const err = clientError(c, e);
      // After the headers: the error handler never sees this one.
      ctx.metrics.failed(served, "online", submission.kind, err);
      outcome(false);
      meter?.fail();
      await handle.cancel();
      await send(envelope(err));
    }
  });
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

export function publicFinishReason(reason: FinishReason): "stop" | "length" {
  return reason === "length" ? "length" : "stop";
}
