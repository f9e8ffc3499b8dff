/**
 * The GGUF reader and writer on real files (every metadata type, the suite's tiny model, broken
 * files), and the file quantizer on small hand-made models: which tensors change type, that the
 * bytes are ggml's blocks of the decoded values, that metadata and alignment survive, and which
 * files are served as they are or refused.
 */
import { mkdtemp, open, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GGML_TYPE,
  type GgufValue,
  gguf,
  layoutGguf,
  readGgufInfo,
  writeGgufFile,
} from "../../src/formats/gguf/index.ts";
import { fp16ToFp32, fp32ToFp16, quantizeQ4_0, quantizeQ8_0 } from "../../src/formats/quantize/blocks.ts";
import { quantizeGguf } from "../../src/formats/quantize/file.ts";
import { deployRefusal, QuantizationError } from "../../src/formats/quantize/plan.ts";
import { tinyModelPath } from "../helpers/models.ts";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-gguf-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Deterministic values in about [-scale, scale]. */
function values(n: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out[i] = ((s / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

const f32Bytes = (x: Float32Array) => Buffer.from(x.buffer.slice(x.byteOffset, x.byteOffset + x.byteLength));
const f16Bytes = (x: Float32Array) => Buffer.from(Uint16Array.from(x, fp32ToFp16).buffer);
/** What an F16 file holds: each value rounded to half, widened back. */
const f16Values = (x: Float32Array) => Float32Array.from(x, (v) => fp16ToFp32(fp32ToFp16(v)));
const bf16Bytes = (x: Float32Array) =>
  Buffer.from(Uint16Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length), (u) => u >>> 16).buffer);
const bf16Values = (x: Float32Array) =>
  new Float32Array(
    Uint32Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length), (u) => (u & 0xffff0000) >>> 0).buffer,
  );

async function tensorBytesOf(path: string, name: string): Promise<Buffer> {
  const info = await readGgufInfo(path);
  const t = info.tensors.find((x) => x.name === name)!;
  const file = await open(path, "r");
  try {
    const b = Buffer.alloc(t.byteLength);
    await file.read(b, 0, b.length, t.offset);
    return b;
  } finally {
    await file.close();
  }
}

describe("GGUF reader and writer", () => {
  it("reads back every metadata value type, in the order written", async () => {
    const metadata = new Map<string, GgufValue>([
      ["u8", { type: "uint8", value: 255 }],
      ["i8", { type: "int8", value: -128 }],
      ["u16", { type: "uint16", value: 65535 }],
      ["i16", { type: "int16", value: -32768 }],
      ["u32", gguf.uint32(4294967295)],
      ["i32", gguf.int32(-2147483648)],
      ["f32", gguf.float32(0.5)],
      ["f64", { type: "float64", value: Math.PI }],
      ["b", gguf.bool(true)],
      ["s", gguf.string("héllo ▁ world")],
      ["u64", { type: "uint64", value: 2n ** 64n - 1n }],
      ["i64", { type: "int64", value: -(2n ** 63n) }],
      ["strings", gguf.strings(["a", "", "ü"])],
      ["floats", { type: "array", of: "float32", value: [1.5, -2] }],
      ["bools", { type: "array", of: "bool", value: [true, false] }],
      ["big", { type: "array", of: "int64", value: [-1n, 5n] }],
      [
        "nested",
        {
          type: "array",
          of: "array",
          value: [
            { type: "array", of: "uint8", value: [1, 2] },
            { type: "array", of: "string", value: [] },
          ],
        },
      ],
    ]);
    const path = join(dir, "values.gguf");
    await writeGgufFile(path, metadata, [], () => []);
    const info = await readGgufInfo(path);
    expect(info.version).toBe(3);
    expect([...info.metadata.keys()]).toEqual([...metadata.keys()]);
    expect(info.metadata).toEqual(metadata);
    expect(info.tensors).toEqual([]);
  });

  it("re-encodes the tiny model's header byte for byte", async () => {
    const path = await tinyModelPath();
    const info = await readGgufInfo(path);
    expect(info.tensors.length).toBeGreaterThan(10);
    const layout = layoutGguf(info.metadata, info.tensors);
    const bytes = await readFile(path);
    expect(layout.header.equals(bytes.subarray(0, layout.header.length))).toBe(true);
    expect(layout.fileSize).toBe(bytes.length);
    expect(layout.tensors.map((t) => t.offset + info.dataOffset)).toEqual(info.tensors.map((t) => t.offset));
  });

  it("refuses a file that is not GGUF or is cut short", async () => {
    const junk = join(dir, "junk.gguf");
    await writeFile(junk, "definitely not gguf");
    await expect(readGgufInfo(junk)).rejects.toThrow(/not a GGUF file/);
    const whole = await readFile(await tinyModelPath());
    const cut = join(dir, "cut.gguf");
    await writeFile(cut, whole.subarray(0, 5000));
    await expect(readGgufInfo(cut)).rejects.toThrow(/truncated/);
    await writeFile(cut, whole.subarray(0, whole.length - 1000));
    await expect(readGgufInfo(cut)).rejects.toThrow(/past the end of the file/);
  });
});

describe("quantizing a file", () => {
  const a = values(64 * 3, 1);
  const b = values(32 * 2, 2, 40);
  const norm = values(64, 3);
  const odd = values(48 * 2, 4);
  const out = values(32 * 4, 5);
  const normMatrix = values(32 * 2, 6);
  let source: string;

  beforeAll(async () => {
    source = join(dir, "mixed.gguf");
    const metadata = new Map<string, GgufValue>([
      ["general.architecture", gguf.string("llama")],
      ["general.alignment", gguf.uint32(64)],
      ["general.file_type", gguf.uint32(1)],
      ["test.after", gguf.string("kept")],
    ]);
    const tensors = [
      { name: "a.weight", dims: [64, 3], type: GGML_TYPE.F16, bytes: f16Bytes(a) },
      { name: "b.weight", dims: [32, 2], type: GGML_TYPE.BF16, bytes: bf16Bytes(b) },
      { name: "norm.weight", dims: [64], type: GGML_TYPE.F32, bytes: f32Bytes(norm) },
      { name: "odd.weight", dims: [48, 2], type: GGML_TYPE.F16, bytes: f16Bytes(odd) },
      { name: "blk.0.attn_norm.weight", dims: [32, 2], type: GGML_TYPE.F32, bytes: f32Bytes(normMatrix) },
      { name: "output.weight", dims: [32, 4], type: GGML_TYPE.F32, bytes: f32Bytes(out) },
    ];
    await writeGgufFile(source, metadata, tensors, (i) => [tensors[i]!.bytes]);
  });

  it("int8: 2-D weights with whole 32-value rows become ggml's Q8_0 blocks; the rest is copied", async () => {
    const dest = join(dir, "mixed-q8.gguf");
    const result = await quantizeGguf(source, dest, "int8");
    expect(result).toMatchObject({ kind: "quantized", tensorsQuantized: 3, tensors: 6 });
    const info = await readGgufInfo(dest);
    const types = Object.fromEntries(info.tensors.map((t) => [t.name, t.type]));
    expect(types).toEqual({
      "a.weight": 8,
      "b.weight": 8,
      "norm.weight": 0,
      "odd.weight": 1,
      "blk.0.attn_norm.weight": 0,
      "output.weight": 8,
    });
    for (const t of info.tensors) expect(t.offset % 64, t.name).toBe(0);
    expect(info.alignment).toBe(64);
    // Every key kept, in place; file_type replaced in place, quantization_version added.
    expect([...info.metadata.keys()]).toEqual([
      "general.architecture",
      "general.alignment",
      "general.file_type",
      "test.after",
      "general.quantization_version",
    ]);
    expect(info.metadata.get("general.file_type")).toEqual(gguf.uint32(7));
    expect(info.metadata.get("general.quantization_version")).toEqual(gguf.uint32(2));

    const expectQ8 = (x: Float32Array) => {
      const bytes = Buffer.alloc((x.length / 32) * 34);
      quantizeQ8_0(x, bytes);
      return bytes;
    };
    expect((await tensorBytesOf(dest, "a.weight")).equals(expectQ8(f16Values(a)))).toBe(true);
    expect((await tensorBytesOf(dest, "b.weight")).equals(expectQ8(bf16Values(b)))).toBe(true);
    expect((await tensorBytesOf(dest, "norm.weight")).equals(f32Bytes(norm))).toBe(true);
    expect((await tensorBytesOf(dest, "odd.weight")).equals(f16Bytes(odd))).toBe(true);
  });

  it("int4: Q4_0 blocks, except the output projection, which gets Q8_0", async () => {
    const dest = join(dir, "mixed-q4.gguf");
    await quantizeGguf(source, dest, "int4");
    const info = await readGgufInfo(dest);
    expect(Object.fromEntries(info.tensors.map((t) => [t.name, t.type]))).toMatchObject({
      "a.weight": 2,
      "b.weight": 2,
      "output.weight": 8,
      "odd.weight": 1,
    });
    expect(info.metadata.get("general.file_type")).toEqual(gguf.uint32(2));
    const q4 = Buffer.alloc((a.length / 32) * 18);
    quantizeQ4_0(f16Values(a), q4);
    expect((await tensorBytesOf(dest, "a.weight")).equals(q4)).toBe(true);
  });

  it("serves a file already of the asked type as it is, and refuses requantizing another", async () => {
    const q8 = join(dir, "mixed-q8.gguf");
    const again = join(dir, "again.gguf");
    expect(await quantizeGguf(q8, again, "int8")).toMatchObject({ kind: "as-is" });
    await expect(readFile(again)).rejects.toThrow(/ENOENT/);
    await expect(quantizeGguf(q8, again, "int4")).rejects.toThrow(QuantizationError);
    await expect(quantizeGguf(q8, again, "int4")).rejects.toThrow(/already quantized \(a\.weight is Q8_0\)/);
    expect(await quantizeGguf(join(dir, "mixed-q4.gguf"), again, "int4")).toMatchObject({ kind: "as-is" });
  });

  it("refuses at deploy time what the registry already knows is quantized", () => {
    expect(deployRefusal("F32", "int8")).toBeUndefined();
    expect(deployRefusal("BF16", "int4")).toBeUndefined();
    expect(deployRefusal("Q8_0", "int8")).toBeUndefined();
    expect(deployRefusal(null, "int4")).toBeUndefined();
    expect(deployRefusal("Q4_K_M", "int8")).toMatch(/already quantized \(Q4_K_M\)/);
    expect(deployRefusal("Q8_0", "int4")).toMatch(/already quantized/);
  });
});
