/**
 * The OpenAI-compatible surface, kept apart from serving it as vLLM keeps its protocol.py: the
 * request bodies of the /v1 routes, what they become on the queue (job.ts), and the responses
 * and stream chunks answered from the jobs' results. The gateway serves them
 * (src/gateway/routes/openai.ts, serve-text.ts); a batch reads the same requests and writes the same
 * responses (src/batch/openai-lines.ts).
 *
 * Every request field that changes what is generated is either honoured or refused with a 400
 * naming it; only informational fields (`user`, `metadata`, `store`, ...) are accepted and
 * ignored. A field sent as `null` means "not set" and is accepted whatever it is, as clients do
 * send them. docs/chat.md lists what each engine honours.
 */
import { z } from "zod";
import {
  ChatMessage,
  type EmbeddingItem,
  type FinishReason,
  FunctionTool,
  MAX_EMBEDDING_INPUTS,
  MAX_PRIORITY,
  MAX_TOKEN_ID,
  MAX_TOOLS,
  MIN_PRIORITY,
  type Prompt,
  type PromptTokenLogprob,
  SamplingParams,
  type TextResult,
  type TokenLogprob,
  type ToolCall,
  ToolChoice,
  type Usage,
} from "./job.ts";
import { PlatformError } from "./errors.ts";

/** Ignored: they label, log or bill a request, never change its answer. */
const INFORMATIONAL = ["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];

/** A body with these fields; any other non-null field is refused, naming it and the doc that lists them. */
export function openAiBody<T extends z.ZodRawShape>(shape: T, doc = "docs/chat.md") {
  const known = new Set([...Object.keys(shape), ...INFORMATIONAL]);
  return z
    .looseObject(shape)
    .superRefine((body, ctx) => {
      for (const [key, value] of Object.entries(body)) {
        if (known.has(key) || value === null) continue;
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `is not supported by this server; remove it (${doc} lists the supported fields)`,
        });
      }
    })
    .transform((body) => body as z.output<z.ZodObject<T>>);
}

const contentPart = z.object({ type: z.literal("text"), text: z.string() });
const content = z.union([z.string(), z.array(contentPart), z.null()]).optional();

const message = z.discriminatedUnion("role", [
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

/** Each field of `shape`, also taking null. */
function orNull<T extends z.ZodRawShape>(shape: T) {
  return Object.fromEntries(Object.entries(shape).map(([key, field]) => [key, z.nullable(field)])) as {
    [K in keyof T]: z.ZodNullable<T[K]>;
  };
}

// The queue contract bounds sampling (job.ts SamplingParams); the routes take its bounds as they are.
const bounds = SamplingParams.shape;
const stops = bounds.stop.unwrap();
/** At least one token: only a completion that echoes its prompt may ask for none (CompletionRequest). */
const generatedTokens = bounds.max_tokens.unwrap().positive();

const PRIORITY_RANGE = `expected an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY} (lower is served first)`;

/** More choices per request are more queued jobs: bounded like any other input. */
export const MAX_CHOICES = 16;

const sampling = {
  ...orNull(SamplingParams.omit({ logprobs: true, top_logprobs: true, echo: true }).shape),
  max_tokens: generatedTokens.nullish(),
  // One stop text, or a list of them.
  stop: z.union([stops.element, stops]).nullish(),
  n: z.number().int().min(1).max(MAX_CHOICES, `n is at most ${MAX_CHOICES}`).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  /** vLLM's field: lower is served first (src/queue/fair-share.ts); absent: the key's default, else 0. */
  priority: z
    .number()
    .int(PRIORITY_RANGE)
    .min(MIN_PRIORITY, PRIORITY_RANGE)
    .max(MAX_PRIORITY, PRIORITY_RANGE)
    .nullish(),
};

export const ChatCompletionRequest = openAiBody({
  model: z.string().min(1),
  messages: z.array(message).min(1, "messages must contain at least one message"),
  max_completion_tokens: generatedTokens.nullish(),
  logprobs: z.nullable(bounds.logprobs),
  top_logprobs: z.nullable(bounds.top_logprobs),
  tools: z.array(FunctionTool).max(MAX_TOOLS).nullish(),
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

/** What `prompt` and `input` take, in OpenAI's words for both. */
const TEXTS_OR_TOKENS = "expected a string, an array of strings, an array of token ids or an array of such arrays";
const TOKEN_ID = `expected a token id (an integer from 0 to ${MAX_TOKEN_ID})`;
const tokenId = z.number(TOKEN_ID).int(TOKEN_ID).min(0, TOKEN_ID).max(MAX_TOKEN_ID, TOKEN_ID);

/** At most this many choices per completions request, all its prompts together (prompts × n): each is a queued job. */
export const MAX_PROMPT_CHOICES = 64;

/**
 * OpenAI's four forms of `prompt`, as vLLM and llama.cpp's server take them too: a text, texts,
 * token ids (lm-evaluation-harness sends these), or lists of token ids. Each text or id list is
 * one prompt, answered with `n` choices of its own.
 */
const completionPrompt = z
  .union(
    [
      z.string(),
      z.array(z.string()),
      z.array(tokenId),
      z.array(z.array(tokenId).min(1, "is an empty token list; a prompt needs at least one token")),
    ],
    TEXTS_OR_TOKENS,
  )
  .refine((p) => typeof p === "string" || p.length > 0, "is an empty array; send at least one prompt");

export const CompletionRequest = openAiBody({
  model: z.string().min(1),
  prompt: completionPrompt,
  /** The answer starts with the prompt; with `logprobs`, the prompt tokens' logprobs come first (docs/chat.md). */
  echo: z.boolean().nullish(),
  suffix: z.literal("", { message: "suffix (fill-in-the-middle) is not supported" }).nullish(),
  best_of: z.literal(1, { message: "best_of is not supported; use n" }).nullish(),
  /** The legacy form: how many alternatives to report per token (top_logprobs' bounds). */
  logprobs: z.nullable(bounds.top_logprobs),
  ...sampling,
  // 0 scores the prompt and generates nothing (lm-evaluation-harness's log-likelihoods): only with echo.
  max_tokens: bounds.max_tokens.nullish(),
}).superRefine((body, ctx) => {
  if (body.max_tokens === 0 && !body.echo)
    ctx.addIssue({
      code: "custom",
      path: ["max_tokens"],
      message:
        "0 generates nothing: it is allowed only with echo: true (to score the prompt); ask for at least 1 token",
    });
  // The prompt's logprobs are computed before the first token; a stream would carry them in a first chunk of its own.
  if (body.echo && body.stream)
    ctx.addIssue({
      code: "custom",
      path: ["echo"],
      message: "is not supported with stream: true; send stream: false",
    });
  const prompts = promptsOf(body.prompt).length;
  const n = body.n ?? 1;
  if (prompts * n > MAX_PROMPT_CHOICES)
    ctx.addIssue({
      code: "custom",
      path: ["prompt"],
      message: `${prompts} prompts${n > 1 ? ` with n = ${n} ask for ${prompts * n} choices` : ""}; at most ${MAX_PROMPT_CHOICES} choices (prompts × n) per request: send the prompts in several requests`,
    });
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

export const GenerateRequest = openAiBody({
  prompt: z.string(),
  ...sampling,
  n: z.literal(1, { message: "generate answers one choice; use /v1/completions for n > 1" }).nullish(),
  logprobs: z.nullable(bounds.logprobs),
  top_logprobs: z.nullable(bounds.top_logprobs),
});
export type GenerateRequest = z.infer<typeof GenerateRequest>;

export const EmbeddingRequest = openAiBody({
  model: z.string().min(1),
  /** A string, strings, token ids or token-id lists, as OpenAI takes them: `embeddingItems` checks which. */
  input: z.union([z.string(), z.array(z.unknown())], TEXTS_OR_TOKENS),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.null({ message: "dimensions is not supported: the model's own size is returned" }).optional(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

// What the requests become on the queue (job.ts).

/**
 * The request's prompts, one job's each, and where the request names each in errors: `prompt`
 * for a text or one list of token ids, `prompt[i]` for an item of a list of them.
 */
export function promptsOf(prompt: CompletionRequest["prompt"]): { prompt: Prompt; path: string }[] {
  if (typeof prompt === "string" || typeof prompt[0] === "number")
    return [{ prompt: prompt as Prompt, path: "prompt" }];
  return (prompt as Prompt[]).map((p, i) => ({ prompt: p, path: `prompt[${i}]` }));
}

const isTokenId = (v: unknown): v is number =>
  typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_TOKEN_ID;

/**
 * The request's inputs as the job carries them, one item per embedding: a text or a list of
 * token ids. Refused, naming the item, as OpenAI refuses them: an empty text or token list, a
 * list of more than MAX_EMBEDDING_INPUTS items, anything that is not one of the four forms.
 */
export function embeddingItems(input: EmbeddingRequest["input"]): EmbeddingItem[] {
  const bad = (message: string) => new PlatformError(400, "invalid_request", message, "input");
  if (typeof input === "string") {
    if (input === "")
      throw bad("input is an empty string; send at least one character (empty inputs have no embedding)");
    return [input];
  }
  if (input.length === 0) throw bad("input is an empty array; send at least one input");
  if (input.length > MAX_EMBEDDING_INPUTS)
    throw bad(
      `input has ${input.length} items; at most ${MAX_EMBEDDING_INPUTS} per request (split it into several requests)`,
    );
  // A flat list of numbers is one input given as token ids.
  if (input.every((v) => typeof v === "number")) {
    const i = input.findIndex((v) => !isTokenId(v));
    if (i >= 0) throw bad(`input[${i}] is not a token id (an integer from 0 to ${MAX_TOKEN_ID})`);
    return [input as number[]];
  }
  const kinds = new Set(input.map((item) => typeof item));
  if (kinds.has("string") && kinds.size > 1)
    throw bad("input mixes texts and token-id lists; send one kind per request");
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
    throw bad(
      `input[${i}] is neither a string nor a list of token ids; input is a string, an array of strings, an array of token ids or an array of token-id arrays`,
    );
  });
}

export function toMessages(messages: ChatCompletionRequest["messages"]): ChatMessage[] {
  return messages.map((m) => {
    const text = typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text).join("");
    if (m.role === "tool") return { role: "tool", content: text, tool_call_id: m.tool_call_id };
    if (m.role === "assistant" && m.tool_calls?.length)
      return { role: "assistant", content: text, tool_calls: m.tool_calls };
    return { role: m.role === "developer" ? "system" : m.role, content: text };
  });
}

type SamplingFields = { [K in keyof typeof sampling]?: z.infer<(typeof sampling)[K]> };
type LogprobFields = { logprobs?: boolean | number | null; top_logprobs?: number | null; echo?: boolean | null };

/** The job's parameters; absent fields stay absent (a batch record stores only what was set). */
export function toParams(
  body: SamplingFields & LogprobFields & { max_completion_tokens?: number | null },
): SamplingParams {
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
    echo: body.echo || undefined,
  };
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) as SamplingParams;
}

// Responses and stream chunks, built from the jobs' results.

/** What a client is told of how a choice ended: a cancelled generation just stopped. */
export type PublicFinishReason = Exclude<FinishReason, "cancelled">;

export function publicFinishReason(reason: FinishReason): PublicFinishReason {
  return reason === "cancelled" ? "stop" : reason;
}

type Head<O extends string> = { id: string; object: O; created: number; model: string };
/** What every stream chunk may carry: `usage`, null on all but the last when asked for (stream_options.include_usage). */
export type StreamChunk = { usage?: Usage | null };

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

/**
 * The legacy completions shape of logprobs; `text_offset` counts characters of the choice's text.
 * With echo, the prompt's tokens come first, the first of them null in `token_logprobs` and
 * `top_logprobs` when nothing came before it (OpenAI's and vLLM's shape).
 */
type LegacyLogprobs = {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
};
type TextChoice<F> = { index: number; text: string; logprobs: LegacyLogprobs | null; finish_reason: F };
export type TextCompletion = Head<"text_completion"> & { choices: TextChoice<PublicFinishReason>[]; usage: Usage };
export type TextCompletionChunk = Head<"text_completion"> &
  StreamChunk & { choices: TextChoice<PublicFinishReason | null>[] };

/** The platform's own generate route (docs/http-api.md): one choice, and the version that answered. */
export type Generation = Head<"generation"> & {
  version: string;
  output: string;
  finish_reason: PublicFinishReason;
  logprobs?: TokenLogprob[];
  usage: Usage;
};
export type GenerationChunk = Head<"generation.chunk"> &
  StreamChunk & { version: string; delta: string; logprobs?: TokenLogprob[]; finish_reason: PublicFinishReason | null };

/** Embedding generates nothing: its usage is the prompt's. `embedding` is base64 float32 bytes when asked for. */
export type EmbeddingList = {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: Omit<Usage, "completion_tokens">;
};

export type Model = { id: string; object: "model"; created: number; owned_by: string };
export type ModelList = { object: "list"; data: Model[] };

/** What names a response and each of its chunks: the model as the client asked for it, and the version that answered. */
export type ResponseBase = { id: string; created: number; model: string; version: string };

/** What a response needs of one choice's result. */
export type Answer = Pick<TextResult, "text" | "finish_reason" | "tool_calls" | "logprobs" | "echo">;

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

/** One text route's answers: whole, or streamed as chunks. */
export type TextFormat<R, C extends StreamChunk> = {
  /** Of the response's id, followed by random hex. */
  idPrefix: string;
  /** The whole response: one answer per choice, in order, and their usage together. */
  response(base: ResponseBase, answers: Answer[], usage: Usage): R;
  /** One streamed chunk for choice `index`. */
  chunk(base: ResponseBase, index: number, delta: Delta): C;
  /** The usage-only chunk sent before [DONE] when asked for. */
  usageChunk(base: ResponseBase, usage: Usage): C;
};

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

/** Offsets count characters from `offset`, where the chunk's text began. */
function legacyLogprobs(
  logprobs: (TokenLogprob | PromptTokenLogprob)[] | undefined,
  offset = 0,
): LegacyLogprobs | null {
  if (!logprobs) return null;
  const text_offset: number[] = [];
  for (const lp of logprobs) {
    text_offset.push(offset);
    offset += lp.token.length;
  }
  return {
    tokens: logprobs.map((lp) => lp.token),
    token_logprobs: logprobs.map((lp) => lp.logprob),
    top_logprobs: logprobs.map((lp) =>
      lp.top_logprobs === null ? null : Object.fromEntries(lp.top_logprobs.map((t) => [t.token, t.logprob])),
    ),
    text_offset,
  };
}

export const completionFormat: TextFormat<TextCompletion, TextCompletionChunk> = {
  idPrefix: "cmpl-",
  response: (b, answers, usage) => ({
    id: b.id,
    object: "text_completion",
    created: b.created,
    model: b.model,
    choices: answers.map((r, index) => ({
      index,
      // Echoed: the prompt's text and tokens first, then the generated ones, in the same arrays.
      text: (r.echo?.text ?? "") + r.text,
      logprobs: legacyLogprobs(r.echo?.logprobs ? [...r.echo.logprobs, ...(r.logprobs ?? [])] : r.logprobs),
      finish_reason: publicFinishReason(r.finish_reason),
    })),
    usage,
  }),
  chunk: (b, index, d) => ({
    id: b.id,
    object: "text_completion",
    created: b.created,
    model: b.model,
    choices: [
      {
        index,
        text: d.text ?? "",
        logprobs: legacyLogprobs(d.logprobs, d.offset),
        finish_reason: d.finish ? publicFinishReason(d.finish) : null,
      },
    ],
  }),
  usageChunk: (b, usage) => ({
    id: b.id,
    object: "text_completion",
    created: b.created,
    model: b.model,
    choices: [],
    usage,
  }),
};

/** One choice: n is refused on that route. */
export const generateFormat: TextFormat<Generation, GenerationChunk> = {
  idPrefix: "gen-",
  response: (b, [r], usage) => ({
    id: b.id,
    object: "generation",
    created: b.created,
    model: b.model,
    version: b.version,
    output: r?.text ?? "",
    finish_reason: publicFinishReason(r?.finish_reason ?? "stop"),
    ...(r?.logprobs ? { logprobs: r.logprobs } : {}),
    usage,
  }),
  chunk: (b, _index, d) => ({
    id: b.id,
    object: "generation.chunk",
    created: b.created,
    model: b.model,
    version: b.version,
    delta: d.text ?? "",
    ...(d.logprobs ? { logprobs: d.logprobs } : {}),
    finish_reason: d.finish ? publicFinishReason(d.finish) : null,
  }),
  usageChunk: (b, usage) => ({
    id: b.id,
    object: "generation.chunk",
    created: b.created,
    model: b.model,
    version: b.version,
    delta: "",
    finish_reason: null,
    usage,
  }),
};

export function embeddingList(
  model: string,
  embeddings: number[][],
  promptTokens: number,
  encoding: EmbeddingRequest["encoding_format"],
): EmbeddingList {
  return {
    object: "list",
    data: embeddings.map((vector, index) => ({
      object: "embedding",
      index,
      embedding: encoding === "base64" ? Buffer.from(new Float32Array(vector).buffer).toString("base64") : vector,
    })),
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}

/** `created`: epoch milliseconds, as the platform records times (OpenAI's are seconds). */
export function modelEntry(id: string, created: number): Model {
  return { id, object: "model", created: Math.floor(created / 1000), owned_by: "platform" };
}
