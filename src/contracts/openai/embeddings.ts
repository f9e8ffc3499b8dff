/** OpenAI's embeddings: the request, its inputs as the job carries them, the response. */
import { z } from "zod";
import { PlatformError } from "../errors.ts";
import { type EmbeddingItem, MAX_EMBEDDING_INPUTS, MAX_TOKEN_ID, type Usage } from "../job.ts";
import { openAiBody, TEXTS_OR_TOKENS } from "./common.ts";

export const EmbeddingRequest = openAiBody({
  model: z.string().min(1),
  /** A string, strings, token ids or token-id lists, as OpenAI takes them: `embeddingItems` checks which. */
  input: z.union([z.string(), z.array(z.unknown())], TEXTS_OR_TOKENS),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.null({ message: "dimensions is not supported: the model's own size is returned" }).optional(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

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

/** Embedding generates nothing: its usage is the prompt's. `embedding` is base64 float32 bytes when asked for. */
export type EmbeddingList = {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: Omit<Usage, "completion_tokens">;
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
