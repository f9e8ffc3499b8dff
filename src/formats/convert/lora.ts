/**
 * Converts a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) to the GGUF
 * adapter file llama.cpp loads (`llama_adapter_lora_init`), as llama.cpp's convert_lora_to_gguf.py
 * writes it: `general.type` "adapter", `adapter.type` "lora", `adapter.lora.alpha`, and per
 * adapted weight `<gguf name>.lora_a` (ggml dims [in, r]) and `.lora_b` ([r, out]). The names are
 * the base's as src/formats/convert/llama.ts writes them, and lora_b of attn_q/attn_k gets the same
 * RoPE row permutation the base's q/k weights got (B's rows are the weight's output rows; A is not
 * touched). The base's GGUF file, the one the replica loads, supplies the architecture, the head
 * counts and the shapes every pair is checked against.
 */
import { rm } from "node:fs/promises";
import { endianness } from "node:os";
import { PlatformError } from "../../contracts/errors.ts";
import { GGML_TYPE, type GgufValue, gguf, LLAMA_FTYPE, readGgufInfo, writeGgufFile } from "../gguf/index.ts";
import { permuteRows } from "./llama.ts";
import { SafetensorsCheckpoint, SafetensorsError } from "./safetensors.ts";

/** The projections an adapter may adapt, by their transformers module name, and llama.cpp's tensor name for each. */
export const LORA_GGUF_NAMES: Readonly<Record<string, string>> = {
  q_proj: "attn_q",
  k_proj: "attn_k",
  v_proj: "attn_v",
  o_proj: "attn_output",
  gate_proj: "ffn_gate",
  up_proj: "ffn_up",
  down_proj: "ffn_down",
};

const BASE_NAME = /^model\.layers\.(\d{1,5})\.(self_attn|mlp)\.([a-z_]+)\.weight$/;

/**
 * The GGUF name of a base weight (`model.layers.3.self_attn.q_proj.weight` → `blk.3.attn_q.weight`),
 * undefined for a weight llama.cpp cannot take a LoRA pair for here (embeddings, lm_head, experts).
 */
export function ggufWeightName(hfName: string): string | undefined {
  const m = BASE_NAME.exec(hfName);
  if (!m) return undefined;
  const [, layer, block, module] = m;
  const gguf = LORA_GGUF_NAMES[module!];
  const expected = module === "q_proj" || module === "k_proj" || module === "v_proj" || module === "o_proj";
  if (!gguf || (block === "self_attn") !== expected) return undefined;
  return `blk.${layer}.${gguf}.weight`;
}

/** A base weight name from its GGUF name (the inverse of `ggufWeightName`). */
export function hfWeightName(ggufName: string): string | undefined {
  const m = /^blk\.(\d{1,5})\.([a-z_]+)\.weight$/.exec(ggufName);
  if (!m) return undefined;
  const module = Object.entries(LORA_GGUF_NAMES).find(([, g]) => g === m[2])?.[0];
  if (!module) return undefined;
  return `model.layers.${m[1]}.${m[2]!.startsWith("attn") ? "self_attn" : "mlp"}.${module}.weight`;
}

/** One adapted weight: its base name, its pair's tensor names in adapter_model.safetensors, the rank. */
export type LoraPair = { base: string; a: string; b: string; rank: number };

/** A problem with the adapter itself (a lone lora_A, an unexpected tensor): the caller's 400. */
export class LoraError extends Error {}

/**
 * The adapter's tensors paired per base weight (`base_model.model.<weight>` with `.lora_A.weight`
 * and `.lora_B.weight`), or a LoraError naming the first tensor that is not such a pair's.
 */
export function pairTensors(names: Iterable<string>): LoraPair[] {
  const pairs = new Map<string, { a?: string; b?: string }>();
  for (const name of names) {
    const m = /^(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[A-Za-z0-9_-]+)?\.weight$/.exec(name);
    if (!m) {
      const what = /lora_embedding|embed_tokens|lm_head/.test(name)
        ? " (adapters of the embeddings or lm_head are not served)"
        : /\.base_layer\.|modules_to_save/.test(name)
          ? " (full copies of modules, modules_to_save, are not served)"
          : "";
      throw new LoraError(`adapter_model.safetensors: ${name.slice(0, 160)} is not a lora_A or lora_B weight${what}`);
    }
    const base = `${m[1]}.weight`;
    const pair = pairs.get(base) ?? {};
    if (m[2] === "A") pair.a = name;
    else pair.b = name;
    pairs.set(base, pair);
  }
  const out: LoraPair[] = [];
  for (const [base, p] of pairs) {
    if (!p.a || !p.b)
      throw new LoraError(
        `adapter_model.safetensors: ${base} has a lora_${p.a ? "A" : "B"} without its lora_${p.a ? "B" : "A"}`,
      );
    out.push({ base, a: p.a, b: p.b, rank: 0 });
  }
  return out.sort((x, y) => (x.base < y.base ? -1 : x.base > y.base ? 1 : 0));
}

/**
 * Writes the GGUF adapter for the PEFT adapter in `dir` at `outPath`, for the base GGUF at
 * `basePath`. `alpha` is what llama.cpp divides by the rank (rsLoRA's alpha/√r is written as
 * alpha·√r / r). A mismatch with the base is a 400 naming the tensor.
 */
export async function convertLoraAdapter(
  dir: string,
  basePath: string,
  outPath: string,
  alpha: number,
): Promise<{ tensors: number }> {
  if (endianness() !== "LE") throw new Error("the converter needs a little-endian host");
  // The reader's messages name the file: a server path, which no error here may carry.
  const base = await readGgufInfo(basePath).catch(() => {
    throw new Error("the base model's GGUF header cannot be read");
  });
  const meta = (k: string) => base.metadata.get(k)?.value;
  const arch = String(meta("general.architecture") ?? "");
  const heads = Number(meta(`${arch}.attention.head_count`));
  const kvHeads = Number(meta(`${arch}.attention.head_count_kv`) ?? heads);
  const baseDims = new Map(base.tensors.map((t) => [t.name, t.dims]));
  const adapter = await SafetensorsCheckpoint.open(dir, "adapter_model.safetensors").catch((e: unknown) => {
    throw invalid(e instanceof SafetensorsError ? e.message : "adapter_model.safetensors cannot be read");
  });
  try {
    const pairs = pairTensorsOrThrow(adapter.tensors.keys());
    const planned: { name: string; dims: number[]; read: () => Promise<Float32Array> }[] = [];
    for (const p of pairs) {
      const name = ggufWeightName(p.base);
      if (!name) throw invalid(`${p.base}: llama.cpp takes LoRA pairs for the attention and MLP projections only`);
      const dims = baseDims.get(name);
      if (!dims) throw invalid(`${p.base}: the base model has no ${name}`);
      const [inDim, outDim] = dims as [number, number];
      const a = adapter.info(p.a).shape;
      const b = adapter.info(p.b).shape;
      const rank = a[0]!;
      if (a.length !== 2 || b.length !== 2 || a[1] !== inDim || b[0] !== outDim || b[1] !== rank) {
        throw invalid(
          `${p.base}: lora_A is [${a.join(", ")}] and lora_B [${b.join(", ")}]; the base weight is [${outDim}, ${inDim}], so they must be [r, ${inDim}] and [${outDim}, r]`,
        );
      }
      // llama.cpp's llama RoPE wants each rotated pair adjacent: B's output rows move as the base's did.
      const permuteHeads =
        arch === "llama" && name.endsWith(".attn_q.weight")
          ? heads
          : arch === "llama" && name.endsWith(".attn_k.weight")
            ? kvHeads
            : 0;
      if (permuteHeads > 0 && outDim % permuteHeads !== 0)
        throw invalid(`${p.base}: ${outDim} output rows do not split into ${permuteHeads} heads`);
      const headDim = permuteHeads > 0 ? outDim / permuteHeads : 0;
      planned.push(
        { name: `${name}.lora_a`, dims: [inDim, rank], read: () => adapter.read(p.a) },
        {
          name: `${name}.lora_b`,
          dims: [rank, outDim],
          read: async () => {
            const values = await adapter.read(p.b);
            return permuteHeads > 0 ? permuteRows(values, permuteHeads, headDim) : values;
          },
        },
      );
    }
    const metadata = new Map<string, GgufValue>([
      ["general.architecture", gguf.string(arch)],
      ["general.type", gguf.string("adapter")],
      ["general.file_type", gguf.uint32(LLAMA_FTYPE.ALL_F32)],
      ["adapter.type", gguf.string("lora")],
      ["adapter.lora.alpha", gguf.float32(alpha)],
    ]);
    try {
      await writeGgufFile(
        outPath,
        metadata,
        planned.map((t) => ({ name: t.name, dims: t.dims, type: GGML_TYPE.F32 })),
        async function* (i) {
          const values = await planned[i]!.read();
          yield new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
        },
      );
    } catch (e) {
      await rm(outPath, { force: true });
      throw e;
    }
    return { tensors: planned.length };
  } finally {
    await adapter.close();
  }
}

function pairTensorsOrThrow(names: Iterable<string>): LoraPair[] {
  try {
    return pairTensors(names);
  } catch (e) {
    if (e instanceof LoraError) throw invalid(e.message);
    throw e;
  }
}

function invalid(message: string): PlatformError {
  return new PlatformError(400, "invalid_adapter", `cannot convert the adapter: ${message}`, "adapter");
}
