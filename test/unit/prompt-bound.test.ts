// The gateway's cheap bound on a prompt before it is queued (src/gateway/input-bounds.ts).
import { describe, expect, it } from "vitest";
import { FALLBACK_TOKEN_BYTES, checkPromptBound, promptBound } from "../../src/gateway/input-bounds.ts";

describe("promptBound", () => {
  it("takes a GGUF version's context and longest token", () => {
    expect(promptBound("llamacpp", undefined, { context_length: 512, max_token_bytes: 7 })).toEqual({
      window: 512,
      maxTokenBytes: 7,
    });
  });

  it("takes a checkpoint's context, with the fallback token width it does not record", () => {
    expect(promptBound("vllm", undefined, { context_length: 4096 })).toEqual({
      window: 4096,
      maxTokenBytes: FALLBACK_TOKEN_BYTES,
    });
  });

  it("prefers the deployment's max_model_len, and has no bound without a context", () => {
    expect(promptBound("vllm", 1024, { context_length: 4096 })?.window).toBe(1024);
    expect(promptBound("vllm", undefined, { context_length: null })).toBeUndefined();
    expect(promptBound("vllm", undefined, undefined)).toBeUndefined();
  });

  it("counts token ids exactly, and names the prompt by its place", () => {
    const bound = { window: 10, maxTokenBytes: 4 };
    expect(() => checkPromptBound(bound, [Array(9).fill(1)], 1, "prompt")).not.toThrow();
    expect(() => checkPromptBound(bound, [Array(9).fill(1)], 2, "prompt", "prompt[2]")).toThrow(
      "you requested 11 tokens (9 in the prompt[2], 2 in the completion)",
    );
  });

  it("refuses only prompts that certainly overflow", () => {
    const bound = { window: 10, maxTokenBytes: 4 };
    expect(() => checkPromptBound(bound, ["x".repeat(36)], 1, "prompt")).not.toThrow();
    expect(() => checkPromptBound(bound, ["x".repeat(37)], 1, "prompt")).toThrow(
      /maximum context length is 10 tokens.*at least 11 tokens/,
    );
  });
});
