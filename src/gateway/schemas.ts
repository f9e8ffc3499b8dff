/**
 * Request bodies of the OpenAI-compatible routes. Every field that changes what is generated is
 * either honoured or refused with a 400 naming it; only informational fields (`user`, `metadata`,
 * `store`, ...) are accepted and ignored. A field sent as `null` means "not set" and is accepted
 * whatever it is, as clients do send them. docs/chat.md lists what each engine honours.
 */
import { z } from "zod";
import { type ChatMessage, type EmbeddingItem, FunctionTool, MAX_EMBEDDING_INPUTS, MAX_TOKEN_ID, ResponseFormat, type SamplingParams, ToolCall, ToolChoice } from "../contracts/job.ts";
import { PlatformError } from "../errors.ts";

/** Ignored: they label, log or bill a request, never change its answer. */
const INFORMATIONAL = ["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];

/** A body with these fields; any other non-null field is refused, naming it. */
function openAiBody<T extends z.ZodRawShape>(shape: T) {
  const known = new Set([...Object.keys(shape), ...INFORMATIONAL]);
  return z.looseObject(shape).superRefine((body, ctx) => {
    for (const [key, value] of Object.entries(body)) {
      if (known.has(key) || value === null) continue;
      ctx.addIssue({ code: "custom", path: [key], message: "is not supported by this server; remove it (docs/chat.md lists the supported fields)" });
    }
  }).transform((body) => body as z.output<z.ZodObject<T>>);
}

const contentPart = z.object({ type: z.literal("text"), text: z.string() });
const content = z.union([z.string(), z.array(contentPart), z.null()]).optional();

const message = z.discriminatedUnion("role", [
  // "developer" is OpenAI's newer name for "system".
  z.object({ role: z.enum(["system", "developer", "user"]), content, name: z.string().optional() }),
  z.object({ role: z.literal("assistant"), content, name: z.string().optional(), tool_calls: z.array(ToolCall).max(128).nullish() }),
  z.object({ role: z.literal("tool"), content, tool_call_id: z.string().min(1, "a tool message names the call it answers").max(128) }),
]);

const stop = z.union([z.string().min(1), z.array(z.string().min(1)).max(8)]).nullish();

/** More choices per request are more queued jobs: bounded like any other input. */
export const MAX_CHOICES = 16;

const sampling = {
  max_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: z.number().int().nullish(),
  stop,
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: z.record(z.string().regex(/^\d{1,9}$/, "logit_bias keys are token ids"), z.number().min(-100).max(100)).nullish(),
  response_format: ResponseFormat.nullish(),
  n: z.number().int().min(1).max(MAX_CHOICES, `n is at most ${MAX_CHOICES}`).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
};

export const ChatCompletionRequest = openAiBody({
  model: z.string().min(1),
  messages: z.array(message).min(1, "messages must contain at least one message"),
  max_completion_tokens: z.number().int().positive().nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  tools: z.array(FunctionTool).max(128).nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  ...sampling,
}).superRefine((body, ctx) => {
  if (body.top_logprobs && !body.logprobs) ctx.addIssue({ code: "custom", path: ["top_logprobs"], message: "needs logprobs: true" });
  const choice = body.tool_choice;
  if (!choice) return;
  if (choice !== "none" && !body.tools?.length) ctx.addIssue({ code: "custom", path: ["tool_choice"], message: "needs tools" });
  if (typeof choice === "object" && body.tools && !body.tools.some((t) => t.function.name === choice.function.name)) {
    ctx.addIssue({ code: "custom", path: ["tool_choice"], message: `names function "${choice.function.name}", which is not among the tools` });
  }
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const CompletionRequest = openAiBody({
  model: z.string().min(1),
  prompt: z.union([z.string(), z.array(z.string()).length(1, "only one prompt per request is supported")]),
  echo: z.literal(false, { message: "echo is not supported" }).nullish(),
  suffix: z.literal("", { message: "suffix (fill-in-the-middle) is not supported" }).nullish(),
  best_of: z.literal(1, { message: "best_of is not supported; use n" }).nullish(),
  /** The legacy form: how many alternatives to report per token. */
  logprobs: z.number().int().min(0).max(20).nullish(),
  ...sampling,
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

export const GenerateRequest = openAiBody({
  prompt: z.string(),
  ...sampling,
  n: z.literal(1, { message: "generate answers one choice; use /v1/completions for n > 1" }).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
});
export type GenerateRequest = z.infer<typeof GenerateRequest>;

export const EmbeddingRequest = openAiBody({
  model: z.string().min(1),
  /** A string, strings, token ids or token-id lists, as OpenAI takes them: `embeddingItems` checks which. */
  input: z.union([z.string(), z.array(z.unknown())], { message: "input must be a string, an array of strings, an array of token ids or an array of token-id arrays" }),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.null({ message: "dimensions is not supported: the model's own size is returned" }).optional(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

const isTokenId = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_TOKEN_ID;

/**
 * The request's inputs as the job carries them, one item per embedding: a text or a list of
 * token ids. Refused, naming the item, as OpenAI refuses them: an empty text or token list, a
 * list of more than MAX_EMBEDDING_INPUTS items, anything that is not one of the four forms.
 */
export function embeddingItems(input: EmbeddingRequest["input"]): EmbeddingItem[] {
  const bad = (message: string) => new PlatformError(400, "invalid_request", message, "input");
  if (typeof input === "string") {
    if (input === "") throw bad("input is an empty string; send at least one character (empty inputs have no embedding)");
    return [input];
  }
  if (input.length === 0) throw bad("input is an empty array; send at least one input");
  if (input.length > MAX_EMBEDDING_INPUTS) throw bad(`input has ${input.length} items; at most ${MAX_EMBEDDING_INPUTS} per request (split it into several requests)`);
  // A flat list of numbers is one input given as token ids.
  if (input.every((v) => typeof v === "number")) {
    const i = input.findIndex((v) => !isTokenId(v));
    if (i >= 0) throw bad(`input[${i}] is not a token id (an integer from 0 to ${MAX_TOKEN_ID})`);
    return [input as number[]];
  }
  const kinds = new Set(input.map((item) => typeof item));
  if (kinds.has("string") && kinds.size > 1) throw bad("input mixes texts and token-id lists; send one kind per request");
  return input.map((item, i) => {
    if (typeof item === "string") {
      if (item === "") throw bad(`input[${i}] is an empty string; every input needs at least one character`);
      return item;
    }
    if (Array.isArray(item)) {
      if (item.length === 0) throw bad(`input[${i}] is an empty token list; every input needs at least one token`);
      const j = item.findIndex((v) => !isTokenId(v));
      if (j >= 0) throw bad(`input[${i}][${j}] is not a token id (an integer from 0 to ${MAX_TOKEN_ID})`);
      return item as number[];
    }
    throw bad(`input[${i}] is neither a string nor a list of token ids; input is a string, an array of strings, an array of token ids or an array of token-id arrays`);
  });
}

export function toMessages(messages: ChatCompletionRequest["messages"]): ChatMessage[] {
  return messages.map((m) => {
    const text = typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text).join("");
    if (m.role === "tool") return { role: "tool", content: text, tool_call_id: m.tool_call_id };
    if (m.role === "assistant" && m.tool_calls?.length) return { role: "assistant", content: text, tool_calls: m.tool_calls };
    return { role: m.role === "developer" ? "system" : m.role, content: text };
  });
}

type SamplingFields = { [K in keyof typeof sampling]?: z.infer<(typeof sampling)[K]> };
type LogprobFields = { logprobs?: boolean | number | null; top_logprobs?: number | null };

/** The job's parameters; absent fields stay absent (a batch record stores only what was set). */
export function toParams(body: SamplingFields & LogprobFields & { max_completion_tokens?: number | null }): SamplingParams {
  const stopList = body.stop == null ? undefined : typeof body.stop === "string" ? [body.stop] : body.stop;
  // Chat asks with logprobs: true (+ top_logprobs); the legacy completions API with logprobs: <count>.
  const logprobs = typeof body.logprobs === "number" ? true : (body.logprobs ?? undefined);
  const topLogprobs = typeof body.logprobs === "number" ? body.logprobs : (body.top_logprobs ?? undefined);
  const responseFormat = body.response_format?.type === "text" ? undefined : (body.response_format ?? undefined);
  const params: SamplingParams = {
    max_tokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    top_k: body.top_k ?? undefined,
    min_p: body.min_p ?? undefined,
    seed: body.seed ?? undefined,
    stop: stopList,
    frequency_penalty: body.frequency_penalty ?? undefined,
    presence_penalty: body.presence_penalty ?? undefined,
    logit_bias: body.logit_bias ?? undefined,
    logprobs: logprobs || undefined,
    top_logprobs: logprobs ? topLogprobs : undefined,
    response_format: responseFormat,
  };
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) as SamplingParams;
}
