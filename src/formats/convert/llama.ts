/**
 * Converts llama-family Hugging Face checkpoints (LlamaForCausalLM, MistralForCausalLM,
 * MixtralForCausalLM, Qwen2ForCausalLM) to GGUF as llama.cpp's convert_hf_to_gguf.py does:
 * tensors renamed to llama.cpp's names, Q/K rows permuted for the llama layout, Mixtral's experts
 * stacked, hyperparameters and the tokenizer written as metadata. Tensors are streamed from the
 * safetensors shards to the file a run of rows at a time, so neither the model nor a tensor sits in memory.
 */
import { rm } from "node:fs/promises";
import { endianness } from "node:os";
import { GGML_TYPE, type GgufValue, gguf, LLAMA_FTYPE, writeGgufFile } from "../gguf/index.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { ConversionResult } from "./converter.ts";
import { SafetensorsCheckpoint, SafetensorsError } from "./safetensors.ts";
import { SentencePieceError } from "./sentencepiece.ts";
import { TokenizerError, tokenizerMetadata } from "./tokenizer.ts";

/** The architectures this module converts, and the llama.cpp architecture each becomes. */
export const LLAMA_FAMILY: Readonly<Record<string, "llama" | "qwen2">> = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "llama",
  MixtralForCausalLM: "llama",
  Qwen2ForCausalLM: "qwen2",
};

/** A problem with the checkpoint itself (missing tensor, odd shape, unsupported setting): a 400. */
export class CheckpointError extends Error {}

type Hparams = {
  arch: "llama" | "qwen2";
  hidden: number;
  ff: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  experts: number;
  expertsUsed: number;
  tied: boolean;
};

/** Source bytes (as float32) converted per step. */
const CHUNK_BYTES = 16 << 20;

/** One output tensor: its GGUF header and how to produce its float32 values, in ggml order, piece by piece. */
type Planned = { name: string; dims: number[]; type: number; parts: () => AsyncIterable<Float32Array> };

export async function convertLlamaFamily(
  dir: string,
  config: Record<string, unknown>,
  outPath: string,
): Promise<ConversionResult> {
  const architecture = (config.architectures as string[])[0]!;
  const arch = LLAMA_FAMILY[architecture]!;
  // Float32 values are written as their in-memory bytes: GGUF is little-endian.
  if (endianness() !== "LE") throw new Error("the converter needs a little-endian host");
  const checkpoint = await SafetensorsCheckpoint.open(dir);
  try {
    const hp = hyperparameters(arch, config, checkpoint);
    const fileType = outputFileType(checkpoint);
    const plan = planTensors(hp, config, checkpoint, fileType.matrixType);
    const metadata = new Map<string, GgufValue>([
      ["general.architecture", gguf.string(arch)],
      ["general.name", gguf.string(typeof config.model_type === "string" ? config.model_type.slice(0, 80) : arch)],
      ["general.file_type", gguf.uint32(fileType.ftype)],
      ...modelMetadata(hp, config),
      ...(await tokenizerMetadata(dir, config, hp.vocab)),
    ]);
    try {
      await writeGgufFile(
        outPath,
        metadata,
        plan.map((t) => ({ name: t.name, dims: t.dims, type: t.type })),
        (i) => encode(plan[i]!),
      );
    } catch (e) {
      await rm(outPath, { force: true });
      throw e;
    }
  } finally {
    await checkpoint.close();
  }
  return { architecture, ggufArchitecture: arch, task: "generate" };
}

export function isConverterError(
  e: unknown,
): e is CheckpointError | SafetensorsError | TokenizerError | SentencePieceError {
  return (
    e instanceof CheckpointError ||
    e instanceof SafetensorsError ||
    e instanceof TokenizerError ||
    e instanceof SentencePieceError
  );
}

function int(config: Record<string, unknown>, key: string, fallback?: number): number {
  const v = config[key] ?? fallback;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0)
    throw new CheckpointError(`config.json: ${key} must be a positive integer`);
  return v;
}

function hyperparameters(
  arch: "llama" | "qwen2",
  config: Record<string, unknown>,
  checkpoint: SafetensorsCheckpoint,
): Hparams {
  const hidden = int(config, "hidden_size");
  const heads = int(config, "num_attention_heads");
  const kvHeads = int(config, "num_key_value_heads", heads);
  const headDim = config.head_dim == null ? hidden / heads : int(config, "head_dim");
  if (!Number.isInteger(headDim) || headDim % 2 !== 0)
    throw new CheckpointError(
      "config.json: the head size (hidden_size / num_attention_heads or head_dim) must be an even integer",
    );
  if (heads % kvHeads !== 0)
    throw new CheckpointError("config.json: num_attention_heads must be a multiple of num_key_value_heads");
  const act = config.hidden_act ?? config.hidden_activation ?? "silu";
  if (act !== "silu")
    throw new CheckpointError(
      `config.json: hidden_act "${String(act).slice(0, 40)}" is not supported (llama-family models use silu)`,
    );
  if (config.mlp_bias === true)
    throw new CheckpointError("config.json: mlp_bias is not supported by llama.cpp's llama architecture");
  const experts = config.num_local_experts == null ? 0 : int(config, "num_local_experts");
  const embed = checkpoint.info("model.embed_tokens.weight").shape;
  if (embed.length !== 2 || embed[1] !== hidden)
    throw new CheckpointError("model.embed_tokens.weight does not have hidden_size columns");
  return {
    arch,
    hidden,
    ff: int(config, "intermediate_size"),
    layers: int(config, "num_hidden_layers"),
    heads,
    kvHeads,
    headDim,
    vocab: embed[0]!,
    experts,
    expertsUsed: experts > 0 ? int(config, "num_experts_per_tok") : 0,
    // Where config.json does not say, a checkpoint without lm_head.weight can only mean tied.
    tied:
      config.tie_word_embeddings === true ||
      (config.tie_word_embeddings === undefined && !checkpoint.has("lm_head.weight")),
  };
}

/**
 * The file's tensor type: float32 and float16 checkpoints keep their precision; bfloat16 becomes
 * float32 (exact, and llama.cpp's CPU matmul then keeps float32 activations, so the converted model
 * computes as transformers does in float32; BF16 weights would round activations to bfloat16).
 */
function outputFileType(checkpoint: SafetensorsCheckpoint): { ftype: number; matrixType: number } {
  const dtypes = new Set([...checkpoint.tensors.values()].filter((t) => t.shape.length >= 2).map((t) => t.dtype));
  if (dtypes.size === 1 && dtypes.has("F16")) return { ftype: LLAMA_FTYPE.MOSTLY_F16, matrixType: GGML_TYPE.F16 };
  return { ftype: LLAMA_FTYPE.ALL_F32, matrixType: GGML_TYPE.F32 };
}

function modelMetadata(hp: Hparams, config: Record<string, unknown>): [string, GgufValue][] {
  const a = hp.arch;
  const eps = config.rms_norm_eps ?? 1e-6;
  if (typeof eps !== "number" || !(eps > 0))
    throw new CheckpointError("config.json: rms_norm_eps must be a positive number");
  const rope = (config.rope_parameters ?? config.rope_scaling ?? {}) as Record<string, unknown>;
  const theta = config.rope_theta ?? rope.rope_theta ?? 10000;
  if (typeof theta !== "number" || !(theta > 0))
    throw new CheckpointError("config.json: rope_theta must be a positive number");
  const out: [string, GgufValue][] = [
    [`${a}.vocab_size`, gguf.uint32(hp.vocab)],
    [`${a}.context_length`, gguf.uint32(int(config, "max_position_embeddings", 4096))],
    [`${a}.embedding_length`, gguf.uint32(hp.hidden)],
    [`${a}.feed_forward_length`, gguf.uint32(hp.ff)],
    [`${a}.block_count`, gguf.uint32(hp.layers)],
    [`${a}.attention.head_count`, gguf.uint32(hp.heads)],
    [`${a}.attention.head_count_kv`, gguf.uint32(hp.kvHeads)],
    [`${a}.attention.layer_norm_rms_epsilon`, gguf.float32(eps)],
    [`${a}.rope.freq_base`, gguf.float32(theta)],
    [`${a}.rope.dimension_count`, gguf.uint32(hp.headDim)],
  ];
  if (hp.headDim !== hp.hidden / hp.heads) {
    out.push(
      [`${a}.attention.key_length`, gguf.uint32(hp.headDim)],
      [`${a}.attention.value_length`, gguf.uint32(hp.headDim)],
    );
  }
  const type = rope.rope_type ?? rope.type ?? "default";
  if (type === "linear" || type === "yarn") {
    const factor = rope.factor;
    if (typeof factor !== "number" || !(factor > 0))
      throw new CheckpointError(`config.json: ${type} RoPE scaling needs a positive factor`);
    out.push([`${a}.rope.scaling.type`, gguf.string(type)], [`${a}.rope.scaling.factor`, gguf.float32(factor)]);
    if (type === "yarn" && typeof rope.original_max_position_embeddings === "number") {
      out.push([`${a}.rope.scaling.original_context_length`, gguf.uint32(rope.original_max_position_embeddings)]);
    }
  } else if (type !== "default" && type !== "llama3") {
    throw new CheckpointError(
      `config.json: RoPE scaling "${String(type).slice(0, 40)}" is not supported; supported: default, linear, yarn, llama3`,
    );
  }
  if (hp.experts > 0)
    out.push([`${a}.expert_count`, gguf.uint32(hp.experts)], [`${a}.expert_used_count`, gguf.uint32(hp.expertsUsed)]);
  return out;
}

/**
 * Llama 3.1's RoPE scaling as llama.cpp takes it: a per-frequency divisor tensor (rope_freqs),
 * computed as transformers' `_compute_llama3_parameters` scales the inverse frequencies.
 */
function llama3RopeFactors(config: Record<string, unknown>, headDim: number): Float32Array | undefined {
  const rope = (config.rope_parameters ?? config.rope_scaling ?? {}) as Record<string, unknown>;
  if ((rope.rope_type ?? rope.type) !== "llama3") return undefined;
  const num = (v: unknown, fallback: number, what: string) => {
    const x = v ?? fallback;
    if (typeof x !== "number" || !(x > 0))
      throw new CheckpointError(`config.json: llama3 RoPE scaling needs a positive ${what}`);
    return x;
  };
  const theta = num(config.rope_theta ?? rope.rope_theta, 10000, "rope_theta");
  const factor = num(rope.factor, 8, "factor");
  const low = num(rope.low_freq_factor, 1, "low_freq_factor");
  const high = num(rope.high_freq_factor, 4, "high_freq_factor");
  const original = num(rope.original_max_position_embeddings, 8192, "original_max_position_embeddings");
  if (high <= low)
    throw new CheckpointError("config.json: llama3 RoPE scaling needs high_freq_factor > low_freq_factor");
  const out = new Float32Array(headDim / 2);
  for (let i = 0; i < out.length; i++) {
    const freq = 1 / theta ** ((2 * i) / headDim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < original / high) out[i] = 1;
    else if (wavelen > original / low) out[i] = factor;
    else {
      const smooth = (original / wavelen - low) / (high - low);
      out[i] = 1 / ((1 - smooth) / factor + smooth);
    }
  }
  return out;
}

function planTensors(
  hp: Hparams,
  config: Record<string, unknown>,
  ck: SafetensorsCheckpoint,
  matrixType: number,
): Planned[] {
  // Checks the shape up front, so a bad checkpoint fails before the output file is created.
  const source = (name: string, shape: number[]): string => {
    const got = ck.info(name).shape;
    if (got.length !== shape.length || got.some((d, i) => d !== shape[i])) {
      throw new CheckpointError(
        `tensor ${name} has shape [${got.join(", ")}], expected [${shape.join(", ")}] from config.json`,
      );
    }
    return name;
  };
  // Rows are read a few MiB at a time, so even a large embedding never sits in memory whole. A permuted
  // tensor is read in whole heads (`group` rows), the unit its permutation works on.
  const plain = (name: string, from: string, shape: number[], permuted = false): Planned => {
    source(from, shape);
    const rows = shape[0]!;
    const cols = shape.slice(1).reduce((a, b) => a * b, 1);
    const group = permuted ? hp.headDim : 1;
    const transform = permuted
      ? (x: Float32Array) => permuteRows(x, x.length / cols / hp.headDim, hp.headDim)
      : undefined;
    const step = Math.max(group, Math.floor(CHUNK_BYTES / 4 / cols / group) * group);
    return {
      name,
      dims: [...shape].reverse(),
      // Norms, biases and the router stay float32, as llama.cpp's converter keeps them.
      type: shape.length >= 2 && !name.endsWith("ffn_gate_inp.weight") ? matrixType : GGML_TYPE.F32,
      parts: async function* () {
        for (let r = 0; r < rows; r += step) {
          const x = await ck.readRows(from, r, Math.min(rows, r + step));
          yield transform ? transform(x) : x;
        }
      },
    };
  };
  const { hidden, ff, heads, kvHeads, headDim, vocab } = hp;
  // llama.cpp's llama architecture rotates interleaved pairs (Meta's layout); transformers' Llama rotates
  // halves, having permuted the rows when it converted Meta's weights. Undo that; Qwen2 rotates halves in both.
  const permute = hp.arch === "llama";

  const out: Planned[] = [
    plain("token_embd.weight", "model.embed_tokens.weight", [vocab, hidden]),
    plain("output_norm.weight", "model.norm.weight", [hidden]),
  ];
  const freqs = llama3RopeFactors(config, headDim);
  if (freqs)
    out.push({
      name: "rope_freqs.weight",
      dims: [freqs.length],
      type: GGML_TYPE.F32,
      parts: async function* () {
        yield freqs;
      },
    });
  if (!hp.tied) out.push(plain("output.weight", "lm_head.weight", [vocab, hidden]));
  for (let i = 0; i < hp.layers; i++) {
    const p = `model.layers.${i}`;
    const b = `blk.${i}`;
    out.push(
      plain(`${b}.attn_norm.weight`, `${p}.input_layernorm.weight`, [hidden]),
      plain(`${b}.attn_q.weight`, `${p}.self_attn.q_proj.weight`, [heads * headDim, hidden], permute),
      plain(`${b}.attn_k.weight`, `${p}.self_attn.k_proj.weight`, [kvHeads * headDim, hidden], permute),
      plain(`${b}.attn_v.weight`, `${p}.self_attn.v_proj.weight`, [kvHeads * headDim, hidden]),
      plain(`${b}.attn_output.weight`, `${p}.self_attn.o_proj.weight`, [hidden, heads * headDim]),
    );
    // Qwen2 always has q/k/v biases; Llama only with attention_bias (then o_proj has one too).
    if (ck.has(`${p}.self_attn.q_proj.bias`) || hp.arch === "qwen2") {
      out.push(
        plain(`${b}.attn_q.bias`, `${p}.self_attn.q_proj.bias`, [heads * headDim], permute),
        plain(`${b}.attn_k.bias`, `${p}.self_attn.k_proj.bias`, [kvHeads * headDim], permute),
        plain(`${b}.attn_v.bias`, `${p}.self_attn.v_proj.bias`, [kvHeads * headDim]),
      );
    }
    if (ck.has(`${p}.self_attn.o_proj.bias`))
      out.push(plain(`${b}.attn_output.bias`, `${p}.self_attn.o_proj.bias`, [hidden]));
    out.push(plain(`${b}.ffn_norm.weight`, `${p}.post_attention_layernorm.weight`, [hidden]));
    if (hp.experts > 0) out.push(...expertTensors(hp, ck, i, matrixType, source));
    else {
      out.push(
        plain(`${b}.ffn_gate.weight`, `${p}.mlp.gate_proj.weight`, [ff, hidden]),
        plain(`${b}.ffn_up.weight`, `${p}.mlp.up_proj.weight`, [ff, hidden]),
        plain(`${b}.ffn_down.weight`, `${p}.mlp.down_proj.weight`, [hidden, ff]),
      );
    }
  }
  return out;
}

/**
 * Mixtral's experts, stacked into one 3-D tensor per projection (ggml dims [in, out, expert]: each
 * expert's [out][in] matrix is one slice). Checkpoints name them per expert (block_sparse_moe.experts.E.w1/w2/w3,
 * as transformers saves them) or fused (mlp.experts.gate_up_proj/down_proj, transformers 5's in-memory form).
 */
function expertTensors(
  hp: Hparams,
  ck: SafetensorsCheckpoint,
  i: number,
  matrixType: number,
  source: (name: string, shape: number[]) => string,
): Planned[] {
  const { hidden, ff, experts } = hp;
  const b = `blk.${i}`;
  const legacy = `model.layers.${i}.block_sparse_moe`;
  const fused = `model.layers.${i}.mlp`;
  const isFused = !ck.has(`${legacy}.gate.weight`) && ck.has(`${fused}.gate.weight`);
  const router = source(isFused ? `${fused}.gate.weight` : `${legacy}.gate.weight`, [experts, hidden]);
  const stacked = (name: string, out: number, inp: number, read: (e: number) => Promise<Float32Array>): Planned => ({
    name,
    dims: [inp, out, experts],
    type: matrixType,
    parts: async function* () {
      for (let e = 0; e < experts; e++) yield await read(e);
    },
  });
  const tensors: Planned[] = [
    {
      name: `${b}.ffn_gate_inp.weight`,
      dims: [hidden, experts],
      type: GGML_TYPE.F32,
      parts: async function* () {
        yield await ck.read(router);
      },
    },
  ];
  if (isFused) {
    const gateUp = source(`${fused}.experts.gate_up_proj`, [experts, 2 * ff, hidden]);
    const down = source(`${fused}.experts.down_proj`, [experts, hidden, ff]);
    // gate_up_proj holds each expert's gate rows, then its up rows; only that expert is read.
    const half = (e: number, which: 0 | 1) =>
      ck.readRows(gateUp, e, e + 1).then((x) => x.subarray(which * ff * hidden, (which + 1) * ff * hidden));
    tensors.push(
      stacked(`${b}.ffn_gate_exps.weight`, ff, hidden, (e) => half(e, 0)),
      stacked(`${b}.ffn_down_exps.weight`, hidden, ff, (e) => ck.readRows(down, e, e + 1)),
      stacked(`${b}.ffn_up_exps.weight`, ff, hidden, (e) => half(e, 1)),
    );
  } else {
    const w = (e: number, k: string, shape: number[]) => source(`${legacy}.experts.${e}.${k}.weight`, shape);
    for (let e = 0; e < experts; e++) {
      w(e, "w1", [ff, hidden]);
      w(e, "w2", [hidden, ff]);
      w(e, "w3", [ff, hidden]);
    }
    tensors.push(
      stacked(`${b}.ffn_gate_exps.weight`, ff, hidden, (e) => ck.read(w(e, "w1", [ff, hidden]))),
      stacked(`${b}.ffn_down_exps.weight`, hidden, ff, (e) => ck.read(w(e, "w2", [hidden, ff]))),
      stacked(`${b}.ffn_up_exps.weight`, ff, hidden, (e) => ck.read(w(e, "w3", [ff, hidden]))),
    );
  }
  return tensors;
}

/**
 * Within each head, row (half i, index j) moves to (index j, half i): transformers keeps the two
 * rotated halves of a head apart, llama.cpp's llama RoPE wants each pair adjacent. Works on a
 * weight (rows × cols) or a bias (cols = 1).
 */
export function permuteRows(x: Float32Array, heads: number, headDim: number): Float32Array {
  const cols = x.length / (heads * headDim);
  const half = headDim / 2;
  const out = new Float32Array(x.length);
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < half; j++) {
        const from = (h * headDim + i * half + j) * cols;
        const to = (h * headDim + j * 2 + i) * cols;
        out.set(x.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

/** The tensor's bytes in its GGUF type, one source part at a time. */
async function* encode(t: Planned): AsyncGenerator<Uint8Array> {
  for await (const values of t.parts()) {
    if (t.type === GGML_TYPE.F32) {
      yield new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    } else {
      const bytes = new Uint8Array(values.length * 2);
      const view = new DataView(bytes.buffer);
      for (let k = 0; k < values.length; k++) view.setFloat16(k * 2, values[k]!, true);
      yield bytes;
    }
  }
}

/** `convertLlamaFamily` with the checkpoint's own problems reported as a 400 naming them (messages carry no server paths). */
export const llamaConverter = async (
  dir: string,
  config: Record<string, unknown>,
  outPath: string,
): Promise<ConversionResult> => {
  try {
    return await convertLlamaFamily(dir, config, outPath);
  } catch (e) {
    if (isConverterError(e))
      throw new PlatformError(400, "invalid_artifact", `cannot convert the checkpoint: ${e.message}`, "source");
    throw e;
  }
};
