/**
 * What a request that does not fit the model's context window is told, in OpenAI's words (clients
 * match on them): one text for the gateway's early bound (src/gateway/input-bounds.ts) and an
 * engine's exact count (workers/engines/), which answer the same request alike.
 */
import { PlatformError } from "./errors.ts";

/**
 * A prompt and its completion past the window. `where`: what the request holds the prompt in
 * (`messages`, `prompt[1]`); `atLeast`: the prompt's count is a lower bound (the gateway's, from bytes).
 */
export function contextLengthExceeded(o: {
  window: number;
  promptTokens: number;
  completionTokens: number;
  where: string;
  param: string;
  atLeast?: boolean;
}): PlatformError {
  const atLeast = o.atLeast ? "at least " : "";
  return new PlatformError(
    400,
    "context_length_exceeded",
    `This model's maximum context length is ${o.window} tokens. However, you requested ${atLeast}${o.promptTokens + o.completionTokens} tokens (${atLeast}${o.promptTokens} in the ${o.where}, ${o.completionTokens} in the completion). Please reduce the length of the ${o.where} or completion.`,
    o.param,
  );
}

/** An embeddings input past what the model embeds at once (`limit` tokens); `atLeast` as above. */
export function embeddingInputTooLong(index: number, tokens: number, limit: number, atLeast = false): PlatformError {
  return new PlatformError(
    400,
    "context_length_exceeded",
    `input[${index}] has ${atLeast ? "at least " : ""}${tokens} tokens; this model embeds at most ${limit} tokens per input. Shorten or split input[${index}].`,
    "input",
  );
}
