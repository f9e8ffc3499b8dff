/**
 * Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), typed both ways, as
 * @anthropic-ai/sdk's `MessageCreateParams`, `Message` and `RawMessageStreamEvent` have it: the
 * body, what it becomes on the queue (the chat job /v1/chat/completions makes: job.ts, so workers
 * serve it unchanged), the message answered, its stream events, and Anthropic's error envelope.
 *
 * As Anthropic's API does, a field it does not know is refused (400, naming it), and so is one
 * that would change the answer where this server cannot honour it (images, documents,
 * thinking, server tools). docs/http-api.md ("Messages API") lists them.
 */
import { z } from "zod";
import type { PlatformError } from "./errors.ts";
import {
  type ChatMessage,
  type FinishReason,
  type FunctionTool,
  JsonSchema,
  MAX_TOOLS,
  TOO_MANY_TOOLS,
  SamplingParams,
  type SamplingParams as Params,
  type ToolCall,
  type ToolChoice,
  type Usage,
} from "./job.ts";

/** Blocks of one request's messages and system, all together: bounded like every input. */
export const MAX_BLOCKS = 4096;

const DOC = "docs/http-api.md, Messages API";

/** A body with exactly these fields, as Anthropic's API takes one: any other is refused by name. */
function strictBody<T extends z.ZodRawShape>(shape: T) {
  const known = new Set(Object.keys(shape));
  return z
    .looseObject(shape)
    .superRefine((body, ctx) => {
      for (const key of Object.keys(body)) {
        if (known.has(key)) continue;
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `is not supported by this server; remove it (${DOC} lists the supported fields)`,
        });
      }
    })
    .transform((body) => body as z.output<z.ZodObject<T>>);
}

/** Prompt caching is the engine's own (its prompt cache): the marks are accepted and change nothing. */
const cacheControl = z.object({ type: z.literal("ephemeral"), ttl: z.enum(["5m", "1h"]).optional() }).nullish();

const UNSUPPORTED_BLOCK =
  "images, documents, thinking and server tool blocks are not supported by this server's text models; send text, tool_use and tool_result blocks";

const blockError = (issue: { input?: unknown }) => {
  const type = (issue.input as { type?: unknown } | undefined)?.type;
  return typeof type === "string"
    ? `blocks of type ${JSON.stringify(type)}: ${UNSUPPORTED_BLOCK}`
    : 'expected a content block with a "type"';
};

const TextBlock = z.object({
  type: z.literal("text"),
  text: z.string(),
  cache_control: cacheControl,
  citations: z.array(z.unknown()).max(0, "citations are not supported").nullish(),
});
const ToolUseBlock = z.object({
  type: z.literal("tool_use"),
  id: z.string().min(1).max(128),
  name: z.string().min(1).max(64),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl,
});
const ToolResultBlock = z.object({
  type: z.literal("tool_result"),
  tool_use_id: z.string().min(1).max(128),
  content: z
    .union([z.string(), z.array(z.discriminatedUnion("type", [TextBlock], { error: blockError })).max(MAX_BLOCKS)])
    .optional(),
  is_error: z.boolean().optional(),
  cache_control: cacheControl,
});
const Block = z.discriminatedUnion("type", [TextBlock, ToolUseBlock, ToolResultBlock], { error: blockError });

const Message = z.object({
  role: z.enum(["user", "assistant"], {
    error: () => 'expected "user" or "assistant" (the system prompt is `system`)',
  }),
  content: z.union([z.string(), z.array(Block).max(MAX_BLOCKS)]),
});

const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "a tool name is 1 to 64 letters, digits, '_' or '-'");

/** A client tool; Anthropic's server tools (web search, bash, code execution...) carry a versioned `type`. */
const Tool = z
  .object({
    type: z
      .literal("custom", {
        error: (issue) =>
          `${String(issue.input)} is one of Anthropic's server tools, which run on Anthropic's servers; this server runs client tools only (name, description, input_schema)`,
      })
      .optional(),
    name: toolName,
    description: z.string().max(4096).optional(),
    input_schema: JsonSchema,
    cache_control: cacheControl,
  })
  .superRefine((tool, ctx) => {
    if (tool.input_schema.type !== "object")
      ctx.addIssue({ code: "custom", path: ["input_schema", "type"], message: 'expected "object"' });
  });

const ToolChoiceBody = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional() }),
    z.object({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional() }),
    z.object({
      type: z.literal("tool"),
      name: z.string().min(1).max(64),
      disable_parallel_tool_use: z.boolean().optional(),
    }),
    z.object({ type: z.literal("none") }),
  ],
  { error: () => 'expected {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}' },
);

const System = z.union([z.string(), z.array(TextBlock).max(MAX_BLOCKS)]);
const bounds = SamplingParams.shape;

/** What count_tokens and messages share: the prompt. */
const promptShape = {
  model: z.string().min(1),
  messages: z.array(Message).min(1, "messages must contain at least one message").max(MAX_BLOCKS),
  system: System.optional(),
  tools: z.array(Tool).max(MAX_TOOLS, TOO_MANY_TOOLS).optional(),
  tool_choice: ToolChoiceBody.optional(),
};

function checkToolChoice(
  body: { tool_choice?: z.infer<typeof ToolChoiceBody>; tools?: { name: string }[] },
  ctx: z.RefinementCtx,
) {
  const choice = body.tool_choice;
  if ((choice?.type === "any" || choice?.type === "tool") && !body.tools?.length)
    ctx.addIssue({ code: "custom", path: ["tool_choice"], message: "needs tools" });
  if (choice?.type === "tool" && body.tools && !body.tools.some((t) => t.name === choice.name))
    ctx.addIssue({
      code: "custom",
      path: ["tool_choice", "name"],
      message: `names tool "${choice.name}", which is not among the tools`,
    });
}

export const MessagesRequest = strictBody({
  ...promptShape,
  max_tokens: z
    .number({ error: () => "is required: the most tokens to generate (an integer of 1 or more)" })
    .int()
    .positive(),
  // Anthropic's temperature runs from 0 to 1.
  temperature: z.number().min(0).max(1).optional(),
  top_p: bounds.top_p,
  top_k: z.number().int().positive().optional(),
  stop_sequences: bounds.stop,
  metadata: z.object({ user_id: z.string().max(256).nullish() }).optional(),
  stream: z.boolean().optional(),
  service_tier: z.enum(["auto", "standard_only"]).optional(),
  thinking: z
    .object({
      type: z.literal("disabled", { error: () => "thinking is not supported; send disabled or leave it out" }),
    })
    .optional(),
}).superRefine(checkToolChoice);
export type MessagesRequest = z.infer<typeof MessagesRequest>;

export const CountTokensRequest = strictBody(promptShape).superRefine(checkToolChoice);
export type CountTokensRequest = z.infer<typeof CountTokensRequest>;

// What the request becomes on the queue.

type Prompt = Pick<MessagesRequest, "messages" | "system">;

const textOf = (content: string | { text: string }[] | undefined) =>
  typeof content === "string" ? content : (content ?? []).map((b) => b.text).join("");

/**
 * The chat messages: `system` first; a user turn's tool_result blocks become tool messages (before
 * its text, as they answer the turn before); an assistant turn's tool_use blocks its tool calls.
 */
export function toChatMessages(prompt: Prompt): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const system = textOf(prompt.system);
  if (system) messages.push({ role: "system", content: system });
  for (const m of prompt.messages) {
    const blocks = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
    const text = blocks.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
    if (m.role === "assistant") {
      const calls: ToolCall[] = blocks.flatMap((b) =>
        b.type === "tool_use"
          ? [{ id: b.id, type: "function" as const, function: { name: b.name, arguments: JSON.stringify(b.input) } }]
          : [],
      );
      messages.push({ role: "assistant", content: text, ...(calls.length ? { tool_calls: calls } : {}) });
      continue;
    }
    for (const b of blocks)
      if (b.type === "tool_result")
        messages.push({
          role: "tool",
          content: (b.is_error ? "error: " : "") + textOf(b.content),
          tool_call_id: b.tool_use_id,
        });
    if (text !== "" || !blocks.some((b) => b.type === "tool_result")) messages.push({ role: "user", content: text });
  }
  return messages;
}

export function toChatTools(tools: MessagesRequest["tools"]): FunctionTool[] | undefined {
  if (!tools?.length) return undefined;
  return tools.map((t) => ({
    type: "function",
    function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.input_schema },
  }));
}

export function toChatToolChoice(choice: MessagesRequest["tool_choice"]): {
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
} {
  if (!choice) return {};
  const parallel =
    "disable_parallel_tool_use" in choice && choice.disable_parallel_tool_use ? { parallel_tool_calls: false } : {};
  if (choice.type === "tool")
    return { tool_choice: { type: "function", function: { name: choice.name } }, ...parallel };
  return { tool_choice: choice.type === "any" ? "required" : choice.type, ...parallel };
}

export function toParams(body: MessagesRequest): Params {
  const params: Params = {
    max_tokens: body.max_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    stop: body.stop_sequences?.length ? body.stop_sequences : undefined,
  };
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) as Params;
}

// What is answered.

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";
type TextOut = { type: "text"; text: string };
type ToolUseOut = { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };
export type ContentBlock = TextOut | ToolUseOut;
export type MessageUsage = {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
};
export type MessageResponse = {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: ContentBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: MessageUsage;
};

/** How the answer ended: a job that stopped at one of the caller's `stop_sequences` says which. */
export function stopReason(finish: FinishReason, stopSequence: string | undefined): StopReason {
  if (finish === "length") return "max_tokens";
  if (finish === "tool_calls") return "tool_use";
  return stopSequence === undefined ? "end_turn" : "stop_sequence";
}

/** What a finished job says of its end, in Anthropic's two fields. */
type Ending = { finish_reason: FinishReason; stop_sequence?: string };
const ending = (answer: Ending) => ({
  stop_reason: stopReason(answer.finish_reason, answer.stop_sequence),
  stop_sequence: answer.finish_reason === "stop" ? (answer.stop_sequence ?? null) : null,
});

/** `cache_read_input_tokens`: the prompt tokens a replica found in its cache, where its result reports them. */
export function messageUsage(usage: Usage | undefined): MessageUsage {
  const cached = (usage as { prompt_tokens_details?: { cached_tokens?: number } } | undefined)?.prompt_tokens_details
    ?.cached_tokens;
  return {
    input_tokens: usage?.prompt_tokens ?? 0,
    output_tokens: usage?.completion_tokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached ?? 0,
  };
}

/** A call's arguments as the parsed `input` Anthropic sends; a call cut short (max_tokens) as far as it parses: {}. */
export function toolInput(args: string): Record<string, unknown> {
  try {
    const value = JSON.parse(args) as unknown;
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export function contentBlocks(text: string, calls: ToolCall[] | undefined): ContentBlock[] {
  return [
    ...(text !== "" || !calls?.length ? [{ type: "text" as const, text }] : []),
    ...(calls ?? []).map((c) => ({
      type: "tool_use" as const,
      id: c.id,
      name: c.function.name,
      input: toolInput(c.function.arguments),
    })),
  ];
}

export function messageResponse(
  head: { id: string; model: string },
  answer: Ending & { text: string; tool_calls?: ToolCall[]; usage: Usage },
): MessageResponse {
  return {
    id: head.id,
    type: "message",
    role: "assistant",
    model: head.model,
    content: contentBlocks(answer.text, answer.tool_calls),
    ...ending(answer),
    usage: messageUsage(answer.usage),
  };
}

/** One stream event: its SSE `event` name is its `type`. */
export type MessageStreamEvent = { type: string } & Record<string, unknown>;

export function messageStart(head: { id: string; model: string }): MessageStreamEvent {
  return {
    type: "message_start",
    message: {
      ...messageResponse(head, { text: "", finish_reason: "stop", usage: noUsage }),
      content: [],
      stop_reason: null,
    },
  };
}
const noUsage: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };

export const textStart = (index: number): MessageStreamEvent => ({
  type: "content_block_start",
  index,
  content_block: { type: "text", text: "" },
});
export const textDelta = (index: number, text: string): MessageStreamEvent => ({
  type: "content_block_delta",
  index,
  delta: { type: "text_delta", text },
});
export const blockStop = (index: number): MessageStreamEvent => ({ type: "content_block_stop", index });

/** A tool call, streamed whole: the engine parses a call before it says it. */
export function toolUseEvents(index: number, call: ToolCall): MessageStreamEvent[] {
  return [
    {
      type: "content_block_start",
      index,
      content_block: { type: "tool_use", id: call.id, name: call.function.name, input: {} },
    },
    { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: call.function.arguments } },
    blockStop(index),
  ];
}

/** The end: how it stopped and the usage, whole-message totals (the SDK reads input_tokens from here too). */
export function messageEnd(answer: Ending & { usage: Usage }): MessageStreamEvent[] {
  return [
    {
      type: "message_delta",
      delta: ending(answer),
      usage: messageUsage(answer.usage),
    },
    { type: "message_stop" },
  ];
}

// Errors, in Anthropic's envelope, with the statuses its SDK maps to its error classes.

export type AnthropicErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "request_too_large"
  | "rate_limit_error"
  | "api_error"
  | "overloaded_error";

export type AnthropicError = { type: "error"; error: { type: AnthropicErrorType; message: string } };

/** The status Anthropic answers with: overload (the platform's 503s: no capacity, Redis away) is its 529. */
export function anthropicStatus(err: PlatformError): number {
  return err.status === 503 ? 529 : err.status;
}

export function anthropicError(err: PlatformError): AnthropicError {
  const status = anthropicStatus(err);
  const type: AnthropicErrorType =
    status === 401
      ? "authentication_error"
      : status === 403
        ? "permission_error"
        : status === 404
          ? "not_found_error"
          : status === 413
            ? "request_too_large"
            : status === 429
              ? "rate_limit_error"
              : status === 529
                ? "overloaded_error"
                : status >= 500
                  ? "api_error"
                  : "invalid_request_error";
  // Anthropic's envelope has no `param`: the message names the field, as every platform message does.
  const named = err.param && !err.message.startsWith(err.param) ? `${err.param}: ${err.message}` : err.message;
  return { type: "error", error: { type, message: named } };
}

/** The routes answered in this envelope. */
export const isMessagesPath = (path: string) => /^\/v1\/messages(\/|$)/.test(path);
