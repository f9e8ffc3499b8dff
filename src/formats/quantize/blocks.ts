/**
 * ggml's block formats, bit for bit: Q8_0 and Q4_0 as ggml-quants.c's quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref write them (what llama-quantize runs for these types without an imatrix),
 * and the half-precision conversions they and F16/BF16 sources need. Every float step goes
 * through Math.fround because the reference computes in float32: a double intermediate would
 * round some borderline values the other way and the file would differ from llama-quantize's.
 *
 *   block_q8_0 { ggml_half d; int8_t  qs[32]; }   34 bytes, x = d * q
 *   block_q4_0 { ggml_half d; uint8_t qs[16]; }   18 bytes, x = d * (nibble - 8);
 *     qs[j] holds element j in its low nibble and element j + 16 in its high nibble.
 */

export const QK = 32;
export const Q8_0_BLOCK_BYTES = 2 + QK;
export const Q4_0_BLOCK_BYTES = 2 + QK / 2;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsOf = (x: number): number => {
  f32[0] = x;
  return u32[0]!;
};
const fromBits = (bits: number): number => {
  u32[0] = bits;
  return f32[0]!;
};

const SCALE_TO_INF = fromBits(0x77800000);
const SCALE_TO_ZERO = fromBits(0x08800000);

/**
 * float32 → IEEE half bits, round to nearest even, as ggml's ggml_compute_fp32_to_fp16 (the
 * portable path of GGML_FP32_TO_FP16; the F16C and NEON paths round the same way).
 */
export function fp32ToFp16(x: number): number {
  let base = Math.fround(Math.fround(Math.abs(x) * SCALE_TO_INF) * SCALE_TO_ZERO);
  const w = bitsOf(x);
  const shl1w = (w << 1) >>> 0;
  const sign = (w & 0x80000000) >>> 0;
  let bias = (shl1w & 0xff000000) >>> 0;
  if (bias < 0x71000000) bias = 0x71000000;
  base = Math.fround(fromBits((bias >>> 1) + 0x07800000) + base);
  const bits = bitsOf(base);
  const nonsign = ((bits >>> 13) & 0x00007c00) + (bits & 0x00000fff);
  return (sign >>> 16) | (shl1w > 0xff000000 ? 0x7e00 : nonsign);
}

/** IEEE half bits → float32 value (exact: every half is a float32). */
export function fp16ToFp32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** All 65536 halves decoded once: F16 sources convert by table lookup. */
let fp16Table: Float32Array | undefined;
function fp16Lookup(): Float32Array {
  if (!fp16Table) {
    fp16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) fp16Table[h] = fp16ToFp32(h);
  }
  return fp16Table;
}

export function fp16RowToFp32(src: Uint16Array, dst: Float32Array): void {
  const table = fp16Lookup();
  for (let i = 0; i < src.length; i++) dst[i] = table[src[i]!]!;
}

/** bfloat16 is the top half of a float32: widening is exact. */
export function bf16RowToFp32(src: Uint16Array, dst: Float32Array): void {
  const out = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
  for (let i = 0; i < src.length; i++) out[i] = src[i]! << 16;
}

/** The block's scale, little-endian as ggml_half is on every host ggml runs on. */
function putHalf(out: Uint8Array, at: number, h: number): void {
  out[at] = h & 0xff;
  out[at + 1] = h >>> 8;
}

/**
 * C's roundf: half away from zero (Math.round rounds halves up, which differs for negatives).
 * A float32 plus ±0.5 is exact in a double, so truncating it rounds exactly; no branch on the
 * sign, which random weights would mispredict half the time.
 */
function roundf(x: number): number {
  return Math.trunc(x + Math.sign(x) * 0.5);
}

/** Quantizes `x` (a multiple of 32 values) into Q8_0 blocks at `out[offset..]`; returns the bytes written. */
export function quantizeQ8_0(x: Float32Array, out: Uint8Array, offset = 0): number {
  if (x.length % QK !== 0) throw new Error(`Q8_0: ${x.length} values are not whole blocks of ${QK}`);
  const qs = new Int8Array(out.buffer, out.byteOffset, out.byteLength);
  let at = offset;
  for (let b = 0; b < x.length; b += QK) {
    let amax = 0;
    for (let j = 0; j < QK; j++) {
      const a = Math.abs(x[b + j]!);
      // ggml's MAX macro, literally: a NaN is forgotten by the next value instead of sticking
      // (Math.max would keep it).
      // biome-ignore lint/complexity/useMathMinMax: NaN semantics, above
      amax = amax > a ? amax : a;
    }
    const d = Math.fround(amax / 127);
    // C's `d ? 1.0f/d : 0.0f`: NaN is true there, false in JavaScript.
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    putHalf(out, at, fp32ToFp16(d));
    for (let j = 0; j < QK; j++) qs[at + 2 + j] = roundf(Math.fround(x[b + j]! * id));
    at += Q8_0_BLOCK_BYTES;
  }
  return at - offset;
}

/** Quantizes `x` (a multiple of 32 values) into Q4_0 blocks at `out[offset..]`; returns the bytes written. */
export function quantizeQ4_0(x: Float32Array, out: Uint8Array, offset = 0): number {
  if (x.length % QK !== 0) throw new Error(`Q4_0: ${x.length} values are not whole blocks of ${QK}`);
  let at = offset;
  for (let b = 0; b < x.length; b += QK) {
    // The signed value of largest magnitude becomes -8 (the scale takes its sign): the 16 levels
    // -8..7 are lopsided, and putting the extreme on the -8 side uses that extra level.
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const v = x[b + j]!;
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = Math.fround(max / -8);
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    putHalf(out, at, fp32ToFp16(d));
    for (let j = 0; j < QK / 2; j++) {
      const x0 = Math.fround(x[b + j]! * id);
      const x1 = Math.fround(x[b + QK / 2 + j]! * id);
      // (int8_t)(x + 8.5f) truncates toward zero (`| 0` does, the sum being within 0..16.5), then MIN(15, ...).
      const t0 = Math.fround(x0 + 8.5) | 0;
      const t1 = Math.fround(x1 + 8.5) | 0;
      const q0 = Math.min(t0, 15);
      const q1 = Math.min(t1, 15);
      out[at + 2 + j] = q0 | (q1 << 4);
    }
    at += Q4_0_BLOCK_BYTES;
  }
  return at - offset;
}

/** Q8_0 blocks back to floats, as ggml's dequantize_row_q8_0: for tests and error measurements. */
export function dequantizeQ8_0(bytes: Uint8Array, count: number): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(count);
  for (let b = 0; b < count / QK; b++) {
    const at = b * Q8_0_BLOCK_BYTES;
    const d = fp16ToFp32(view.getUint16(at, true));
    for (let j = 0; j < QK; j++) out[b * QK + j] = view.getInt8(at + 2 + j) * d;
  }
  return out;
}

/** Q4_0 blocks back to floats, as ggml's dequantize_row_q4_0. */
export function dequantizeQ4_0(bytes: Uint8Array, count: number): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(count);
  for (let b = 0; b < count / QK; b++) {
    const at = b * Q4_0_BLOCK_BYTES;
    const d = fp16ToFp32(view.getUint16(at, true));
    for (let j = 0; j < QK / 2; j++) {
      const q = bytes[at + 2 + j]!;
      out[b * QK + j] = ((q & 0x0f) - 8) * d;
      out[b * QK + QK / 2 + j] = ((q >> 4) - 8) * d;
    }
  }
  return out;
}
