/**
 * Serving one Responses API request (routes/responses.ts): its chat job through the fabric
 * (serve.ts), then the response whole, or streamed as OpenAI's typed events
 * (contracts/openai/responses-output.ts). As chat's streams (serve-text.ts): the headers wait for
 * the first token, so a refusal before generation is an ordinary HTTP error; a failure after it
 * is a `response.failed` event, and the stream ends.
 */
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { PlatformError } from "../contracts/errors.ts";
import type { TextResult } from "../contracts/job.ts";
import {
  completedResponse,
  type NewId,
  outputItems,
  type ResponseObject,
  ResponseEvents,
  type StreamEvent,
} from "../contracts/openai/responses-output.ts";
import type { Submission } from "../queue/dispatcher.ts";
import { clientError } from "./errors.ts";
import type { Target } from "./routing.ts";
import { serve, type ServeContext } from "./serve.ts";
import { mergeEvents, recordAnswer, streamFailure } from "./serve-text.ts";

export type ResponseServing = {
  stream: boolean;
  target: Target;
  /** The response before generation (responseShell). */
  shell: ResponseObject;
  newId: NewId;
  /** The finished response, before the client has it (storing it): what the client is sent. */
  finished: (response: ResponseObject) => Promise<ResponseObject>;
};

export async function serveResponse(
  c: Context,
  ctx: ServeContext,
  submission: Submission,
  options: ResponseServing,
): Promise<Response> {
  const { shell, newId } = options;
  const serving = await serve(c, ctx, [{ ...submission, stream: options.stream }], { target: options.target });
  const [first] = serving.firsts;

  if (!options.stream) {
    if (first?.type !== "done" || first.result.type !== "text")
      throw new PlatformError(500, "internal_error", "worker sent an unexpected result");
    const result = first.result;
    recordAnswer(serving, [result], 1);
    const response = completedResponse(shell, outputItems(result, newId), result);
    return c.json(await options.finished(response));
  }

  const firstTokenSeconds = first?.type === "token" ? serving.elapsed() : undefined;
  return streamSSE(c, async (sse) => {
    sse.onAbort(() => void serving.cancel());
    const send = async (events: StreamEvent[]) => {
      for (const event of events) await sse.writeSSE({ event: event.type, data: JSON.stringify(event) });
    };
    const events = new ResponseEvents(newId);
    const itlLabels = { ...serving.served, source: "online" as const };
    let lastToken: number | undefined;
    let streamed = false;
    await send(events.started(shell));
    try {
      let result: TextResult | undefined;
      for await (const { event } of mergeEvents(serving.events, serving.firsts)) {
        if (event.type === "token") {
          const now = performance.now();
          if (lastToken !== undefined) ctx.metrics.interToken.observe(itlLabels, (now - lastToken) / 1000);
          lastToken = now;
          streamed = true;
          await send(events.text(event.text));
        } else if (event.type === "started" || event.type === "error") {
          throw streamFailure(event);
        } else if (event.type === "done" && event.result.type === "text") {
          result = event.result;
        }
      }
      if (!result) throw new PlatformError(500, "internal_error", "the job ended without a result");
      recordAnswer(serving, [result], 1, firstTokenSeconds);
      // What the engine could only say at the end (text it had to parse first) comes whole.
      if (!streamed && result.text !== "") await send(events.text(result.text));
      const finished = events.finish(shell, result);
      const response = await options.finished(finished.response);
      const last = finished.events.pop() as StreamEvent;
      await send([...finished.events, { ...last, response }]);
    } catch (e) {
      const err = clientError(c, e);
      serving.failed(err);
      await send([events.failed(shell, { code: err.code, message: err.message })]);
      void serving.cancel().catch(() => undefined);
    }
  });
}
