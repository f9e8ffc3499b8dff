/**
 * Anthropic's Messages API under /v1 (the protocol: src/contracts/anthropic.ts): POST /messages
 * becomes the chat job /v1/chat/completions makes, through the same routing, limits, tool calls,
 * usage and metrics; POST /messages/count_tokens counts the prompt as the model's tokenizer and
 * chat template read it. Errors on these routes are in Anthropic's envelope (errors.ts).
 */
import { type Context, Hono } from "hono";
import {
  blockStop,
  CountTokensRequest,
  type MessagesRequest,
  MessagesRequest as MessagesBody,
  messageEnd,
  messageResponse,
  messageStart,
  textDelta,
  textStart,
  toChatMessages,
  toChatToolChoice,
  toChatTools,
  toolUseEvents,
  toParams,
  anthropicError,
} from "../../contracts/anthropic.ts";
import type { SamplingParams } from "../../contracts/job.ts";
import { checkSchemaLimits, type SchemaLimits } from "../../contracts/schema-limits.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";
import { checkPromptBound } from "../input-bounds.ts";
import { randomHex } from "../random-id.ts";
import { type Router, requireTask } from "../routing.ts";
import type { ServeContext } from "../serve.ts";
import { serveEvents } from "../serve-events.ts";
import { chatSubmission, routeModel } from "./openai.ts";
import { tokenizeJob } from "./tokenize.ts";

export function anthropicRoutes(router: Router, ctx: ServeContext, schemaLimits: SchemaLimits) {
  const app = new Hono<GatewayEnv>();

  /** The request as a chat job for its model: checked against the schema limits and the model's window. */
  const chatJob = async (
    c: Context<GatewayEnv>,
    body: Pick<MessagesRequest, "model" | "messages" | "system" | "tools" | "tool_choice">,
    params: SamplingParams,
  ) => {
    const tools = toChatTools(body.tools);
    checkSchemaLimits({ tools }, schemaLimits);
    const messages = toChatMessages(body);
    const t = await routeModel(router, ctx, c, body.model);
    requireTask(t, "generate");
    checkPromptBound(
      t.bound,
      messages.map((m) => m.content),
      params.max_tokens,
      "messages",
    );
    const submission = chatSubmission(c, t, messages, params, { tools, ...toChatToolChoice(body.tool_choice) });
    return { target: t, submission, messages, tools };
  };

  app.post("/messages", async (c) => {
    const body = await parseBody(c, MessagesBody);
    const { target, submission } = await chatJob(c, body, toParams(body));
    const head = { id: `msg_${randomHex(12)}`, model: body.model };
    return serveEvents(c, ctx, submission, {
      stream: body.stream ?? false,
      target,
      whole: async (result) => messageResponse(head, result),
      events: () => {
        let open: number | undefined;
        return {
          started: () => [messageStart(head), { type: "ping" }],
          text: (delta) => {
            const opening = open === undefined ? [textStart(0)] : [];
            open = 0;
            return delta === "" ? opening : [...opening, textDelta(0, delta)];
          },
          finish: async (result) => {
            const calls = result.tool_calls ?? [];
            const text = open === undefined && calls.length === 0 ? [textStart(0), blockStop(0)] : [];
            const closing = open === undefined ? [] : [blockStop(open)];
            const first = open === undefined && calls.length > 0 ? 0 : 1;
            return [
              ...closing,
              ...text,
              ...calls.flatMap((call, i) => toolUseEvents(first + i, call)),
              ...messageEnd(result),
            ];
          },
          failed: (err) => [anthropicError(err)],
        };
      },
    });
  });

  // Counted as a replica reads it: the chat job's prompt, rendered by the model's own template (a tokenize job).
  app.post("/messages/count_tokens", async (c) => {
    const body = await parseBody(c, CountTokensRequest);
    const { target, messages, tools } = await chatJob(c, body, {});
    const counted = body.tool_choice?.type === "none" ? undefined : tools;
    const result = await tokenizeJob(ctx, c, target, { messages, ...(counted ? { tools: counted } : {}) });
    return c.json({ input_tokens: result.tokens.length });
  });

  return app;
}
