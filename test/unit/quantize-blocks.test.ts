/**
 * ggml's Q8_0 and Q4_0 block encodings against blocks worked out by hand from quantize_row_q8_0_ref
 * and quantize_row_q4_0_ref, the edge cases included (all zeros, the extreme value, halves that C's
 * roundf and JavaScript's Math.round round differently, the sign of Q4_0's scale), and the half
 * conversion against the platform's Float16Array.
 */
import { describe, expect, it } from "vitest";
import {
  dequantizeQ4_0,
  dequantizeQ8_0,
  fp16ToFp32,
  fp32ToFp16,
  quantizeQ4_0,
  quantizeQ8_0,
} from "../../src/formats/quantize/blocks.ts";

function block(values: Record<number, number>): Float32Array {
  const x = new Float32Array(32);
  for (const [i, v] of Object.entries(values)) x[Number(i)] = v;
  return x;
}

function q8(x: Float32Array): Buffer {
  const out = Buffer.alloc((x.length / 32) * 34);
  expect(quantizeQ8_0(x, out)).toBe(out.length);
  return out;
}

function q4(x: Float32Array): Buffer {
  const out = Buffer.alloc((x.length / 32) * 18);
  expect(quantizeQ4_0(x, out)).toBe(out.length);
  return out;
}

/** The 32 nibbles of a Q4_0 block in element order (element j low nibble of qs[j], j+16 high). */
function nibbles(b: Buffer): number[] {
  const qs = b.subarray(2, 18);
  return [...qs].map((q) => q & 15).concat([...qs].map((q) => q >> 4));
}

describe("Q8_0 blocks", () => {
  it("encodes all zeros as a zero scale and zero quants", () => {
    expect(q8(new Float32Array(32))).toEqual(Buffer.alloc(34));
  });

  it("scales by amax/127 and rounds halves away from zero (C's roundf)", () => {
    // amax 127 → d = 1 (half 0x3c00), id = 1: the quants are the values rounded.
    const b = q8(block({ 0: 127, 1: -127, 2: 2.5, 3: -2.5, 4: 0.5, 5: -0.5, 6: 1.49, 7: -1.51 }));
    expect(b.readUInt16LE(0)).toBe(0x3c00);
    expect([...b.subarray(2, 10)].map((q) => (q << 24) >> 24)).toEqual([127, -127, 3, -3, 1, -1, 1, -2]);
    expect([...b.subarray(10)]).toEqual(new Array(24).fill(0));
  });

  it("maps the largest magnitude to ±127 with a scale that is not a power of two", () => {
    // amax 1 → d = 1/127 = 0.0078740157 → half: exponent -7, mantissa round(0.007874 * 1024) = 8 → 0x2008.
    // id = 1/d rounds to exactly 127 in float32, so 0.5 → 63.5 → 64 (Math.round would give 63 for -0.5).
    const b = q8(block({ 0: 1, 1: -1, 2: 0.5, 3: -0.5 }));
    expect(b.readUInt16LE(0)).toBe(0x2008);
    expect([...b.subarray(2, 6)].map((q) => (q << 24) >> 24)).toEqual([127, -127, 64, -64]);
  });

  it("handles a negative maximum like a positive one (the scale is unsigned)", () => {
    const b = q8(block({ 9: -254, 10: 3, 11: -3, 12: 1 }));
    expect(b.readUInt16LE(0)).toBe(0x4000); // d = 2
    expect([...b.subarray(11, 15)].map((q) => (q << 24) >> 24)).toEqual([-127, 2, -2, 1]);
  });

  it("writes consecutive blocks, each with its own scale, and dequantizes back", () => {
    const x = new Float32Array(64);
    for (let i = 0; i < 64; i++) x[i] = (i < 32 ? 1 : 100) * Math.sin(i);
    const b = q8(x);
    expect(b.readUInt16LE(0)).not.toBe(b.readUInt16LE(34));
    const back = dequantizeQ8_0(b, 64);
    for (let i = 0; i < 64; i++)
      expect(Math.abs(back[i]! - x[i]!)).toBeLessThanOrEqual((i < 32 ? 1 : 100) / 127 / 2 + 1e-3);
  });

  it("refuses a partial block", () => {
    expect(() => quantizeQ8_0(new Float32Array(31), Buffer.alloc(34))).toThrow(/whole blocks/);
  });
});

describe("Q4_0 blocks", () => {
  it("encodes all zeros with a negative-zero scale and the middle nibble 8", () => {
    // max = 0 → d = 0 / -8 = -0.0 → half 0x8000; id = 0 → every value 0 + 8.5 → 8.
    const b = q4(new Float32Array(32));
    expect(b.readUInt16LE(0)).toBe(0x8000);
    expect([...b.subarray(2)]).toEqual(new Array(16).fill(0x88));
  });

  it("gives the scale the opposite sign of the extreme value, which lands on -8 (nibble 0)", () => {
    // max = 8 → d = -1 (0xbc00), id = -1: nibble = min(15, trunc(-x + 8.5)).
    const b = q4(block({ 0: 8, 1: -8, 2: 1, 3: -1, 4: 0.5, 5: -0.5, 6: 0.49, 16: 3, 17: -3 }));
    expect(b.readUInt16LE(0)).toBe(0xbc00);
    const n = nibbles(b);
    expect(n.slice(0, 8)).toEqual([0, 15, 7, 9, 8, 9, 8, 8]); // -8 → 16.5 → 16, clamped to 15
    expect(n.slice(16, 19)).toEqual([5, 11, 8]);
    // Element j in the low nibble of byte j, element j + 16 in its high nibble.
    expect(b[2]).toBe(0x50);
    expect(b[3]).toBe(0xbf);
  });

  it("makes the scale positive when the extreme value is negative", () => {
    // max = -8 → d = 1 (0x3c00), id = 1: nibble = min(15, trunc(x + 8.5)).
    const n = nibbles(q4(block({ 0: -8, 1: 8, 2: 3, 3: -3 })));
    expect(n.slice(0, 4)).toEqual([0, 15, 11, 5]);
    expect(q4(block({ 0: -8 })).readUInt16LE(0)).toBe(0x3c00);
  });

  it("takes the first of two equal magnitudes as the extreme", () => {
    expect(q4(block({ 0: -4, 1: 4 })).readUInt16LE(0)).toBe(0x3800); // d = -4 / -8 = 0.5
    expect(q4(block({ 0: 4, 1: -4 })).readUInt16LE(0)).toBe(0xb800); // d = -0.5
  });

  it("dequantizes within half a step, except past +7 steps on the far side, where 15 clamps", () => {
    const x = new Float32Array(32).map((_, i) => Math.cos(i) * 3);
    const back = dequantizeQ4_0(q4(x), 32);
    const step = Math.abs(fp16ToFp32(q4(x).readUInt16LE(0)));
    for (let i = 0; i < 32; i++) {
      const bound = Math.abs(x[i]! / step) <= 7.5 ? step / 2 : step;
      expect(Math.abs(back[i]! - x[i]!), `element ${i}`).toBeLessThanOrEqual(bound + 1e-6);
    }
  });
});

describe("half precision", () => {
  const Float16 = (globalThis as { Float16Array?: new (n: number) => { [i: number]: number; buffer: ArrayBuffer } })
    .Float16Array;

  it("rounds to nearest even like ggml, subnormals and overflow included", () => {
    expect(fp32ToFp16(1)).toBe(0x3c00);
    expect(fp32ToFp16(-2)).toBe(0xc000);
    expect(fp32ToFp16(65504)).toBe(0x7bff);
    expect(fp32ToFp16(65520)).toBe(0x7c00); // rounds up to infinity
    expect(fp32ToFp16(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(fp32ToFp16(2 ** -26)).toBe(0x0000);
    expect(fp32ToFp16(1 + 2 ** -11)).toBe(0x3c00); // a tie goes to the even mantissa
    expect(fp32ToFp16(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(fp32ToFp16(Number.NaN)).toBe(0x7e00);
    expect(fp32ToFp16(-0)).toBe(0x8000);
  });

  it.skipIf(Float16 === undefined)("agrees with Float16Array on 20,000 values", () => {
    const h = new Float16!(1);
    const bits = new Uint16Array(h.buffer);
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    let seed = 7;
    for (let i = 0; i < 20_000; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      u[0] = seed;
      if (Number.isNaN(f[0])) continue;
      h[0] = f[0]!;
      expect(fp32ToFp16(f[0]!), `${f[0]}`).toBe(bits[0]);
      expect(fp16ToFp32(bits[0]!)).toBe(h[0]);
    }
  });
});
