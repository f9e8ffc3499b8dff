/**
 * Serving one chat job for an API whose stream is typed events rather than chunks: OpenAI's
 * Responses API (routes/responses.ts) and Anthropic's Messages API (routes/anthropic.ts). The
 * job goes through the fabric (serve.ts); the answer comes whole, or as the API's events
 * (its `EventStream`). As chat's streams (serve-text.ts): the headers wait for the first token,
 * so a refusal before generation is an ordinary HTTP error; a failure after it is the API's own
 * error event, and the stream ends; a replica that dies mid-stream is replaced without a gap when
 * its replacement repeats what was sent (stream-replay.ts; docs/fleet.md).
 */
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { PlatformError } from "../contracts/errors.ts";
import type { TextResult } from "../contracts/job.ts";
import type { Submission } from "../queue/dispatcher.ts";
import { clientError } from "./errors.ts";
import type { Target } from "./routing.ts";
import { serve, type ServeContext } from "./serve.ts";
import { mergeEvents, recordAnswer, streamFailure } from "./serve-text.ts";
import { StreamedText } from "./stream-replay.ts";

type Event = { type: string };

/** One stream's events, in its API's words; each is sent as an SSE event named by its `type`. */
export type EventStream = {
  started(): Event[];
  /** A text delta (the first opens the text block). */
  text(delta: string): Event[];
  /** The answer's end; awaited before the last events are sent (a stored response is kept first). */
  finish(result: TextResult): Promise<Event[]>;
  failed(err: PlatformError): Event[];
};

export type EventServing = {
  stream: boolean;
  target: Target;
  /** The whole answer of a request that did not stream. */
  whole: (result: TextResult) => Promise<unknown>;
  /** The stream's events, made once the first token is there. */
  events: () => EventStream;
};

export async function serveEvents(
  c: Context,
  ctx: ServeContext,
  submission: Submission,
  options: EventServing,
): Promise<Response> {
  const serving = await serve(c, ctx, [{ ...submission, stream: options.stream }], { target: options.target });
  const [first] = serving.firsts;

  if (!options.stream) {
    if (first?.type !== "done" || first.result.type !== "text")
      throw new PlatformError(500, "internal_error", "worker sent an unexpected result");
    recordAnswer(serving, [first.result], 1);
    return c.json(await options.whole(first.result));
  }

  const firstTokenSeconds = first?.type === "token" ? serving.elapsed() : undefined;
  return streamSSE(c, async (sse) => {
    sse.onAbort(() => void serving.cancel());
    const send = async (events: Event[]) => {
      for (const event of events) await sse.writeSSE({ event: event.type, data: JSON.stringify(event) });
    };
    const events = options.events();
    const itlLabels = { ...serving.served, source: "online" as const };
    let lastToken: number | undefined;
    // The text across attempts: a replica that dies mid-stream is replaced without a gap.
    const text = new StreamedText();
    await send(events.started());
    try {
      let result: TextResult | undefined;
      for await (const { event } of mergeEvents(serving.events, serving.firsts)) {
        if (event.type === "token") {
          const delta = text.next(event.text, event.logprobs !== undefined);
          if (delta === "") continue;
          const now = performance.now();
          if (lastToken !== undefined) ctx.metrics.interToken.observe(itlLabels, (now - lastToken) / 1000);
          lastToken = now;
          await send(events.text(delta));
        } else if (event.type === "started") {
          text.started(event);
        } else if (event.type === "error") {
          throw streamFailure(event);
        } else if (event.type === "done" && event.result.type === "text") {
          text.ended();
          result = event.result;
        }
      }
      if (!result) throw new PlatformError(500, "internal_error", "the job ended without a result");
      recordAnswer(serving, [result], 1, firstTokenSeconds);
      // What the engine could only say at the end (text it had to parse first) comes whole.
      if (text.length === 0 && result.text !== "") await send(events.text(result.text));
      await send(await events.finish(result));
    } catch (e) {
      const err = clientError(c, e);
      serving.failed(err);
      await send(events.failed(err));
      void serving.cancel().catch(() => undefined);
    }
  });
}
