/**
 * Small Hugging Face-style checkpoint directories for registry tests: config.json, a tokenizer,
 * safetensors weights (single or sharded with an index) holding deterministic values, optionally
 * sentence-transformers' module files (1_Pooling/config.json), and a README and an original/
 * directory that the registry must leave out. The architecture is made up on purpose, so no GGUF
 * converter ever claims it: conversion tests use the converter's own fixtures.
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { encodeSafetensors } from "./safetensors.ts";

export const TEST_ARCHITECTURE = "PlatformTestForCausalLM";

type Tensor = { name: string; shape: number[] };

/** Tensors of the fake model: their element counts sum to `CHECKPOINT_PARAMETERS`. */
const TENSORS: Tensor[] = [
  { name: "model.embed_tokens.weight", shape: [32, 8] },
  { name: "model.layers.0.mlp.up_proj.weight", shape: [16, 8] },
  { name: "model.layers.0.mlp.down_proj.weight", shape: [8, 16] },
  { name: "lm_head.weight", shape: [32, 8] },
];
export const CHECKPOINT_PARAMETERS = TENSORS.reduce((n, t) => n + t.shape.reduce((a, b) => a * b, 1), 0);

/** A safetensors file of F32 tensors whose values are their flat indices scaled by `seed`. */
function safetensors(tensors: Tensor[], seed = 1): Buffer {
  return encodeSafetensors(
    tensors.map(({ name, shape }) => {
      const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
      for (let i = 0; i < data.length; i++) data[i] = (i % 97) * 0.01 * seed;
      return { name, shape, data };
    }),
  );
}

export type CheckpointOptions = {
  sharded?: boolean;
  /** config.json's quantization_config.quant_method, for a pre-quantized checkpoint. */
  quantMethod?: string;
  /** Leave out tokenizer.json. */
  noTokenizer?: boolean;
  /** Add sentence-transformers' files: modules.json, its settings, 1_Pooling/config.json (CLS) and an empty 2_Normalize/. */
  sentenceTransformers?: boolean;
};

/** Writes a checkpoint into `dir` (created); its files' names. */
export async function writeCheckpoint(dir: string, options: CheckpointOptions = {}): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const config = {
    architectures: [TEST_ARCHITECTURE],
    model_type: "platform_test",
    hidden_size: 8,
    max_position_embeddings: 2048,
    torch_dtype: "float32",
    vocab_size: 32,
    ...(options.quantMethod ? { quantization_config: { quant_method: options.quantMethod, bits: 4 } } : {}),
  };
  const files: Record<string, string | Buffer> = {
    "config.json": JSON.stringify(config, null, 2),
    "generation_config.json": JSON.stringify({ bos_token_id: 1, eos_token_id: 2 }),
    "tokenizer_config.json": JSON.stringify({
      tokenizer_class: "LlamaTokenizerFast",
      chat_template: "{% for m in messages %}{{ m.content }}{% endfor %}",
    }),
    "README.md": "# not part of the checkpoint\n",
  };
  if (!options.noTokenizer)
    files["tokenizer.json"] = JSON.stringify({
      version: "1.0",
      model: { type: "BPE", vocab: { a: 0, b: 1 }, merges: [] },
    });
  if (options.sharded) {
    const first = TENSORS.slice(0, 2);
    const second = TENSORS.slice(2);
    files["model-00001-of-00002.safetensors"] = safetensors(first, 1);
    files["model-00002-of-00002.safetensors"] = safetensors(second, 2);
    const weight_map = Object.fromEntries([
      ...first.map((t) => [t.name, "model-00001-of-00002.safetensors"]),
      ...second.map((t) => [t.name, "model-00002-of-00002.safetensors"]),
    ]);
    files["model.safetensors.index.json"] = JSON.stringify({ metadata: { total_size: 0 }, weight_map });
  } else {
    files["model.safetensors"] = safetensors(TENSORS);
  }
  if (options.sentenceTransformers) {
    files["modules.json"] = JSON.stringify([
      { idx: 0, name: "0", path: "", type: "sentence_transformers.models.Transformer" },
      { idx: 1, name: "1", path: "1_Pooling", type: "sentence_transformers.models.Pooling" },
      { idx: 2, name: "2", path: "2_Normalize", type: "sentence_transformers.models.Normalize" },
    ]);
    files["sentence_bert_config.json"] = JSON.stringify({ max_seq_length: 128, do_lower_case: false });
    files["config_sentence_transformers.json"] = JSON.stringify({ __version__: { sentence_transformers: "3.0.1" } });
    files["1_Pooling/config.json"] = JSON.stringify({
      word_embedding_dimension: 8,
      pooling_mode_cls_token: true,
      pooling_mode_mean_tokens: false,
    });
    await mkdir(join(dir, "2_Normalize"), { recursive: true });
    // Not a module's config.json: left behind.
    files["1_Pooling/notes.txt"] = "not part of the checkpoint\n";
  }
  for (const [name, body] of Object.entries(files)) {
    await mkdir(dirname(join(dir, name)), { recursive: true });
    await writeFile(join(dir, name), body);
  }
  return Object.keys(files);
}

/** The manifest the registry should record for the checkpoint files of `dir` (README.md and other stray files left out), in byte order. */
export async function expectedManifest(
  dir: string,
  names: string[],
): Promise<{ path: string; size: number; sha256: string }[]> {
  const out = [];
  for (const name of names.filter((n) => n !== "README.md" && !n.endsWith(".txt")).sort()) {
    const bytes = await readFile(join(dir, name));
    out.push({ path: name, size: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") });
  }
  return out;
}
