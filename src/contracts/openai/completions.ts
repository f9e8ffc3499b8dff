/** OpenAI's legacy completions and the platform's own generate route: requests, prompts, responses, chunks. */
import { z } from "zod";
import {
  type PromptTokenLogprob,
  type Prompt,
  type TokenLogprob,
  type Usage,
  ZERO_TOKENS_NEED_ECHO,
  zeroTokensAllowed,
} from "../job.ts";
import {
  bounds,
  type Head,
  openAiBody,
  type PublicFinishReason,
  publicFinishReason,
  sampling,
  type StreamChunk,
  TEXTS_OR_TOKENS,
  type TextFormat,
  tokenId,
} from "./common.ts";

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
  // 0 scores the prompt and generates nothing: only with echo (job.ts, zeroTokensAllowed).
  max_tokens: bounds.max_tokens.nullish(),
}).superRefine((body, ctx) => {
  if (!zeroTokensAllowed(body)) ctx.addIssue({ code: "custom", path: ["max_tokens"], message: ZERO_TOKENS_NEED_ECHO });
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
