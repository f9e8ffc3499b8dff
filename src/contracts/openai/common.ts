/**
 * What the OpenAI-compatible routes share, kept apart from serving them as vLLM keeps its
 * protocol.py: the body rule (every request field that changes what is generated is either
 * honoured or refused with a 400 naming it; only informational fields are accepted and ignored;
 * a field sent as `null` means "not set"), the sampling fields and what they become on the queue
 * (job.ts), and the shapes every text route answers with. Each API has its module beside this one
 * (chat.ts, completions.ts, embeddings.ts, models.ts, images.ts, responses.ts); the gateway serves
 * them (src/gateway/routes/), a batch reads the same requests (src/batch/openai-lines.ts).
 */
import { z } from "zod";
import {
  type FinishReason,
  MAX_PRIORITY,
  MAX_TOKEN_ID,
  MIN_PRIORITY,
  SamplingParams,
  type TextResult,
  type TokenLogprob,
  type ToolCall,
  type Usage,
} from "../job.ts";

/** Ignored: they label, log or bill a request, never change its answer. */
export const INFORMATIONAL = ["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];

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

/** Each field of `shape`, also taking null. */
export function orNull<T extends z.ZodRawShape>(shape: T) {
  return Object.fromEntries(Object.entries(shape).map(([key, field]) => [key, z.nullable(field)])) as {
    [K in keyof T]: z.ZodNullable<T[K]>;
  };
}

// The queue contract bounds sampling (job.ts SamplingParams); the routes take its bounds as they are.
export const bounds = SamplingParams.shape;
const stops = bounds.stop.unwrap();
/** At least one token: only a completion that echoes its prompt may ask for none (CompletionRequest). */
export const generatedTokens = bounds.max_tokens.unwrap().positive();

const PRIORITY_RANGE = `expected an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY} (lower is served first)`;

/** More choices per request are more queued jobs: bounded like any other input. */
export const MAX_CHOICES = 16;

export const sampling = {
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

/** What `prompt` and `input` take, in OpenAI's words for both. */
export const TEXTS_OR_TOKENS =
  "expected a string, an array of strings, an array of token ids or an array of such arrays";
const TOKEN_ID = `expected a token id (an integer from 0 to ${MAX_TOKEN_ID})`;
export const tokenId = z.number(TOKEN_ID).int(TOKEN_ID).min(0, TOKEN_ID).max(MAX_TOKEN_ID, TOKEN_ID);
export type SamplingFields = { [K in keyof typeof sampling]?: z.infer<(typeof sampling)[K]> };
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

export type Head<O extends string> = { id: string; object: O; created: number; model: string };
/** What every stream chunk may carry: `usage`, null on all but the last when asked for (stream_options.include_usage). */
export type StreamChunk = { usage?: Usage | null };
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
