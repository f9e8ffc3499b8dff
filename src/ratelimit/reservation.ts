/**
 * What a request reserves of a tokens-per-minute budget before it runs: its prompt, estimated,
 * and the completion it may produce. The worker's exact count replaces it when the request
 * completes (settled by the request's end, meter.ts).
 */
import type { ChatMessage, EmbeddingItem, Prompt, SamplingParams, TokenizeJob } from "../contracts/job.ts";
import type { Scope } from "./limiter.ts";

/** Completion tokens reserved for a request that sets no max_tokens (never more than its tpm allows); settled to the real count. */
export const DEFAULT_COMPLETION_RESERVATION = 256;

/**
 * What a request will cost before it runs: its prompt's tokens, estimated, the completion it may
 * produce, and how many requests it counts as toward rpm (1 unless said: an image request counts
 * one per image).
 */
export type Reservation = { promptTokens: number; maxTokens: number | undefined; requests?: number };

/** What of a queue job (contracts/job.ts) its reservation reads. */
export type ReservedJob =
  | { kind: "chat"; messages: ChatMessage[]; params?: SamplingParams }
  | { kind: "completion" | "generate" | "batch_record"; prompt: Prompt; params?: SamplingParams }
  | { kind: "embedding"; input: EmbeddingItem[] }
  | { kind: "image"; prompt: string; negative_prompt?: string }
  | { kind: "tokenize"; input: TokenizeJob["input"] };

/**
 * About 4 bytes per token, as in common English BPE vocabularies. Only the reservation uses it:
 * the worker's exact count replaces it when the request completes.
 */
export function estimateTokens(texts: string[]): number {
  let bytes = 0;
  for (const t of texts) bytes += Buffer.byteLength(t, "utf8");
  return Math.ceil(bytes / 4);
}

export function reservationOf(job: ReservedJob): Reservation {
  switch (job.kind) {
    case "chat":
      return { promptTokens: estimateTokens(job.messages.map((m) => m.content)), maxTokens: job.params?.max_tokens };
    case "completion":
    case "generate":
    case "batch_record":
      return { promptTokens: countTokens([job.prompt]), maxTokens: job.params?.max_tokens };
    case "embedding":
      return { promptTokens: countTokens(job.input), maxTokens: 0 };
    // An image's tokens are its prompt's (the text encoder reads them); nothing is generated as text.
    case "image":
      return { promptTokens: estimateTokens([job.prompt, job.negative_prompt ?? ""]), maxTokens: 0 };
    // Counted as what it reads: nothing is generated.
    case "tokenize": {
      const input = job.input;
      if ("tokens" in input) return { promptTokens: input.tokens.length, maxTokens: 0 };
      const texts = "prompt" in input ? [input.prompt] : input.messages.map((m) => m.content);
      return { promptTokens: estimateTokens(texts), maxTokens: 0 };
    }
  }
}

/** Token ids are counted exactly; texts are estimated. */
function countTokens(items: (string | number[])[]): number {
  const texts = items.filter((i): i is string => typeof i === "string");
  const ids = items.reduce((n, i) => n + (typeof i === "string" ? 0 : i.length), 0);
  return estimateTokens(texts) + ids;
}

/** The tokens a request admitted under `scopes` reserves. */
export function reservedTokens(scopes: Scope[], r: Reservation): number {
  if (r.maxTokens !== undefined) return r.promptTokens + r.maxTokens;
  // No max_tokens: a default reservation, but never one that alone exceeds a tpm limit.
  const tpm = Math.min(...scopes.map((s) => s.limits.tpm ?? Number.POSITIVE_INFINITY));
  return Math.max(r.promptTokens, Math.min(r.promptTokens + DEFAULT_COMPLETION_RESERVATION, tpm));
}
