/**
 * The queue contract: what goes on a model queue and what comes back.
 *
 * This module is public. Other services may enqueue directly into BullMQ with
 * these payloads (see docs/queue-contract.md), so every change
 * here must stay backward compatible within `v: 1`.
 */
import { z } from "zod";
import { ImageParams, MAX_IMAGE_PROMPT_CHARS, MAX_IMAGE_SIDE } from "./picture-params.ts";
import { NAME_PART } from "./deployment.ts";

export const JOB_SCHEMA_VERSION = 1 as const;

/** BullMQ job names, one per kind of work. */
export const JobKind = z.enum(["chat", "completion", "generate", "embedding", "batch_record", "image", "tokenize"]);
export type JobKind = z.infer<typeof JobKind>;

/**
 * A call the model made to one of the request's tools. `arguments` is a JSON text (as OpenAI
 * sends it), valid against the function's parameter schema when the engine constrained it; in a
 * call cut short (finish_reason "length"), the beginning of that text, as far as it was generated.
 */
export const ToolCall = z.object({
  id: z.string().min(1).max(128),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1).max(64), arguments: z.string().max(1_000_000) }),
});
export type ToolCall = z.infer<typeof ToolCall>;

/** At most this many tools per request, and tool calls per answer. */
export const MAX_TOOLS = 128;
/** What a request with more tools than the contract allows is told (PLATFORM_MAX_TOOLS may only lower it). */
export const TOO_MANY_TOOLS = `at most ${MAX_TOOLS} tools in one request; send fewer`;

export const ChatMessage = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: z.string(),
  /** An assistant turn that called tools (its content may then be empty). */
  tool_calls: z.array(ToolCall).max(MAX_TOOLS).optional(),
  /** A `tool` turn: which call this is the result of. */
  tool_call_id: z.string().max(128).optional(),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

/** A JSON Schema, as clients send it; which keywords an engine can enforce is the engine's to say. */
export const JsonSchema = z.record(z.string(), z.unknown());
export type JsonSchema = z.infer<typeof JsonSchema>;

export const FunctionTool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "a function name is 1 to 64 letters, digits, '_' or '-'"),
    description: z.string().max(4096).optional(),
    parameters: JsonSchema.optional(),
    strict: z.boolean().optional(),
  }),
});
export type FunctionTool = z.infer<typeof FunctionTool>;

export const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.object({ type: z.literal("function"), function: z.object({ name: z.string().min(1).max(64) }) }),
]);
export type ToolChoice = z.infer<typeof ToolChoice>;

/** OpenAI's `response_format`: constrained decoding makes the text parse (and validate against the schema). */
export const ResponseFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    json_schema: z.object({
      name: z.string().min(1).max(64),
      description: z.string().max(4096).optional(),
      schema: JsonSchema.optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);
export type ResponseFormat = z.infer<typeof ResponseFormat>;

/** The sampling bounds, here once: the OpenAI routes take the same ones (contracts/openai/common.ts). */
export const SamplingParams = z.object({
  /** Absent: generate until the end of the context window. 0 (generate nothing) only with `echo`: see zeroTokensAllowed. */
  max_tokens: z.number().int().nonnegative().optional(),
  /** 0 means greedy and deterministic. */
  temperature: z.number().min(0).max(2).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  /** vLLM's extensions, honoured by both engines. */
  top_k: z.number().int().min(-1).optional(),
  min_p: z.number().min(0).max(1).optional(),
  /** With the same seed (and prompt and parameters), the same replica build answers the same text. */
  seed: z.number().int().optional(),
  stop: z.array(z.string().min(1)).max(8).optional(),
  frequency_penalty: z.number().min(-2).max(2).optional(),
  presence_penalty: z.number().min(-2).max(2).optional(),
  /** Token id (as a decimal string) → bias added to its logit; -100 bans it, 100 all but forces it. */
  logit_bias: z
    .record(z.string().regex(/^\d{1,9}$/, "logit_bias keys are token ids"), z.number().min(-100).max(100))
    .optional(),
  /** Report each generated token's log probability, with the `top_logprobs` most likely alternatives. */
  logprobs: z.boolean().optional(),
  top_logprobs: z.number().int().min(0).max(20).optional(),
  response_format: ResponseFormat.optional(),
  /**
   * A prompt completion's answer starts with its prompt: the result's `echo` holds the prompt's
   * text and, with `logprobs`, each prompt token's log probability given the ones before it (what
   * evaluations score a text by). The legacy completions API's `echo`.
   */
  echo: z.boolean().optional(),
});
export type SamplingParams = z.infer<typeof SamplingParams>;

/**
 * `max_tokens: 0` asks for the prompt's scores alone (lm-evaluation-harness's log-likelihoods), so
 * it needs `echo`: the rule and its words, here once for the queue contract and the completions route.
 */
export const zeroTokensAllowed = (p: { max_tokens?: number | null; echo?: boolean | null }): boolean =>
  p.max_tokens !== 0 || p.echo === true;
export const ZERO_TOKENS_NEED_ECHO =
  "0 generates nothing: it is allowed only with echo: true (to score the prompt); ask for at least 1 token";

/** A prompt's parameters. */
const PromptParams = SamplingParams.refine(zeroTokensAllowed, { path: ["max_tokens"], message: ZERO_TOKENS_NEED_ECHO });

/** A chat answers generated text: nothing to echo, and at least one token to generate. */
const ChatParams = SamplingParams.refine((p) => p.max_tokens !== 0 && p.echo !== true, {
  path: ["max_tokens"],
  message: "a chat generates at least one token (max_tokens >= 1) and echoes nothing (echo is for prompts)",
});

/**
 * Where a worker writes progress events for a job (a Redis stream key).
 * Optional: producers that only need the final result can use BullMQ's own
 * `job.waitUntilFinished()` and read the job's return value instead.
 */
export const ReplyTo = z.object({ stream: z.string().min(1) });

/** A request's `priority` (vLLM's field): lower is served first; 0 is the default. */
export const MIN_PRIORITY = -10;
export const MAX_PRIORITY = 10;

const common = {
  v: z.literal(JOB_SCHEMA_VERSION),
  /** Echoed in events and logs; the gateway uses its x-request-id. */
  request_id: z.string().min(1),
  model: z.string().min(1),
  version: z.string().min(1),
  /** Ask the worker to emit `token` events (requires `reply`); an image job emits `progress` events instead. */
  stream: z.boolean().default(false),
  reply: ReplyTo.optional(),
  /** Epoch milliseconds after which nobody waits for the answer: the worker skips it. */
  deadline: z.number().int().positive().optional(),
  /**
   * Epoch milliseconds by which a replica must start the job (admission control's max queue
   * wait). A replica holding it without a free sequence by then fails it with 503 `queue_timeout`.
   */
  queue_deadline: z.number().int().positive().optional(),
  /**
   * The W3C trace context of whoever enqueued the job (`00-<trace id>-<parent span id>-<flags>`):
   * a replica's spans for the job join that trace (docs/tracing.md). Optional, so producers
   * that do not trace are unaffected; a malformed value is ignored (a new trace starts), never
   * a reason to refuse the job.
   */
  traceparent: z.string().max(512).optional().catch(undefined),
  /**
   * A LoRA adapter of this model version to apply, as `<adapter name>@<adapter version>` (a
   * registered adapter whose base is `model`@`version`: docs/adapters.md). Absent: the base model.
   * Adapters share their base's queue; the replica loads one on first use and keeps a bounded few.
   */
  adapter: z
    .string()
    .regex(new RegExp(`^${NAME_PART}@${NAME_PART}$`), "an adapter is <name>@<version>")
    .optional(),
  /**
   * vLLM's `priority`: lower is served first (online work is served in bands, one per value;
   * src/queue/fair-share.ts). The vLLM engine passes it on to vLLM's own priority scheduling.
   */
  priority: z.number().int().min(MIN_PRIORITY).max(MAX_PRIORITY).optional(),
  /**
   * Who the job is for: its fair share is its organization's, then its key's (the gateway sets it;
   * a replica shares its sequences by it). Ids, never secrets.
   */
  tenant: z.object({ org: z.string().min(1).max(128), key: z.string().min(1).max(128) }).optional(),
};

export const ChatJob = z.object({
  ...common,
  kind: z.literal("chat"),
  messages: z.array(ChatMessage).min(1),
  params: ChatParams.default({}),
  /** Functions the model may call; how it is asked to and held to their schemas is the engine's (docs/chat.md). */
  tools: z.array(FunctionTool).min(1).max(MAX_TOOLS, TOO_MANY_TOOLS).optional(),
  tool_choice: ToolChoice.optional(),
  /** false: at most one tool call per answer. */
  parallel_tool_calls: z.boolean().optional(),
});

/** The largest token id a job may name (int32, what llama.cpp's and vLLM's token ids are). */
export const MAX_TOKEN_ID = 2 ** 31 - 1;

/** A text already tokenized: token ids, as OpenAI's API takes them. Which ids the model knows is the engine's to check. */
export const TokenIds = z.array(z.number().int().min(0).max(MAX_TOKEN_ID)).min(1);

/**
 * A prompt to continue: a text, which the engine tokenizes (adding the model's BOS token where its
 * tokenizer does), or token ids, evaluated exactly as given (no BOS added), as vLLM and llama.cpp's
 * server take them.
 */
export const Prompt = z.union([z.string(), TokenIds]);
export type Prompt = z.infer<typeof Prompt>;

export const CompletionJob = z.object({
  ...common,
  kind: z.enum(["completion", "generate"]),
  prompt: Prompt,
  params: PromptParams.default({}),
});

/** One input to embed: a text, or a text already tokenized (token ids, as OpenAI's API takes them). */
export const EmbeddingItem = z.union([z.string(), TokenIds]);
export type EmbeddingItem = z.infer<typeof EmbeddingItem>;

/** At most this many inputs per embeddings request (OpenAI's limit). */
export const MAX_EMBEDDING_INPUTS = 2048;

export const EmbeddingJob = z.object({
  ...common,
  kind: z.literal("embedding"),
  /** One embedding per item, in order; each item on its own must fit the model's context. */
  input: z.array(EmbeddingItem).min(1).max(MAX_EMBEDDING_INPUTS),
});

/** One record of a batch job; processed like a completion, at batch priority. */
export const BatchRecordJob = z.object({
  ...common,
  kind: z.literal("batch_record"),
  batch_id: z.string().min(1),
  record_id: z.string(),
  prompt: Prompt,
  params: PromptParams.default({}),
});

/** One image to generate (docs/images.md): a request for `n` images is `n` jobs, choice i seeded with seed + i. */
export const ImageJob = z.object({
  ...common,
  kind: z.literal("image"),
  prompt: z.string().min(1).max(MAX_IMAGE_PROMPT_CHARS),
  negative_prompt: z.string().max(MAX_IMAGE_PROMPT_CHARS).optional(),
  width: z.number().int().min(8).max(MAX_IMAGE_SIDE),
  height: z.number().int().min(8).max(MAX_IMAGE_SIDE),
  params: ImageParams.default({}),
});
export type ImageJob = z.infer<typeof ImageJob>;

/**
 * A text as the model's tokenizer reads it, a chat as its template renders it (what a chat job's
 * prompt would be), or token ids back to text: vLLM's and llama.cpp's /tokenize and /detokenize.
 * Nothing is generated; the result is a `tokens` one.
 */
export const TokenizeJob = z.object({
  ...common,
  kind: z.literal("tokenize"),
  input: z.union([
    /** `add_special_tokens` (default true): the BOS token the engine puts before a text prompt, as vLLM's. */
    z.object({ prompt: z.string(), add_special_tokens: z.boolean().optional() }),
    z.object({
      messages: z.array(ChatMessage).min(1),
      tools: z.array(FunctionTool).max(MAX_TOOLS, TOO_MANY_TOOLS).optional(),
    }),
    z.object({ tokens: z.array(z.number().int().min(0).max(MAX_TOKEN_ID)) }),
  ]),
});
export type TokenizeJob = z.infer<typeof TokenizeJob>;

/**
 * A LoRA adapter changes how text is generated: a chat, completion or batch record job may name one;
 * an embedding, image or tokenize job takes the base alone. The rule and its words, here once for
 * the gateway's routes and a replica's job handler.
 */
const ADAPTED_KINDS = ["chat", "completion", "generate", "batch_record"] as const;
export const takesAdapter = (kind: JobKind): kind is (typeof ADAPTED_KINDS)[number] =>
  (ADAPTED_KINDS as readonly JobKind[]).includes(kind);
const UNADAPTED_WORK: Record<Exclude<JobKind, (typeof ADAPTED_KINDS)[number]>, string> = {
  embedding: "embeddings",
  image: "images",
  tokenize: "tokenizing",
};
export const adapterRefusal = (kind: keyof typeof UNADAPTED_WORK): string =>
  `LoRA adapters apply to text generation (chat, completions), not to ${UNADAPTED_WORK[kind]}`;

export const JobPayload = z.discriminatedUnion("kind", [
  ChatJob,
  CompletionJob,
  EmbeddingJob,
  BatchRecordJob,
  ImageJob,
  TokenizeJob,
]);
export type JobPayload = z.infer<typeof JobPayload>;
export type JobPayloadInput = z.input<typeof JobPayload>;
export type TextJob = Exclude<JobPayload, z.infer<typeof EmbeddingJob> | ImageJob | TokenizeJob>;

export const Usage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  total_tokens: z.number().int().nonnegative(),
  /** Text engines that keep a KV cache: how many of the prompt's tokens it held, so were not evaluated again (OpenAI's field). */
  prompt_tokens_details: z.object({ cached_tokens: z.number().int().nonnegative() }).optional(),
  /** Image jobs only: images made, and the denoising steps they took. */
  images: z.number().int().nonnegative().optional(),
  steps: z.number().int().nonnegative().optional(),
});
export type Usage = z.infer<typeof Usage>;

export const FinishReason = z.enum(["stop", "length", "tool_calls", "cancelled"]);
export type FinishReason = z.infer<typeof FinishReason>;

/** A candidate token and its log probability (natural log), as OpenAI's `top_logprobs` entries. */
export const TokenCandidate = z.object({
  token: z.string(),
  logprob: z.number(),
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: z.array(z.number().int()).nullable(),
});
/** One generated token: its own log probability and the most likely alternatives. */
export const TokenLogprob = TokenCandidate.extend({ top_logprobs: z.array(TokenCandidate) });
export type TokenLogprob = z.infer<typeof TokenLogprob>;

/**
 * One prompt token echoed back, scored given the tokens before it. The first token evaluated has
 * nothing before it: null, as OpenAI and vLLM answer. A text prompt's BOS token, which the engine
 * adds, is not echoed (it is not in the prompt), but the first token is scored given it.
 */
export const PromptTokenLogprob = TokenCandidate.extend({
  logprob: z.number().nullable(),
  top_logprobs: z.array(TokenCandidate).nullable(),
});
export type PromptTokenLogprob = z.infer<typeof PromptTokenLogprob>;

/** What `params.echo` adds to a result: the prompt as text, and its tokens' logprobs when asked for. */
export const EchoedPrompt = z.object({
  /** A text prompt as sent; token ids as the model detokenizes them. */
  text: z.string(),
  /** With `params.logprobs`: one entry per prompt token, in order; their texts concatenate to `text`. */
  logprobs: z.array(PromptTokenLogprob).optional(),
});
export type EchoedPrompt = z.infer<typeof EchoedPrompt>;

/** The BullMQ return value of a text job (and the `done` event's data). */
export const TextResult = z.object({
  type: z.literal("text"),
  text: z.string(),
  finish_reason: FinishReason,
  /**
   * When the model called tools (finish_reason "tool_calls", or "length" for calls cut short);
   * `text` is then any content beside them.
   */
  tool_calls: z.array(ToolCall).optional(),
  /**
   * With finish_reason "stop": the caller's stop string (`params.stop`) that ended the text, which
   * the text leaves out. Absent where the model ended it itself (its end token, its template's stop).
   */
  stop_sequence: z.string().optional(),
  /** When asked for (`params.logprobs`): one entry per generated token, in order. */
  logprobs: z.array(TokenLogprob).optional(),
  /** With `params.echo`: the prompt, which the answer starts with (`text` is the generated text alone). Never streamed. */
  echo: EchoedPrompt.optional(),
  usage: Usage,
  /** Which replica served it, for tracing. */
  replica: z.string(),
  /** Time the job waited in the queue before a replica took it. */
  queued_ms: z.number().nonnegative().optional(),
  /**
   * On the replica's clock, from the start of generation: when the first token was produced, and
   * when generation ended. Their difference is what a non-streaming client waited after its first
   * token, so the gateway's TTFT needs no clock shared with the worker (src/gateway/metrics.ts).
   * `first_token_ms` is absent when no text was produced.
   */
  first_token_ms: z.number().nonnegative().optional(),
  generation_ms: z.number().nonnegative().optional(),
});
export type TextResult = z.infer<typeof TextResult>;

export const EmbeddingResult = z.object({
  type: z.literal("embedding"),
  embeddings: z.array(z.array(z.number())),
  usage: Usage,
  replica: z.string(),
  /** As TextResult's. */
  queued_ms: z.number().nonnegative().optional(),
});
export type EmbeddingResult = z.infer<typeof EmbeddingResult>;

/**
 * An image job's result. The PNG is not on the reply stream (images are large; replies are bounded
 * entries): the replica wrote it to the artifact store under `image.key` (`images/...`), and the
 * gateway reads it from there, answers with it, and deletes it, or keeps it for a `url` answer.
 * `usage.prompt_tokens`: the text encoder's tokens of the prompt (and negative prompt);
 * `completion_tokens` 0; `images` 1 and `steps` the denoising steps run.
 */
export const ImageResult = z.object({
  type: z.literal("image"),
  image: z.object({ key: z.string().min(1).max(512), bytes: z.number().int().nonnegative() }),
  width: z.number().int().positive(),
  height: z.number().int().positive(),
  /** The random seed it was made with (the job's, or the one the replica drew). */
  seed: z.number().int().nonnegative(),
  steps: z.number().int().nonnegative(),
  usage: Usage,
  replica: z.string(),
  queued_ms: z.number().nonnegative().optional(),
  generation_ms: z.number().nonnegative().optional(),
});
export type ImageResult = z.infer<typeof ImageResult>;

/** A tokenize job's result: the ids (of a text or chat), the text (of ids), and the model's window. */
export const TokensResult = z.object({
  type: z.literal("tokens"),
  tokens: z.array(z.number().int()),
  text: z.string(),
  max_model_len: z.number().int().positive(),
  /** `prompt_tokens`: the tokens counted; nothing generated. */
  usage: Usage,
  replica: z.string(),
  queued_ms: z.number().nonnegative().optional(),
});
export type TokensResult = z.infer<typeof TokensResult>;

export const JobResult = z.discriminatedUnion("type", [TextResult, EmbeddingResult, ImageResult, TokensResult]);
export type JobResult = z.infer<typeof JobResult>;

/**
 * What an online job that names a reply stream returns to BullMQ: the result without its
 * content. The answer reached its client on the reply stream; BullMQ copies a return value
 * into the queue's event stream (kept for thousands of jobs), where no answer may linger.
 */
export type JobReceipt = { type: JobResult["type"]; usage: Usage; replica: string; finish_reason?: FinishReason };

export function receiptOf(result: JobResult): JobReceipt {
  return result.type === "text"
    ? { type: "text", finish_reason: result.finish_reason, usage: result.usage, replica: result.replica }
    : { type: result.type, usage: result.usage, replica: result.replica };
}

/**
 * A failure a worker reports for a job. `code` is the OpenAI-style string code
 * and `status` the HTTP status the gateway answers with.
 */
export const JobError = z.object({
  code: z.string(),
  message: z.string(),
  status: z.number().int(),
  param: z.string().nullable().default(null),
  /** Seconds, for the Retry-After header of a 429/503. */
  retry_after: z.number().int().positive().optional(),
});
export type JobError = z.infer<typeof JobError>;

/**
 * Events a worker appends to `reply.stream`, in order, each with the job id.
 * When streaming: `started` once per attempt (a second one means the job was
 * retried on another replica) and `token` for each text delta. Always exactly
 * one `done` or `error` at the end.
 */
export const JobEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("started"), replica: z.string(), attempt: z.number().int() }),
  /** `logprobs`: the tokens this text came from, when asked for. */
  z.object({ type: z.literal("token"), text: z.string(), logprobs: z.array(TokenLogprob).optional() }),
  /** An image job with `stream`: denoising steps done so far, of `steps`. */
  z.object({ type: z.literal("progress"), step: z.number().int().nonnegative(), steps: z.number().int().positive() }),
  z.object({ type: z.literal("done"), result: JobResult }),
  z.object({ type: z.literal("error"), error: JobError }),
]);
export type JobEvent = z.infer<typeof JobEvent>;

/**
 * BullMQ priorities: jobs without a priority are served before any job with one (a producer's
 * online jobs); the gateway's online jobs take priorities in bands below BATCH_PRIORITY
 * (src/queue/fair-share.ts), and batch records carry BATCH_PRIORITY, BullMQ's largest, so online
 * work is always served first.
 */
export const BATCH_PRIORITY = 2_097_151;

/** Redis pub/sub channel (under the key prefix) on which cancellations are announced. */
export const CANCEL_CHANNEL = "cancel";

/**
 * How long a cancellation mark (`<prefix>:cp:cancelled:<jobId>`) lives: longer than any job
 * waits in a queue, so a replica that takes a cancelled job late still finds the mark.
 */
export const CANCEL_MARK_TTL_MS = 600_000;

/** A reply stream expires this long after its last entry, so a producer that died leaves nothing behind. */
export const REPLY_STREAM_TTL_MS = 3_600_000;

/** Retry-After (seconds) of the 429/503 answers a request may get before or while queued; docs/fleet.md. */
export const RETRY_AFTER_S = { queue_full: 2, no_capacity: 30, queue_timeout: 5, job_lost: 1 } as const;
