/** What the catalog records of a GGUF header (src/formats/gguf/summary.ts), from headers built in memory. */
import { describe, expect, it } from "vitest";
import { GGML_TYPE, type GgufValue, gguf, LLAMA_FTYPE } from "../../src/formats/gguf/format.ts";
import type { GgufInfo } from "../../src/formats/gguf/read.ts";
import { GgufSummary, summarizeGguf } from "../../src/formats/gguf/summary.ts";

function header(metadata: Record<string, GgufValue>, tensors: { dims: number[]; type: number }[]): GgufInfo {
  return {
    version: 3,
    metadata: new Map(Object.entries(metadata)),
    tensors: tensors.map((t, i) => ({ name: `t${i}`, offset: 0, byteLength: 0, ...t })),
    alignment: 32,
    dataOffset: 0,
    fileSize: 0,
  };
}

describe("summarizeGguf", () => {
  it("reads architecture, size, context, declared type, chat template and tokenizer", () => {
    const summary = summarizeGguf(
      header(
        {
          "general.architecture": gguf.string("llama"),
          "llama.context_length": gguf.uint32(4096),
          "general.file_type": gguf.uint32(LLAMA_FTYPE.MOSTLY_Q8_0),
          "tokenizer.chat_template": gguf.string("{{ messages }}"),
          "tokenizer.ggml.model": gguf.string("gpt2"),
          "tokenizer.ggml.tokens": gguf.strings(["a", "héllo", "<s>"]),
        },
        [
          { dims: [8, 4], type: GGML_TYPE.Q8_0 },
          { dims: [8], type: GGML_TYPE.F32 },
        ],
      ),
    );
    expect(summary).toEqual({
      architecture: "llama",
      parameters: 40,
      context_length: 4096,
      quantization: "Q8_0",
      chat_template: true,
      tokenizer: "gpt2",
      max_token_bytes: 6,
    });
    expect(GgufSummary.parse(summary)).toEqual(summary);
  });

  it("falls back to the tensors' most common type, and nulls what the header lacks or cannot be trusted", () => {
    const summary = summarizeGguf(
      header({ "tokenizer.ggml.model": gguf.string("not a/model name") }, [
        { dims: [4], type: GGML_TYPE.F16 },
        { dims: [4], type: GGML_TYPE.F16 },
        { dims: [4], type: GGML_TYPE.F32 },
      ]),
    );
    expect(summary).toEqual({
      architecture: null,
      parameters: 12,
      context_length: null,
      quantization: "F16",
      chat_template: false,
      tokenizer: null,
      max_token_bytes: null,
    });
  });
});
