/**
 * Quantizes a GGUF file into another, streaming: tensors are read a few MiB of rows at a time,
 * converted and written, so memory stays flat whatever the model's size. The output is written
 * where the caller says; callers that publish it write a temp name and rename.
 */
import { type FileHandle, open } from "node:fs/promises";
import { endianness } from "node:os";
import { GGML_TYPE, tensorBytes } from "../gguf/format.ts";
import { type GgufInfo, readGgufInfo } from "../gguf/read.ts";
import { writeGgufFile } from "../gguf/write.ts";
import { bf16RowToFp32, fp16RowToFp32, quantizeQ4_0, quantizeQ8_0 } from "./blocks.ts";
import { type PlannedTensor, planQuantization, type Quantization, type QuantizationPlan } from "./plan.ts";

/** Input bytes converted per step: large enough to amortise the reads, small enough to never matter for memory. */
const CHUNK_BYTES = 4 << 20;

export type QuantizeResult =
  | { kind: "as-is"; reason: string }
  | { kind: "quantized"; inputBytes: number; outputBytes: number; tensorsQuantized: number; tensors: number };

/** Quantizes `source` into `dest`, or answers "as-is" (writing nothing) when the source already is that type. */
export async function quantizeGguf(source: string, dest: string, quantization: Quantization): Promise<QuantizeResult> {
  const info = await readGgufInfo(source);
  const plan = planQuantization(info, quantization);
  if (plan.kind === "as-is") return plan;
  return writePlan(source, info, plan, dest);
}

async function writePlan(
  source: string,
  info: GgufInfo,
  plan: Extract<QuantizationPlan, { kind: "quantize" }>,
  dest: string,
): Promise<QuantizeResult> {
  // Typed-array views read the file's little-endian floats directly.
  if (endianness() !== "LE") throw new Error("the quantizer needs a little-endian host");
  const file = await open(source, "r");
  try {
    const layout = await writeGgufFile(
      dest,
      plan.metadata,
      plan.tensors.map((t) => ({ name: t.name, dims: t.dims, type: t.to })),
      (i) => tensorData(file, plan.tensors[i]!),
    );
    return {
      kind: "quantized",
      inputBytes: info.fileSize,
      outputBytes: layout.fileSize,
      tensorsQuantized: plan.tensors.filter((t) => t.to !== t.type).length,
      tensors: plan.tensors.length,
    };
  } finally {
    await file.close();
  }
}

async function* tensorData(file: FileHandle, t: PlannedTensor): AsyncGenerator<Uint8Array> {
  if (t.to === t.type) {
    for (let done = 0; done < t.byteLength; done += CHUNK_BYTES)
      yield await readAt(file, t.offset + done, Math.min(CHUNK_BYTES, t.byteLength - done));
    return;
  }
  const rowLength = t.dims[0]!;
  const inRowBytes = tensorBytes(t.type, [rowLength]);
  const outRowBytes = tensorBytes(t.to, [rowLength]);
  const rows = t.byteLength / inRowBytes;
  const rowsPerStep = Math.max(1, Math.floor(CHUNK_BYTES / inRowBytes));
  const quantize = t.to === GGML_TYPE.Q8_0 ? quantizeQ8_0 : t.to === GGML_TYPE.Q4_0 ? quantizeQ4_0 : undefined;
  if (!quantize) throw new Error(`tensor ${t.name}: no quantizer for type ${t.to}`);
  for (let row = 0; row < rows; row += rowsPerStep) {
    const n = Math.min(rowsPerStep, rows - row);
    const raw = await readAt(file, t.offset + row * inRowBytes, n * inRowBytes);
    const out = new Uint8Array(n * outRowBytes);
    // Rows are whole blocks, so a run of rows quantizes as one long row.
    quantize(toFloat32(raw, t.type, t.name), out);
    yield out;
  }
}

/** Bytes at `position`, in a fresh ArrayBuffer so that typed views over it are aligned. */
async function readAt(file: FileHandle, position: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(new ArrayBuffer(length));
  let got = 0;
  while (got < length) {
    const { bytesRead } = await file.read(bytes, got, length - got, position + got);
    if (bytesRead === 0) throw new Error("the model file ended early (truncated?)");
    got += bytesRead;
  }
  return bytes;
}

function toFloat32(raw: Uint8Array, type: number, name: string): Float32Array {
  if (type === GGML_TYPE.F32) return new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const halves = new Uint16Array(raw.buffer, raw.byteOffset, raw.byteLength / 2);
  const out = new Float32Array(halves.length);
  if (type === GGML_TYPE.F16) fp16RowToFp32(halves, out);
  else if (type === GGML_TYPE.BF16) bf16RowToFp32(halves, out);
  else throw new Error(`tensor ${name}: cannot read type ${type} as floats`);
  return out;
}
