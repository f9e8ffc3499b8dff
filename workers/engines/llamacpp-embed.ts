/**
 * Embeddings on llama.cpp: a context of its own, made on the first request, whose batch holds a
 * whole input (an encoder attends over all of it at once, so llama.cpp cannot split it).
 */
import type { LlamaEmbeddingContext, LlamaModel } from "node-llama-cpp";
import type { EmbeddingItem, Usage } from "../../src/contracts/job.ts";
import { embeddingInputTooLong } from "../../src/contracts/context-window.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { usage } from "./engine.ts";
import type { PromptRenderer } from "./llamacpp-render.ts";

export class Embedder {
  private context: Promise<LlamaEmbeddingContext> | undefined;
  private readonly model: LlamaModel;
  private readonly renderer: PromptRenderer;
  private readonly threads: number;
  private readonly contextSize: number;
  /** The converter recorded a sentence-transformers Normalize module (src/formats/convert/bert.ts). */
  private readonly normalize: boolean;

  constructor(model: LlamaModel, renderer: PromptRenderer, threads: number, contextSize: number) {
    this.model = model;
    this.renderer = renderer;
    this.threads = threads;
    this.contextSize = contextSize;
    const metadata = model.fileInfo.metadata as unknown as Record<string, Record<string, unknown> | undefined>;
    this.normalize = (metadata.platform?.embedding as { normalize?: unknown } | undefined)?.normalize === true;
  }

  async embed(inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    this.context ??= this.model.createEmbeddingContext({
      threads: this.threads,
      contextSize: this.contextSize,
      batchSize: this.contextSize,
    });
    const ctx = await this.context;
    // node-llama-cpp refuses an input as long as the context, so the longest one is a token shorter.
    const limit = this.contextSize - 1;
    const sequences = inputs.map((input, i) => {
      const tokens =
        typeof input === "string"
          ? this.model.tokenize(input)
          : this.renderer.checkedTokenIds(input, `input[${i}]`, "input");
      // The library answers an empty vector for no tokens; whitespace alone may tokenize to none.
      if (tokens.length === 0)
        throw new PlatformError(
          400,
          "invalid_request",
          `input[${i}] has no tokens (is it only whitespace?); send some text`,
          "input",
        );
      // What is evaluated: the library adds the model's own start and end tokens ([CLS]/[SEP] for BERT).
      const evaluated = ctx.calculateInputLength([...tokens]);
      if (evaluated > limit) throw embeddingInputTooLong(i, evaluated, limit);
      return { tokens, evaluated };
    });
    const embeddings: number[][] = [];
    for (const { tokens } of sequences) {
      const vector = [...(await ctx.getEmbeddingFor([...tokens])).vector];
      embeddings.push(this.normalize ? l2Normalized(vector) : vector);
    }
    return {
      embeddings,
      usage: usage(
        sequences.reduce((n, s) => n + s.evaluated, 0),
        0,
      ),
    };
  }

  async dispose(): Promise<void> {
    if (this.context) await (await this.context).dispose();
  }
}

/** The vector scaled to length 1 (a zero vector stays as it is). */
function l2Normalized(vector: number[]): number[] {
  const norm = Math.sqrt(vector.reduce((s, v) => s + v * v, 0));
  return norm > 0 ? vector.map((v) => v / norm) : vector;
}
