/**
 * Request bodies of the OpenAI-compatible routes. Unknown fields are ignored,
 * as OpenAI clients send fields a server may not use; known fields are checked
 * strictly, and values we cannot honour are rejected rather than ignored.
 */
import { z } from "zod";
import type { ChatMessage, SamplingParams } from "../contracts/job.ts";

const contentPart = z.object({ type: z.literal("text"), text: z.string() });

const message = z.object({
  // "developer" is OpenAI's newer name for "system".
  role: z.enum(["system", "developer", "user", "assistant"]),
  content: z.union([z.string(), z.array(contentPart), z.null()]),
});

const stop = z.union([z.string().min(1), z.array(z.string().min(1)).max(8)]).nullish();

const sampling = {
  max_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  seed: z.number().int().nullish(),
  stop,
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  n: z.literal(1, { message: "only n = 1 is supported" }).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
};

export const ChatCompletionRequest = z.object({
  model: z.string().min(1),
  messages: z.array(message).min(1, "messages must contain at least one message"),
  max_completion_tokens: z.number().int().positive().nullish(),
  ...sampling,
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const CompletionRequest = z.object({
  model: z.string().min(1),
  prompt: z.union([z.string(), z.array(z.string()).length(1, "only one prompt per request is supported")]),
  echo: z.literal(false, { message: "echo is not supported" }).nullish(),
  ...sampling,
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

export const GenerateRequest = z.object({
  prompt: z.string(),
  ...sampling,
});
export type GenerateRequest = z.infer<typeof GenerateRequest>;

export const EmbeddingRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.string()).min(1).max(2048)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

export function toMessages(messages: ChatCompletionRequest["messages"]): ChatMessage[] {
  return messages.map((m) => ({
    role: m.role === "developer" ? "system" : m.role,
    content: typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text).join(""),
  }));
}

type SamplingFields = { [K in keyof typeof sampling]?: z.infer<(typeof sampling)[K]> };

export function toParams(body: SamplingFields & { max_completion_tokens?: number | null }): SamplingParams {
  const stopList = body.stop == null ? undefined : typeof body.stop === "string" ? [body.stop] : body.stop;
  return {
    max_tokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    seed: body.seed ?? undefined,
    stop: stopList,
    frequency_penalty: body.frequency_penalty ?? undefined,
    presence_penalty: body.presence_penalty ?? undefined,
  };
}
