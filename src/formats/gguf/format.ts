/**
 * The fixed numbers of the GGUF format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
 * metadata value type ids, ggml tensor types with their block geometry, and the value shape the
 * reader returns and the writer takes. Kept apart so the reader, the writer and the quantizer agree.
 */

export const GGUF_MAGIC = "GGUF";
/** v2 and v3 share one layout (64-bit counts); v1 (32-bit counts) predates every model still in use. */
export const GGUF_VERSION = 3;
export const DEFAULT_ALIGNMENT = 32;

export const VALUE_TYPE = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;
export type ValueTypeName = keyof typeof VALUE_TYPE;
export const VALUE_TYPE_NAME: Readonly<Record<number, ValueTypeName>> = Object.fromEntries(
  Object.entries(VALUE_TYPE).map(([name, id]) => [id, name as ValueTypeName]),
);

export type NumberType = "uint8" | "int8" | "uint16" | "int16" | "uint32" | "int32" | "float32" | "float64";
export type BigIntType = "uint64" | "int64";

/** Byte widths of the fixed-size value types. */
export const VALUE_WIDTH: Readonly<Record<NumberType | BigIntType | "bool", number>> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  float64: 8,
  uint64: 8,
  int64: 8,
  bool: 1,
};

/** 64-bit integers stay bigint: token ids and sizes never need them, and a silent rounding would corrupt a round trip. */
export type GgufScalar =
  | { type: NumberType; value: number }
  | { type: BigIntType; value: bigint }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string };

export type GgufArray =
  | { type: "array"; of: NumberType; value: ArrayLike<number> }
  | { type: "array"; of: BigIntType; value: readonly bigint[] }
  | { type: "array"; of: "bool"; value: readonly boolean[] }
  | { type: "array"; of: "string"; value: readonly string[] }
  | { type: "array"; of: "array"; value: readonly GgufArray[] };

export type GgufValue = GgufScalar | GgufArray;

/** Short constructors, so metadata reads as a table (`"llama.block_count": gguf.uint32(2)`). */
export const gguf = {
  uint32: (value: number): GgufValue => ({ type: "uint32", value }),
  int32: (value: number): GgufValue => ({ type: "int32", value }),
  float32: (value: number): GgufValue => ({ type: "float32", value }),
  bool: (value: boolean): GgufValue => ({ type: "bool", value }),
  string: (value: string): GgufValue => ({ type: "string", value }),
  strings: (value: readonly string[]): GgufValue => ({ type: "array", of: "string", value }),
  float32s: (value: ArrayLike<number>): GgufValue => ({ type: "array", of: "float32", value }),
  int32s: (value: ArrayLike<number>): GgufValue => ({ type: "array", of: "int32", value }),
};

/**
 * ggml tensor types: id → name, elements per block and bytes per block (ggml.c's type_traits).
 * Every type is listed so that any file's tensor sizes can be computed, and so copied unchanged.
 */
export const GGML_TYPES: Readonly<Record<number, { name: string; blockSize: number; blockBytes: number }>> = {
  0: { name: "F32", blockSize: 1, blockBytes: 4 },
  1: { name: "F16", blockSize: 1, blockBytes: 2 },
  2: { name: "Q4_0", blockSize: 32, blockBytes: 18 },
  3: { name: "Q4_1", blockSize: 32, blockBytes: 20 },
  6: { name: "Q5_0", blockSize: 32, blockBytes: 22 },
  7: { name: "Q5_1", blockSize: 32, blockBytes: 24 },
  8: { name: "Q8_0", blockSize: 32, blockBytes: 34 },
  9: { name: "Q8_1", blockSize: 32, blockBytes: 36 },
  10: { name: "Q2_K", blockSize: 256, blockBytes: 84 },
  11: { name: "Q3_K", blockSize: 256, blockBytes: 110 },
  12: { name: "Q4_K", blockSize: 256, blockBytes: 144 },
  13: { name: "Q5_K", blockSize: 256, blockBytes: 176 },
  14: { name: "Q6_K", blockSize: 256, blockBytes: 210 },
  15: { name: "Q8_K", blockSize: 256, blockBytes: 292 },
  16: { name: "IQ2_XXS", blockSize: 256, blockBytes: 66 },
  17: { name: "IQ2_XS", blockSize: 256, blockBytes: 74 },
  18: { name: "IQ3_XXS", blockSize: 256, blockBytes: 98 },
  19: { name: "IQ1_S", blockSize: 256, blockBytes: 50 },
  20: { name: "IQ4_NL", blockSize: 32, blockBytes: 18 },
  21: { name: "IQ3_S", blockSize: 256, blockBytes: 110 },
  22: { name: "IQ2_S", blockSize: 256, blockBytes: 82 },
  23: { name: "IQ4_XS", blockSize: 256, blockBytes: 136 },
  24: { name: "I8", blockSize: 1, blockBytes: 1 },
  25: { name: "I16", blockSize: 1, blockBytes: 2 },
  26: { name: "I32", blockSize: 1, blockBytes: 4 },
  27: { name: "I64", blockSize: 1, blockBytes: 8 },
  28: { name: "F64", blockSize: 1, blockBytes: 8 },
  29: { name: "IQ1_M", blockSize: 256, blockBytes: 56 },
  30: { name: "BF16", blockSize: 1, blockBytes: 2 },
  34: { name: "TQ1_0", blockSize: 256, blockBytes: 54 },
  35: { name: "TQ2_0", blockSize: 256, blockBytes: 66 },
  39: { name: "MXFP4", blockSize: 32, blockBytes: 17 },
};

export const GGML_TYPE = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, BF16: 30 } as const;

/** llama.h's llama_ftype values the platform writes or recognises as full precision. */
export const LLAMA_FTYPE = { ALL_F32: 0, MOSTLY_F16: 1, MOSTLY_Q4_0: 2, MOSTLY_Q8_0: 7, MOSTLY_BF16: 32 } as const;

/**
 * `general.file_type` (llama.h's llama_ftype) → the quantization it names, as the registry shows
 * it (llama.h's name without LLAMA_FTYPE_, MOSTLY_ or ALL_). Deprecated ids are kept: old files carry them.
 */
export const LLAMA_FTYPE_NAMES: Readonly<Record<number, string>> = {
  0: "F32",
  1: "F16",
  2: "Q4_0",
  3: "Q4_1",
  4: "Q4_1_SOME_F16",
  5: "Q4_2",
  6: "Q4_3",
  7: "Q8_0",
  8: "Q5_0",
  9: "Q5_1",
  10: "Q2_K",
  11: "Q3_K_S",
  12: "Q3_K_M",
  13: "Q3_K_L",
  14: "Q4_K_S",
  15: "Q4_K_M",
  16: "Q5_K_S",
  17: "Q5_K_M",
  18: "Q6_K",
  19: "IQ2_XXS",
  20: "IQ2_XS",
  21: "Q2_K_S",
  22: "IQ3_XS",
  23: "IQ3_XXS",
  24: "IQ1_S",
  25: "IQ4_NL",
  26: "IQ3_S",
  27: "IQ3_M",
  28: "IQ2_S",
  29: "IQ2_M",
  30: "IQ4_XS",
  31: "IQ1_M",
  32: "BF16",
  33: "Q4_0_4_4",
  34: "Q4_0_4_8",
  35: "Q4_0_8_8",
  36: "TQ1_0",
  37: "TQ2_0",
  38: "MXFP4_MOE",
};

/** ggml's GGML_QNT_VERSION, which llama-quantize stamps on every file it writes. */
export const GGML_QNT_VERSION = 2;

export function ggmlTypeName(type: number): string {
  return GGML_TYPES[type]?.name ?? `type ${type}`;
}

/** Bytes of a tensor of `type` with `dims` (ggml order, ne[0] first); throws when rows do not fill whole blocks. */
export function tensorBytes(type: number, dims: readonly number[], name = "tensor"): number {
  const traits = GGML_TYPES[type];
  if (!traits) throw new Error(`${name}: unknown ggml tensor type ${type}`);
  const rowLength = dims[0] ?? 1;
  if (rowLength % traits.blockSize !== 0)
    throw new Error(`${name}: rows of ${rowLength} do not fill whole ${traits.name} blocks of ${traits.blockSize}`);
  const rows = dims.slice(1).reduce((a, b) => a * b, 1);
  return (rowLength / traits.blockSize) * traits.blockBytes * rows;
}

export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

/** `general.alignment` when the metadata sets it (a uint32 multiple of 8, as the spec demands), else 32. */
export function alignmentOf(metadata: ReadonlyMap<string, GgufValue> | Readonly<Record<string, GgufValue>>): number {
  const declared =
    metadata instanceof Map
      ? metadata.get("general.alignment")
      : (metadata as Record<string, GgufValue>)["general.alignment"];
  if (declared === undefined) return DEFAULT_ALIGNMENT;
  if (declared.type !== "uint32" || declared.value <= 0 || declared.value % 8 !== 0) {
    throw new Error("general.alignment must be a uint32 multiple of 8");
  }
  return declared.value;
}
