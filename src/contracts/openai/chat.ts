/** OpenAI's chat completions: the request, what it becomes on the queue, the response and its stream chunks. */
import { z } from "zod";
import {
  ChatMessage,
  FunctionTool,
  MAX_TOOLS,
  TOO_MANY_TOOLS,
  type TokenLogprob,
  type ToolCall,
  ToolChoice,
  type Usage,
} from "../job.ts";
import {
  bounds,
  generatedTokens,
  type Head,
  openAiBody,
  type PublicFinishReason,
  publicFinishReason,
  sampling,
  type StreamChunk,
  type TextFormat,
} from "./common.ts";

const contentPart = z.object({ type: z.literal("text"), text: z.string() });
const content = z.union([z.string(), z.array(contentPart), z.null()]).optional();

export const ChatRequestMessage = z.discriminatedUnion("role", [
  // "developer" is OpenAI's newer name for "system".
  z.object({ role: z.enum(["system", "developer", "user"]), content, name: z.string().optional() }),
  z.object({
    role: z.literal("assistant"),
    content,
    name: z.string().optional(),
    tool_calls: ChatMessage.shape.tool_calls.unwrap().nullish(),
  }),
  z.object({
    role: z.literal("tool"),
    content,
    tool_call_id: ChatMessage.shape.tool_call_id.unwrap().min(1, "a tool message names the call it answers"),
  }),
]);

export const ChatCompletionRequest = openAiBody({
  model: z.string().min(1),
  messages: z.array(ChatRequestMessage).min(1, "messages must contain at least one message"),
  max_completion_tokens: generatedTokens.nullish(),
  logprobs: z.nullable(bounds.logprobs),
  top_logprobs: z.nullable(bounds.top_logprobs),
  tools: z.array(FunctionTool).max(MAX_TOOLS, TOO_MANY_TOOLS).nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  ...sampling,
}).superRefine((body, ctx) => {
  if (body.top_logprobs && !body.logprobs)
    ctx.addIssue({ code: "custom", path: ["top_logprobs"], message: "needs logprobs: true" });
  const choice = body.tool_choice;
  if (!choice) return;
  if (choice !== "none" && !body.tools?.length)
    ctx.addIssue({ code: "custom", path: ["tool_choice"], message: "needs tools" });
  if (typeof choice === "object" && body.tools && !body.tools.some((t) => t.function.name === choice.function.name)) {
    ctx.addIssue({
      code: "custom",
      path: ["tool_choice"],
      message: `names function "${choice.function.name}", which is not among the tools`,
    });
  }
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;
export function toMessages(messages: ChatCompletionRequest["messages"]): ChatMessage[] {
  return messages.map((m) => {
    const text = typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text).join("");
    if (m.role === "tool") return { role: "tool", content: text, tool_call_id: m.tool_call_id };
    if (m.role === "assistant" && m.tool_calls?.length)
      return { role: "assistant", content: text, tool_calls: m.tool_calls };
    return { role: m.role === "developer" ? "system" : m.role, content: text };
  });
}

type ChatLogprobs = { content: TokenLogprob[] };
/** An answer that only called tools has null content, as OpenAI sends it. */
type AssistantMessage = { role: "assistant"; content: string | null; tool_calls?: ToolCall[] };
/** A choice's first chunk names the role; a tool call says its place among the answer's calls. */
type ChatDelta = { role?: "assistant"; content?: string; tool_calls?: ({ index: number } & ToolCall)[] };
type ChatChoice<F> = { index: number; message: AssistantMessage; logprobs: ChatLogprobs | null; finish_reason: F };
type ChatChunkChoice = {
  index: number;
  delta: ChatDelta;
  logprobs: ChatLogprobs | null;
  finish_reason: PublicFinishReason | null;
};
export type ChatCompletion = Head<"chat.completion"> & { choices: ChatChoice<PublicFinishReason>[]; usage: Usage };
export type ChatCompletionChunk = Head<"chat.completion.chunk"> & StreamChunk & { choices: ChatChunkChoice[] };

export const chatFormat: TextFormat<ChatCompletion, ChatCompletionChunk> = {
  idPrefix: "chatcmpl-",
  response: (b, answers, usage) => ({
    id: b.id,
    object: "chat.completion",
    created: b.created,
    model: b.model,
    choices: answers.map((r, index) => ({
      index,
      message: {
        role: "assistant",
        content: r.tool_calls && r.text === "" ? null : r.text,
        ...(r.tool_calls ? { tool_calls: r.tool_calls } : {}),
      },
      logprobs: r.logprobs ? { content: r.logprobs } : null,
      finish_reason: publicFinishReason(r.finish_reason),
    })),
    usage,
  }),
  chunk: (b, index, d) => ({
    id: b.id,
    object: "chat.completion.chunk",
    created: b.created,
    model: b.model,
    choices: [
      {
        index,
        delta: d.first
          ? { role: "assistant", content: "" }
          : {
              ...(d.text !== undefined ? { content: d.text } : {}),
              ...(d.tool_calls ? { tool_calls: d.tool_calls.map((call, i) => ({ index: i, ...call })) } : {}),
            },
        logprobs: d.logprobs ? { content: d.logprobs } : null,
        finish_reason: d.finish ? publicFinishReason(d.finish) : null,
      },
    ],
  }),
  usageChunk: (b, usage) => ({
    id: b.id,
    object: "chat.completion.chunk",
    created: b.created,
    model: b.model,
    choices: [],
    usage,
  }),
};
