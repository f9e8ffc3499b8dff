/**
 * Writes safetensors files (F32 only), so the suite can build Hugging Face-style checkpoints of its
 * own instead of downloading any. Format: an 8-byte little-endian header length, a JSON header of
 * name → {dtype, shape, data_offsets} padded with spaces to 8 bytes, then the tensors' bytes.
 */
import { writeFile } from "node:fs/promises";

export type SafetensorsInput = { name: string /** Row-major, outermost first. */; shape: number[]; data: Float32Array };

export function encodeSafetensors(
  tensors: SafetensorsInput[],
  metadata: Record<string, string> = { format: "pt" },
): Buffer {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    const elements = t.shape.reduce((a, b) => a * b, 1);
    if (elements !== t.data.length)
      throw new Error(`${t.name}: shape [${t.shape}] holds ${elements} values, data has ${t.data.length}`);
    header[t.name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const head = Buffer.alloc(8);
  head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  return Buffer.concat([
    head,
    Buffer.from(json),
    ...tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  ]);
}

export async function writeSafetensors(path: string, tensors: SafetensorsInput[]): Promise<void> {
  await writeFile(path, encodeSafetensors(tensors));
}
