/**
 * Which tensors of a GGUF become which type, decided from the header alone, before any byte is
 * written: the default mixture llama-quantize uses for Q8_0 and Q4_0 on dense models, with the
 * two places where it would reach for a type this quantizer does not write (docs/quantization.md):
 * - int4's output tensor: llama-quantize gives it Q6_K, a k-quant; here it gets Q8_0, the type
 *   llama-quantize itself falls back to when Q6_K does not fit the rows.
 * - rows that are not whole 32-value blocks: llama-quantize gives up on the file; here such
 *   tensors keep their own precision (stories260K's ffn_down, rows of 172).
 */
import { GGML_QNT_VERSION, GGML_TYPE, type GgufValue, ggmlTypeName, LLAMA_FTYPE } from "../gguf/format.ts";
import type { GgufInfo, GgufTensorInfo } from "../gguf/read.ts";
import { QK } from "./blocks.ts";

export type Quantization = "int8" | "int4";

export const TARGETS: Readonly<Record<Quantization, { type: number; ftype: number; name: string }>> = {
  int8: { type: GGML_TYPE.Q8_0, ftype: LLAMA_FTYPE.MOSTLY_Q8_0, name: "Q8_0" },
  int4: { type: GGML_TYPE.Q4_0, ftype: LLAMA_FTYPE.MOSTLY_Q4_0, name: "Q4_0" },
};

/** Types the quantizer reads: full and half precision. */
const SOURCE_TYPES: ReadonlySet<number> = new Set([GGML_TYPE.F32, GGML_TYPE.F16, GGML_TYPE.BF16]);
/** ggml's plain integer tensors (I8..I64): not weights to quantize, and no sign the file is quantized. */
const INTEGER_TYPES: ReadonlySet<number> = new Set([24, 25, 26, 27]);

/**
 * Weights llama-quantize never quantizes although they are 2-D (llama-quant.cpp): norms, MoE
 * routers, BERT's position and token-type embeddings, T5's relative position bias, and the small
 * convolution and mixing weights of Mamba, RWKV and LFM2 whose accuracy matters more than their size.
 */
const KEPT = [
  "_norm.weight",
  "ffn_gate_inp.weight",
  "altup",
  "laurel",
  "per_layer_model_proj",
  "ssm_conv1d.weight",
  "shortconv.conv.weight",
  "time_mix_first.weight",
  "time_mix_w0.weight",
  "time_mix_w1.weight",
  "time_mix_w2.weight",
  "time_mix_v0.weight",
  "time_mix_v1.weight",
  "time_mix_v2.weight",
  "time_mix_a0.weight",
  "time_mix_a1.weight",
  "time_mix_a2.weight",
  "time_mix_g1.weight",
  "time_mix_g2.weight",
  "time_mix_decay_w1.weight",
  "time_mix_decay_w2.weight",
  "time_mix_lerp_fused.weight",
  "attn_rel_b.weight",
];
const KEPT_EXACT = new Set(["position_embd.weight", "token_types.weight"]);

export type PlannedTensor = GgufTensorInfo & { to: number };

export type QuantizationPlan =
  /** The file already is the asked type: serve it unchanged. */
  | { kind: "as-is"; reason: string }
  | { kind: "quantize"; quantization: Quantization; metadata: Map<string, GgufValue>; tensors: PlannedTensor[] };

/** Refused files: the message says why, for the replica's status. */
export class QuantizationError extends Error {
  override name = "QuantizationError";
}

/** Whether llama-quantize's default would quantize this tensor, and this quantizer can (whole blocks). */
export function isQuantizable(t: Pick<GgufTensorInfo, "name" | "dims">): boolean {
  if (!t.name.endsWith("weight")) return false;
  if (t.dims.length < 2 || t.dims[0]! % QK !== 0) return false;
  if (KEPT_EXACT.has(t.name)) return false;
  return !KEPT.some((part) => t.name.includes(part));
}

export function planQuantization(info: GgufInfo, quantization: Quantization): QuantizationPlan {
  const target = TARGETS[quantization];
  const fileType = info.metadata.get("general.file_type");
  if (fileType?.type === "uint32" && fileType.value === target.ftype)
    return { kind: "as-is", reason: `general.file_type is already MOSTLY_${target.name}` };
  const splits = info.metadata.get("split.count");
  if (splits && splits.type !== "array" && Number(splits.value) > 1) {
    throw new QuantizationError(
      "the model is split over several GGUF files, which the quantizer does not read; register a single-file GGUF",
    );
  }

  // A quantized file cannot be requantized without compounding the error (llama-quantize refuses
  // too, without --allow-requantize); one whose weights already are the asked type is served as is.
  const quantized = info.tensors.filter((t) => !SOURCE_TYPES.has(t.type) && !INTEGER_TYPES.has(t.type));
  if (quantized.length > 0) {
    if (
      quantized.every(
        (t) =>
          t.type === target.type || (quantization === "int4" && t.type === GGML_TYPE.Q8_0 && isOutputTensor(info, t)),
      )
    ) {
      return { kind: "as-is", reason: `its weights already are ${target.name}` };
    }
    const first = quantized[0]!;
    throw new QuantizationError(
      `the model is already quantized (${first.name} is ${ggmlTypeName(first.type)}); quantization ${quantization} needs an F32, F16 or BF16 GGUF, or one already in ${target.name}`,
    );
  }

  const tensors = info.tensors.map((t): PlannedTensor => {
    if (!isQuantizable(t)) return { ...t, to: t.type };
    // The output projection decides every token: llama-quantize gives it more bits than the rest at 4 bits.
    const to = quantization === "int4" && isOutputTensor(info, t) ? GGML_TYPE.Q8_0 : target.type;
    return { ...t, to };
  });
  const metadata = new Map(info.metadata);
  // As llama-quantize: stamp the quantization version and the file type; every other key is kept.
  metadata.set("general.quantization_version", { type: "uint32", value: GGML_QNT_VERSION });
  metadata.set("general.file_type", { type: "uint32", value: target.ftype });
  return { kind: "quantize", quantization, metadata, tensors };
}

/** output.weight, or the token embedding where the model ties its output to it (no output.weight). */
function isOutputTensor(info: GgufInfo, t: GgufTensorInfo): boolean {
  if (t.name === "output.weight") return true;
  return t.name === "token_embd.weight" && !info.tensors.some((o) => o.name === "output.weight");
}

/**
 * Why a registered version cannot be deployed with `quantization`, judged from its record's GGUF
 * summary (`gguf.quantization`, e.g. "F32", "Q4_K_M"), so `deploy` fails at once instead of a
 * replica failing later; undefined when it can (or the summary does not say).
 */
export function deployRefusal(summary: string | null | undefined, quantization: Quantization): string | undefined {
  if (summary === null || summary === undefined) return undefined;
  const name = summary.toUpperCase();
  if (name === "F32" || name === "F16" || name === "BF16" || name === TARGETS[quantization].name) return undefined;
  return `runtime.quantization: the model is already quantized (${summary}); ${quantization} is made from an F32, F16 or BF16 GGUF (or served as is from a ${TARGETS[quantization].name} one)`;
}
