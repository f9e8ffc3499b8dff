/**
 * A sentence-transformers BERT checkpoint, built by the suite, converted to GGUF and run by the real
 * llama.cpp engine: each embedding must match the TypeScript reference forward pass (cosine ≥ 0.999)
 * with the pooling and normalisation the checkpoint declares; what llama.cpp cannot run is refused.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { convertCheckpoint } from "../../src/formats/convert/index.ts";
import { readGgufInfo } from "../../src/formats/gguf/index.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import type { Engine } from "../../workers/engines/engine.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { TINY_BERT, writeTinyBert } from "../fixtures/tiny-bert.ts";
import { bertEmbedding, bertInput, cosine } from "../helpers/bert-reference.ts";
import { writeSafetensors } from "../helpers/safetensors.ts";

const TEXTS = [
  "The quick brown fox jumped over the lazy dog.",
  "hello, world!",
  "Embedding models play nicely",
  "Once upon a time, a small cat sat on the mat",
  "xyz",
  "Café déjà-vu?",
];

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "bert-convert-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const metadataValue = (m: Map<string, { value: unknown }>, key: string) => m.get(key)?.value;

describe.each([
  { pooling: "mean" as const, normalize: false, poolingType: 1 },
  { pooling: "cls" as const, normalize: true, poolingType: 2 },
])("a $pooling-pooled checkpoint (normalize: $normalize)", ({ pooling, normalize, poolingType }) => {
  let engine: Engine;
  let fixture: Awaited<ReturnType<typeof writeTinyBert>>;
  let gguf: string;

  beforeAll(async () => {
    const checkpoint = join(dir, `${pooling}-checkpoint`);
    fixture = await writeTinyBert(checkpoint, { pooling, normalize, seed: pooling === "mean" ? 3 : 4 });
    gguf = join(dir, `${pooling}.gguf`);
    expect(await convertCheckpoint(checkpoint, gguf)).toEqual({
      architecture: "BertModel",
      ggufArchitecture: "bert",
      task: "embed",
    });
    engine = await loadLlamaCpp({ modelPath: gguf, parallel: 1, threads: 1 });
    await engine.warmup();
  });
  afterAll(async () => {
    await engine?.dispose();
  });

  it("writes llama.cpp's BERT layout: encoder attention, the declared pooling, the WordPiece vocabulary", async () => {
    const info = await readGgufInfo(gguf);
    expect(metadataValue(info.metadata, "general.architecture")).toBe("bert");
    expect(metadataValue(info.metadata, "bert.attention.causal")).toBe(false);
    expect(metadataValue(info.metadata, "bert.pooling_type")).toBe(poolingType);
    expect(metadataValue(info.metadata, "platform.embedding.normalize")).toBe(normalize);
    expect(metadataValue(info.metadata, "bert.context_length")).toBe(TINY_BERT.maxPositions);
    expect(metadataValue(info.metadata, "tokenizer.ggml.model")).toBe("bert");
    const tokens = metadataValue(info.metadata, "tokenizer.ggml.tokens") as string[];
    expect(tokens[fixture.vocab.indexOf("[CLS]")]).toBe("[CLS]");
    expect(tokens[fixture.vocab.indexOf("fox")]).toBe("\u2581fox");
    expect(tokens[fixture.vocab.indexOf("##ing")]).toBe("ing");
    expect(metadataValue(info.metadata, "tokenizer.ggml.bos_token_id")).toBe(fixture.vocab.indexOf("[CLS]"));
    expect(metadataValue(info.metadata, "tokenizer.ggml.seperator_token_id")).toBe(fixture.vocab.indexOf("[SEP]"));
    const names = info.tensors.map((t) => t.name);
    expect(names).toContain("blk.1.layer_output_norm.bias");
    expect(names.some((n) => n.startsWith("pooler"))).toBe(false);
    expect(info.tensors.find((t) => t.name === "blk.0.ffn_up.weight")?.dims).toEqual([
      TINY_BERT.hidden,
      TINY_BERT.intermediate,
    ]);
  });

  it("embeds each input as the reference forward pass does (cosine ≥ 0.999), counting [CLS] and [SEP]", async () => {
    const out = await engine.embed(TEXTS);
    expect(out.embeddings).toHaveLength(TEXTS.length);
    let tokens = 0;
    TEXTS.forEach((text, i) => {
      const ids = bertInput(text, fixture.vocab);
      tokens += ids.length;
      const reference = bertEmbedding(ids, fixture.weights, TINY_BERT, pooling, normalize);
      const got = out.embeddings[i] as number[];
      expect(got).toHaveLength(TINY_BERT.hidden);
      expect(cosine(got, reference), text).toBeGreaterThanOrEqual(0.999);
      // Normalised output has length 1; raw output keeps the model's own length.
      expect(Math.hypot(...got)).toBeCloseTo(Math.hypot(...reference), 2);
    });
    expect(out.usage.prompt_tokens).toBe(tokens);
  });

  it("takes token ids as the text's own tokens", async () => {
    const ids = bertInput(TEXTS[0] as string, fixture.vocab);
    const [fromText, fromIds, inner] = (await engine.embed([TEXTS[0] as string, ids, ids.slice(1, -1)]))
      .embeddings as number[][];
    expect(cosine(fromIds as number[], fromText as number[])).toBeGreaterThan(0.99999);
    // Without [CLS]/[SEP] the engine adds them, as it does for a text.
    expect(cosine(inner as number[], fromText as number[])).toBeGreaterThan(0.99999);
  });

  it("refuses an input longer than the context, naming it, and token ids outside the vocabulary", async () => {
    const long = "a ".repeat(TINY_BERT.maxPositions + 5);
    const err = await engine.embed(["hello", long]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PlatformError);
    expect((err as PlatformError).status).toBe(400);
    expect((err as PlatformError).message).toBe(
      `input[1] has ${TINY_BERT.maxPositions + 7} tokens; this model embeds at most ${TINY_BERT.maxPositions - 1} tokens per input. Shorten or split input[1].`,
    );
    const unknown = await engine.embed([[2, 5, fixture.vocab.length]]).catch((e: unknown) => e);
    expect((unknown as PlatformError).message).toMatch(/^input\[0\]\[2\]: token \d+ is not in this model's vocabulary/);
  });

  it("refuses to generate text", async () => {
    const err = await engine
      .generate({ kind: "prompt", prompt: "hello", params: { max_tokens: 2 } }, {})
      .catch((e: unknown) => e);
    expect((err as PlatformError).code).toBe("model_not_generative");
  });
});

describe("converting other BERT checkpoints", () => {
  it("reads a BertForMaskedLM checkpoint (bert.-prefixed names, an MLM head it leaves out) without sentence-transformers files, pooling by mean", async () => {
    const checkpoint = join(dir, "mlm");
    const { weights, vocab } = await writeTinyBert(checkpoint, { pooling: "cls", seed: 5 });
    await rm(join(checkpoint, "modules.json"));
    const config = JSON.parse(await readFile(join(checkpoint, "config.json"), "utf8")) as Record<string, unknown>;
    await writeFile(join(checkpoint, "config.json"), JSON.stringify({ ...config, architectures: ["BertForMaskedLM"] }));
    const tensors = [...weights].map(([name, t]) => ({ name: `bert.${name}`, shape: t.shape, data: t.data }));
    tensors.push({ name: "cls.predictions.bias", shape: [vocab.length], data: new Float32Array(vocab.length) });
    await writeSafetensors(join(checkpoint, "model.safetensors"), tensors);
    const out = join(dir, "mlm.gguf");
    expect((await convertCheckpoint(checkpoint, out)).architecture).toBe("BertForMaskedLM");
    expect(metadataValue((await readGgufInfo(out)).metadata, "bert.pooling_type")).toBe(1);
    const engine = await loadLlamaCpp({ modelPath: out, parallel: 1, threads: 1 });
    try {
      const [got] = (await engine.embed(["a small dog"])).embeddings as number[][];
      expect(
        cosine(got as number[], bertEmbedding(bertInput("a small dog", vocab), weights, TINY_BERT, "mean", false)),
      ).toBeGreaterThanOrEqual(0.999);
    } finally {
      await engine.dispose();
    }
  });

  it("embeds an input longer than llama.cpp's default batch (512 tokens) whole, as an encoder must be", async () => {
    const checkpoint = join(dir, "long");
    const { weights, vocab } = await writeTinyBert(checkpoint, { pooling: "mean", seed: 6, maxPositions: 1024 });
    const out = join(dir, "long.gguf");
    await convertCheckpoint(checkpoint, out);
    const engine = await loadLlamaCpp({ modelPath: out, parallel: 1, threads: 1 });
    try {
      const text = Array.from({ length: 300 }, (_, i) => ["the cat", "sat on", "a mat"][i % 3]).join(" ");
      const ids = bertInput(text, vocab);
      expect(ids.length).toBeGreaterThan(600);
      const result = await engine.embed([text]);
      expect(result.usage.prompt_tokens).toBe(ids.length);
      expect(
        cosine(result.embeddings[0] as number[], bertEmbedding(ids, weights, TINY_BERT, "mean", false)),
      ).toBeGreaterThanOrEqual(0.999);
    } finally {
      await engine.dispose();
    }
  });

  it("refuses what llama.cpp would embed differently: max pooling, a Dense module, a missing tensor", async () => {
    const refusal = async (edit: (checkpoint: string) => Promise<void>) => {
      const checkpoint = await mkdtemp(join(dir, "bad-"));
      await writeTinyBert(checkpoint, { pooling: "mean" });
      await edit(checkpoint);
      const err = await convertCheckpoint(checkpoint, join(checkpoint, "out.gguf")).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PlatformError);
      expect((err as PlatformError).status).toBe(400);
      return (err as PlatformError).message;
    };
    expect(
      await refusal((c) =>
        writeFile(join(c, "1_Pooling/config.json"), JSON.stringify({ pooling_mode_max_tokens: true })),
      ),
    ).toBe("1_Pooling/config.json: pooling max_tokens is not supported; one of mean_tokens, cls_token or lasttoken is");
    expect(
      await refusal(async (c) => {
        const modules = JSON.parse(await readFile(join(c, "modules.json"), "utf8")) as unknown[];
        await writeFile(
          join(c, "modules.json"),
          JSON.stringify([
            ...modules,
            { idx: 2, name: "2", path: "2_Dense", type: "sentence_transformers.models.Dense" },
          ]),
        );
      }),
    ).toBe('modules.json: the module "Dense" is not supported (Transformer, Pooling and Normalize are)');
    expect(
      await refusal(async (c) => {
        const vocab = 5;
        await writeSafetensors(join(c, "model.safetensors"), [
          { name: "embeddings.word_embeddings.weight", shape: [vocab, 2], data: new Float32Array(vocab * 2) },
        ]);
      }),
    ).toMatch(/^tensor embeddings\.word_embeddings\.weight has shape \[5, 2\]; config\.json implies \[\d+, 32\]$/);
  });
});
