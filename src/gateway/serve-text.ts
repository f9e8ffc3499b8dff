/**
 * Serving one text request (chat, completion or generate): through the fabric (serve.ts), then
 * either the whole answer or its tokens relayed as SSE, in the route's format
 * (src/contracts/openai/).
 *
 * Streaming: headers are sent only once the first token (or the result)
 * arrives, so failures before generation (context too long, no such model
 * version on the worker) come back as ordinary HTTP errors. After that, an
 * error becomes one `data: {"error": ...}` event and the stream ends without
 * `[DONE]` (documented in docs/http-api.md, "Streaming").
 */
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { type ErrorEnvelope, errorEnvelope, PlatformError, publicJobError } from "../contracts/errors.ts";
import type { JobEvent, TextResult, Usage } from "../contracts/job.ts";
import type { ResponseBase, StreamChunk, TextFormat } from "../contracts/openai/common.ts";
import type { Submission } from "../queue/dispatcher.ts";
import { nonStreamingTtft } from "../telemetry/request-metrics.ts";
import { clientError } from "./errors.ts";
import { randomHex } from "./random-id.ts";
import type { Target } from "./routing.ts";
import { type Serving, serve, type ServeContext } from "./serve.ts";
import { StreamedText } from "./stream-replay.ts";

/**
 * `submissions`: one per prompt (several only on /v1/completions), each answered with `n` choices,
 * numbered prompt by prompt (serve.ts); `paths` names the prompts in errors.
 */
export async function serveText<R, C extends StreamChunk>(
  c: Context,
  ctx: ServeContext,
  format: TextFormat<R, C>,
  submissions: Submission[],
  options: { stream: boolean; includeUsage: boolean; label: string; target: Target; n?: number; paths?: string[] },
): Promise<Response> {
  const base: ResponseBase = {
    id: `${format.idPrefix}${randomHex(12)}`,
    created: Math.floor(Date.now() / 1000),
    model: options.label,
    version: (submissions[0] as Submission).version,
  };
  const n = options.n ?? 1;
  const serving = await serve(
    c,
    ctx,
    submissions.map((s) => ({ ...s, stream: options.stream })),
    { target: options.target, n, paths: options.paths },
  );
  const choices = serving.firsts.length;
  const { firsts, served } = serving;
  // Streamed: the first token's arrival here. Otherwise the worker's report says when it was made.
  const firstTokenSeconds = firsts.some((f) => f.type === "token") ? serving.elapsed() : undefined;

  const finish = (results: TextResult[]): Usage => recordAnswer(serving, results, n, firstTokenSeconds);

  if (!options.stream) {
    const results = firsts.map((f) => {
      if (f.type !== "done" || f.result.type !== "text")
        throw new PlatformError(500, "internal_error", "worker sent an unexpected result");
      return f.result;
    });
    return c.json(format.response(base, results, finish(results)));
  }

  return streamSSE(c, async (sse) => {
    sse.onAbort(() => void serving.cancel());
    const send = (data: C | ErrorEnvelope) => sse.writeSSE({ data: JSON.stringify(data) });
    const withUsage = (chunk: C): C => (options.includeUsage ? { ...chunk, usage: null } : chunk);
    const lastToken: (number | undefined)[] = [];
    // One labels object for the stream: each text delta observes the inter-token gap with it.
    const itlLabels = { ...served, source: "online" as const };
    const results: TextResult[] = [];
    // Each choice's text across attempts: a replica that dies mid-stream is replaced without a gap.
    const texts = Array.from({ length: choices }, () => new StreamedText());
    for (let i = 0; i < choices; i++) await send(withUsage(format.chunk(base, i, { first: true })));
    try {
      for await (const { index, event } of mergeEvents(serving.events, firsts)) {
        if (event.type === "token") {
          const streamed = texts[index] as StreamedText;
          const text = streamed.next(event.text, event.logprobs !== undefined);
          if (text === "") continue;
          const now = performance.now();
          const last = lastToken[index];
          if (last !== undefined) ctx.metrics.interToken.observe(itlLabels, (now - last) / 1000);
          lastToken[index] = now;
          await send(
            withUsage(
              format.chunk(base, index, { text, logprobs: event.logprobs, offset: streamed.length - text.length }),
            ),
          );
        } else if (event.type === "started") {
          texts[index]?.started(event);
        } else if (event.type === "error") {
          throw streamFailure(event);
        } else if (event.type === "done" && event.result.type === "text") {
          texts[index]?.ended();
          const result = event.result;
          results[index] = result;
          // What the engine could only say at the end (a tool call, text it had to parse first) comes whole.
          const nothingSent = texts[index]?.length === 0;
          const unsent = nothingSent ? result.text : "";
          if (unsent !== "" || result.tool_calls) {
            await send(
              withUsage(
                format.chunk(base, index, {
                  text: unsent || undefined,
                  tool_calls: result.tool_calls,
                  logprobs: nothingSent ? result.logprobs : undefined,
                }),
              ),
            );
          }
          await send(withUsage(format.chunk(base, index, { finish: result.finish_reason })));
        }
      }
      if (results.filter(Boolean).length !== choices)
        throw new PlatformError(500, "internal_error", "the job ended without a result");
      const usage = finish(results);
      if (options.includeUsage) await send(format.usageChunk(base, usage));
      await sse.writeSSE({ data: "[DONE]" });
    } catch (e) {
      const err = clientError(c, e);
      // After the headers: the error handler never sees this one.
      serving.failed(err);
      await send(errorEnvelope(err));
      // Not awaited: with Redis away the cancellation waits for it, and the client must not.
      void serving.cancel().catch(() => undefined);
    }
  });
}

/** A stream's job that failed: its error, as the client may see it. */
export function streamFailure(event: Extract<JobEvent, { type: "error" }>): PlatformError {
  return publicJobError(event.error);
}

/**
 * The request's answer recorded (metrics, A/B outcome, usage: serve.ts) once every choice has its
 * result; `firstTokenSeconds` where the first token was streamed. Its usage, all choices together.
 */
export function recordAnswer(serving: Serving, results: TextResult[], n: number, firstTokenSeconds?: number): Usage {
  const e2eSeconds = serving.elapsed();
  const usage = usageOf(results, n);
  const first = results[0] as TextResult;
  const ttftSeconds = firstTokenSeconds ?? nonStreamingTtft(e2eSeconds, first);
  serving.answered({ usage, finish_reason: first.finish_reason, e2eSeconds, ttftSeconds, queuedMs: first.queued_ms });
  return usage;
}

/**
 * Each prompt is read once whatever the number of choices (its `n` choices are together); completions
 * add up. Cached prompt tokens are reported (OpenAI's `prompt_tokens_details`) where the engine counts them.
 */
function usageOf(results: TextResult[], n: number): Usage {
  const firsts = results.filter((_, i) => i % n === 0);
  const prompt = firsts.reduce((sum, r) => sum + r.usage.prompt_tokens, 0);
  const completion = results.reduce((sum, r) => sum + r.usage.completion_tokens, 0);
  const counted = firsts.filter((r) => r.usage.prompt_tokens_details !== undefined);
  const cached = counted.reduce((sum, r) => sum + (r.usage.prompt_tokens_details?.cached_tokens ?? 0), 0);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    ...(counted.length > 0 ? { prompt_tokens_details: { cached_tokens: cached } } : {}),
  };
}

/**
 * The choices' events as they come, each tagged with its choice, starting from each one's first
 * meaningful event (already read), until every choice has ended.
 */
export async function* mergeEvents(
  streams: AsyncGenerator<JobEvent>[],
  firsts: JobEvent[],
): AsyncGenerator<{ index: number; event: JobEvent }> {
  type Next = { index: number; next: IteratorResult<JobEvent> };
  const pending = new Map<number, Promise<Next>>();
  const read = (index: number) =>
    pending.set(
      index,
      (streams[index] as AsyncGenerator<JobEvent>).next().then((next) => ({ index, next })),
    );
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
