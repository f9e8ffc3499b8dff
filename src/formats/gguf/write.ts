/**
 * Writes GGUF v3 files: the header (metadata in the order given, tensor infos with offsets laid
 * out per `general.alignment`), then each tensor's bytes as the caller streams them, so a
 * quantized multi-GB model never has to sit in memory. `writeGguf` is the all-in-memory F32 form
 * the tests use to build tiny models.
 */
import { type FileHandle, open, writeFile } from "node:fs/promises";
import {
  alignmentOf,
  alignUp,
  GGML_TYPE,
  GGUF_MAGIC,
  GGUF_VERSION,
  type GgufArray,
  type GgufValue,
  type NumberType,
  tensorBytes,
  VALUE_TYPE,
  VALUE_WIDTH,
} from "./format.ts";

/** Insertion order is the file's order. A Map is safe for any key; a plain object is handier in tests. */
export type GgufMetadata = ReadonlyMap<string, GgufValue> | Readonly<Record<string, GgufValue>>;

export type GgufTensorHeader = {
  name: string /** ggml order: ne[0] first. */;
  dims: readonly number[] /** ggml type id */;
  type: number;
};

export type GgufLayout = {
  /** Magic to the end of the padding before the first tensor. */
  header: Buffer;
  alignment: number;
  /** Per tensor, in order: bytes and offset from the start of the data section. */
  tensors: { byteLength: number; offset: number }[];
  /** Size of the whole file. */
  fileSize: number;
};

function entriesOf(metadata: GgufMetadata): [string, GgufValue][] {
  return metadata instanceof Map ? [...metadata.entries()] : Object.entries(metadata as Record<string, GgufValue>);
}

/** The header bytes of a file with this metadata and these tensors, and where each tensor's data goes. */
export function layoutGguf(metadata: GgufMetadata, tensors: readonly GgufTensorHeader[]): GgufLayout {
  const alignment = alignmentOf(metadata);
  const entries = entriesOf(metadata);
  const w = new ByteWriter();
  w.raw(Buffer.from(GGUF_MAGIC, "latin1"));
  w.u32(GGUF_VERSION);
  w.u64(tensors.length);
  w.u64(entries.length);
  for (const [key, value] of entries) {
    w.string(key);
    w.u32(VALUE_TYPE[value.type]);
    writeValue(w, value);
  }
  const seen = new Set<string>();
  let offset = 0;
  const placed: GgufLayout["tensors"] = [];
  for (const t of tensors) {
    if (seen.has(t.name)) throw new Error(`duplicate tensor ${t.name}`);
    seen.add(t.name);
    const byteLength = tensorBytes(t.type, t.dims, `tensor ${t.name}`);
    w.string(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(t.type);
    w.u64(offset);
    placed.push({ byteLength, offset });
    offset = alignUp(offset + byteLength, alignment);
  }
  w.padTo(alignment);
  const header = w.done();
  return { header, alignment, tensors: placed, fileSize: header.length + offset };
}

/**
 * Writes a GGUF file at `path` (created or truncated: callers that need atomicity write a temp
 * name and rename). `data(i)` yields tensor i's bytes; each must add up to its size exactly.
 */
export async function writeGgufFile(
  path: string,
  metadata: GgufMetadata,
  tensors: readonly GgufTensorHeader[],
  data: (index: number) => AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
): Promise<GgufLayout> {
  const layout = layoutGguf(metadata, tensors);
  const file = await open(path, "w");
  try {
    let position = 0;
    const put = async (bytes: Uint8Array) => {
      await writeAll(file, bytes, position);
      position += bytes.length;
    };
    await put(layout.header);
    for (let i = 0; i < tensors.length; i++) {
      const { byteLength } = layout.tensors[i]!;
      const start = position;
      for await (const chunk of data(i)) await put(chunk);
      const written = position - start;
      if (written !== byteLength)
        throw new Error(`tensor ${tensors[i]!.name}: ${written} bytes written, ${byteLength} expected`);
      // The last tensor is padded too, as ggml's gguf writer does: the file size is then a multiple of the alignment.
      const pad = alignUp(written, layout.alignment) - written;
      if (pad > 0) await put(new Uint8Array(pad));
    }
  } finally {
    await file.close();
  }
  return layout;
}

async function writeAll(file: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await file.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/** A tensor held in memory as F32, for building small models in tests and benchmarks. */
export type GgufTensor = { name: string /** ggml order: ne[0] first. */; dims: readonly number[]; data: Float32Array };
export type GgufFile = { metadata: GgufMetadata; tensors: readonly GgufTensor[] };

function f32Bytes(t: GgufTensor): Buffer {
  const elements = t.dims.reduce((a, b) => a * b, 1);
  if (elements !== t.data.length)
    throw new Error(`tensor ${t.name}: dims ${t.dims.join("x")} need ${elements} values, got ${t.data.length}`);
  // Written value by value: the array may be a view into a larger buffer, and the file is little-endian whatever the host.
  const bytes = Buffer.alloc(t.data.length * 4);
  for (const [i, x] of t.data.entries()) bytes.writeFloatLE(x, i * 4);
  return bytes;
}

export function encodeGguf(file: GgufFile): Buffer {
  const layout = layoutGguf(
    file.metadata,
    file.tensors.map((t) => ({ name: t.name, dims: t.dims, type: GGML_TYPE.F32 })),
  );
  const out = Buffer.alloc(layout.fileSize);
  layout.header.copy(out, 0);
  for (const [i, t] of file.tensors.entries()) f32Bytes(t).copy(out, layout.header.length + layout.tensors[i]!.offset);
  return out;
}

export async function writeGguf(path: string, file: GgufFile): Promise<void> {
  await writeFile(path, encodeGguf(file));
}

function writeValue(w: ByteWriter, v: GgufValue): void {
  switch (v.type) {
    case "string":
      w.string(v.value);
      break;
    case "bool":
      w.u8(v.value ? 1 : 0);
      break;
    case "uint64":
      w.big(v.value, false);
      break;
    case "int64":
      w.big(v.value, true);
      break;
    case "array":
      writeArray(w, v);
      break;
    default:
      w.number(v.type, v.value);
  }
}

function writeArray(w: ByteWriter, a: GgufArray): void {
  w.u32(VALUE_TYPE[a.of]);
  w.u64(a.value.length);
  switch (a.of) {
    case "string":
      for (const s of a.value) w.string(s);
      return;
    case "array":
      for (const inner of a.value) writeArray(w, inner);
      return;
    case "bool":
      for (const b of a.value) w.u8(b ? 1 : 0);
      return;
    case "uint64":
    case "int64":
      for (const b of a.value) w.big(b, a.of === "int64");
      return;
    default:
      for (let i = 0; i < a.value.length; i++) w.number(a.of, a.value[i]!);
  }
}

/** A growable little-endian byte buffer: headers hold vocabularies of 100k+ strings, so no Buffer per value. */
class ByteWriter {
  private buf = Buffer.alloc(1 << 16);
  private length = 0;

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }

  raw(bytes: Uint8Array): void {
    this.room(bytes.length);
    this.buf.set(bytes, this.length);
    this.length += bytes.length;
  }

  u8(v: number): void {
    this.number("uint8", v);
  }

  u32(v: number): void {
    this.number("uint32", v);
  }

  u64(v: number): void {
    this.big(BigInt(v), false);
  }

  big(v: bigint, signed: boolean): void {
    this.room(8);
    if (signed) this.buf.writeBigInt64LE(v, this.length);
    else this.buf.writeBigUInt64LE(v, this.length);
    this.length += 8;
  }

  number(type: NumberType, v: number): void {
    const width = VALUE_WIDTH[type];
    this.room(width);
    const at = this.length;
    switch (type) {
      case "uint8":
        this.buf.writeUInt8(v, at);
        break;
      case "int8":
        this.buf.writeInt8(v, at);
        break;
      case "uint16":
        this.buf.writeUInt16LE(v, at);
        break;
      case "int16":
        this.buf.writeInt16LE(v, at);
        break;
      case "uint32":
        this.buf.writeUInt32LE(v, at);
        break;
      case "int32":
        this.buf.writeInt32LE(v, at);
        break;
      case "float32":
        this.buf.writeFloatLE(v, at);
        break;
      case "float64":
        this.buf.writeDoubleLE(v, at);
        break;
    }
    this.length += width;
  }

  string(s: string): void {
    const n = Buffer.byteLength(s, "utf8");
    this.u64(n);
    this.room(n);
    this.buf.write(s, this.length, "utf8");
    this.length += n;
  }

  padTo(alignment: number): void {
    const pad = alignUp(this.length, alignment) - this.length;
    this.room(pad);
    this.buf.fill(0, this.length, this.length + pad);
    this.length += pad;
  }

  done(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}
