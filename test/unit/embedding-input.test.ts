/**
 * What /v1/embeddings accepts as `input` (OpenAI's four forms, at most 2048 items, no empty item),
 * the gateway's per-item bound, and which task a model version defaults to.
 */
import { describe, expect, it } from "vitest";
import { defaultTask, taskOf } from "../../src/models/record.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { checkEmbeddingBound } from "../../src/gateway/input-bounds.ts";
import { reservationOf } from "../../src/ratelimit/reservation.ts";
import { embeddingItems, EmbeddingRequest } from "../../src/contracts/openai/embeddings.ts";

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(PlatformError);
    expect((e as PlatformError).status).toBe(400);
    expect((e as PlatformError).param).toBe("input");
    return (e as PlatformError).message;
  }
  throw new Error("not refused");
};

describe("embedding inputs", () => {
  it("takes a string, strings, token ids and token-id lists, one item per embedding", () => {
    expect(embeddingItems("hello")).toEqual(["hello"]);
    expect(embeddingItems(["a", "b"])).toEqual(["a", "b"]);
    expect(embeddingItems([1, 2, 3])).toEqual([[1, 2, 3]]);
    expect(embeddingItems([[1, 2], [3]])).toEqual([[1, 2], [3]]);
    expect(embeddingItems(Array.from({ length: 2048 }, () => "x"))).toHaveLength(2048);
  });

  it("refuses, naming the item, what OpenAI refuses", () => {
    expect(refusal(() => embeddingItems(""))).toBe(
      "input is an empty string; send at least one character (empty inputs have no embedding)",
    );
    expect(refusal(() => embeddingItems([]))).toBe("input is an empty array; send at least one input");
    expect(refusal(() => embeddingItems(["a", ""]))).toBe(
      "input[1] is an empty string; every input needs at least one character",
    );
    expect(refusal(() => embeddingItems([[1], []]))).toBe(
      "input[1] is an empty token list; every input needs at least one token",
    );
    expect(refusal(() => embeddingItems(Array.from({ length: 2049 }, () => "x")))).toBe(
      "input has 2049 items; at most 2048 per request (split it into several requests)",
    );
    expect(refusal(() => embeddingItems([1, -2]))).toBe("input[1] is not a token id (an integer from 0 to 2147483647)");
    expect(refusal(() => embeddingItems([[1], [2.5]]))).toBe(
      "input[1][0] is not a token id (an integer from 0 to 2147483647)",
    );
    expect(refusal(() => embeddingItems(["a", [1]]))).toBe(
      "input mixes texts and token-id lists; send one kind per request",
    );
    expect(refusal(() => embeddingItems([{ text: "a" }]))).toMatch(
      /^input\[0\] is neither a string nor a list of token ids/,
    );
  });

  it("parses the request body's input as a string or a list, anything else a 400 naming the forms", () => {
    expect(EmbeddingRequest.safeParse({ model: "m", input: [[1, 2]] }).success).toBe(true);
    const bad = EmbeddingRequest.safeParse({ model: "m", input: 5 });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.message).toContain("expected a string, an array of strings");
  });

  it("bounds each item on its own: texts by the bytes of the longest token, token ids exactly", () => {
    const bound = { window: 10, maxTokenBytes: 2 };
    expect(() => checkEmbeddingBound(bound, ["a".repeat(20), Array.from({ length: 10 }, () => 1)])).not.toThrow();
    expect(refusal(() => checkEmbeddingBound(bound, ["hi", "a".repeat(21)]))).toBe(
      "input[1] has at least 11 tokens; this model embeds at most 10 tokens per input. Shorten or split input[1].",
    );
    expect(refusal(() => checkEmbeddingBound(bound, [[1], Array.from({ length: 11 }, () => 1)]))).toBe(
      "input[1] has 11 tokens; this model embeds at most 10 tokens per input. Shorten or split input[1].",
    );
  });

  it("reserves token-id inputs at their exact count and texts at the estimate", () => {
    const base = { request_id: "r", model: "m", version: "v1" };
    expect(reservationOf({ ...base, kind: "embedding", input: [[1, 2, 3], [4]] })).toEqual({
      promptTokens: 4,
      maxTokens: 0,
    });
  });
});

describe("model tasks", () => {
  it("encoders embed, everything else generates, unless the registration said otherwise", () => {
    expect(defaultTask({ architecture: "bert" })).toBe("embed");
    expect(defaultTask({ architecture: "nomic-bert" })).toBe("embed");
    expect(defaultTask({ architecture: "llama" })).toBe("generate");
    expect(defaultTask(null)).toBe("generate");
    // Records from before tasks existed have none: the architecture decides.
    expect(
      taskOf({
        gguf: { architecture: "bert", parameters: 1, context_length: 1, quantization: null, chat_template: false },
      }),
    ).toBe("embed");
    expect(
      taskOf({
        task: "embed",
        gguf: { architecture: "llama", parameters: 1, context_length: 1, quantization: null, chat_template: false },
      }),
    ).toBe("embed");
  });
});
