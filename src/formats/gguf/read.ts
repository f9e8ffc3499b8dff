/**
 * Reads a GGUF file's header: version, metadata, tensor infos and where each tensor's bytes lie.
 * Only the header is read (in 1 MiB steps), never the tensor data: a multi-GB model costs a few
 * reads, and the caller streams the tensors it needs from the offsets given here.
 */
import { type FileHandle, open } from "node:fs/promises";
import {
  alignmentOf,
  alignUp,
  type BigIntType,
  GGUF_MAGIC,
  type GgufArray,
  type GgufValue,
  type NumberType,
  tensorBytes,
  VALUE_TYPE_NAME,
  VALUE_WIDTH,
  type ValueTypeName,
} from "./format.ts";

export type GgufTensorInfo = {
  name: string;
  /** ggml order: ne[0] (the row length) first. */
  dims: number[];
  /** ggml type id (format.ts GGML_TYPES). */
  type: number;
  /** Absolute offset of the tensor's first byte in the file. */
  offset: number;
  byteLength: number;
};

export type GgufInfo = {
  version: number;
  /** In file order. */
  metadata: Map<string, GgufValue>;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
  fileSize: number;
};

const CHUNK = 1 << 20;
/** Far beyond any real vocabulary or key, small enough that a corrupt length fails fast instead of allocating gigabytes. */
const MAX_STRING_BYTES = 1 << 26;
const MAX_ARRAY_LENGTH = 1 << 28;
const MAX_DIMS = 4;

/** The header of the GGUF file at `path`; a file that is not GGUF, is truncated or is inconsistent is an Error naming why. */
export async function readGgufInfo(path: string): Promise<GgufInfo> {
  const file = await open(path, "r");
  try {
    const fileSize = (await file.stat()).size;
    const r = new HeaderReader(file, fileSize);
    const magic = (await r.bytes(4)).toString("latin1");
    if (magic !== GGUF_MAGIC) throw new Error("not a GGUF file (no GGUF magic)");
    const version = await r.u32();
    if (version !== 2 && version !== 3) throw new Error(`GGUF version ${version} is not supported (2 and 3 are)`);
    const tensorCount = await r.count("tensor count", MAX_ARRAY_LENGTH);
    const kvCount = await r.count("metadata count", MAX_ARRAY_LENGTH);

    const metadata = new Map<string, GgufValue>();
    for (let i = 0; i < kvCount; i++) {
      const key = await r.string();
      if (metadata.has(key)) throw new Error(`duplicate metadata key ${JSON.stringify(key)}`);
      metadata.set(key, await r.value(await r.valueType()));
    }
    const alignment = alignmentOf(metadata);

    const raw: { name: string; dims: number[]; type: number; relative: number }[] = [];
    for (let i = 0; i < tensorCount; i++) {
      const name = await r.string();
      const nDims = await r.u32();
      if (nDims < 1 || nDims > MAX_DIMS) throw new Error(`tensor ${name}: ${nDims} dimensions`);
      const dims: number[] = [];
      for (let d = 0; d < nDims; d++) dims.push(await r.count(`tensor ${name} dimension`, Number.MAX_SAFE_INTEGER));
      raw.push({
        name,
        dims,
        type: await r.u32(),
        relative: await r.count(`tensor ${name} offset`, Number.MAX_SAFE_INTEGER),
      });
    }
    const dataOffset = alignUp(r.position, alignment);
    const tensors = raw.map((t): GgufTensorInfo => {
      if (t.relative % alignment !== 0)
        throw new Error(`tensor ${t.name}: offset ${t.relative} is not aligned to ${alignment}`);
      const byteLength = tensorBytes(t.type, t.dims, `tensor ${t.name}`);
      const offset = dataOffset + t.relative;
      if (offset + byteLength > fileSize)
        throw new Error(`tensor ${t.name}: its data runs past the end of the file (truncated?)`);
      return { name: t.name, dims: t.dims, type: t.type, offset, byteLength };
    });
    return { version, metadata, tensors, alignment, dataOffset, fileSize };
  } finally {
    await file.close();
  }
}

/** Sequential little-endian reads over a file, refilled a chunk at a time. */
class HeaderReader {
  private buf = Buffer.alloc(0);
  private at = 0;
  /** File offset of buf[0]. */
  private base = 0;

  private readonly file: FileHandle;
  private readonly size: number;

  constructor(file: FileHandle, size: number) {
    this.file = file;
    this.size = size;
  }

  get position(): number {
    return this.base + this.at;
  }

  /** Makes `n` bytes available at `at`. Awaited only when a refill is due, so small reads stay cheap. */
  private async fill(n: number): Promise<void> {
    const start = this.position;
    if (start + n > this.size) throw new Error("the file ends inside its header (truncated?)");
    const length = Math.min(Math.max(n, CHUNK), this.size - start);
    const next = Buffer.allocUnsafe(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await this.file.read(next, got, length - got, start + got);
      if (bytesRead === 0) throw new Error("the file ends inside its header (truncated?)");
      got += bytesRead;
    }
    this.buf = next;
    this.base = start;
    this.at = 0;
  }

  async bytes(n: number): Promise<Buffer> {
    if (this.buf.length - this.at < n) await this.fill(n);
    const out = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }

  async u32(): Promise<number> {
    return (await this.bytes(4)).readUInt32LE(0);
  }

  /** A u64 count or offset as a number, refused above `max` (a corrupt header, not a real size). */
  async count(what: string, max: number): Promise<number> {
    const v = (await this.bytes(8)).readBigUInt64LE(0);
    if (v > BigInt(max)) throw new Error(`${what} ${v} is out of range`);
    return Number(v);
  }

  async string(): Promise<string> {
    const length = await this.count("string length", MAX_STRING_BYTES);
    return (await this.bytes(length)).toString("utf8");
  }

  async valueType(): Promise<ValueTypeName> {
    const id = await this.u32();
    const name = VALUE_TYPE_NAME[id];
    if (name === undefined) throw new Error(`unknown metadata value type ${id}`);
    return name;
  }

  async value(type: ValueTypeName): Promise<GgufValue> {
    if (type === "array") return this.array();
    if (type === "string") return { type, value: await this.string() };
    if (type === "bool") return { type, value: (await this.bytes(1))[0] !== 0 };
    if (type === "uint64" || type === "int64") return { type, value: bigOf(type, await this.bytes(8), 0) };
    return { type, value: numberOf(type, await this.bytes(VALUE_WIDTH[type]), 0) };
  }

  private async array(): Promise<GgufArray> {
    const of = await this.valueType();
    const length = await this.count("array length", MAX_ARRAY_LENGTH);
    switch (of) {
      case "string": {
        const value: string[] = [];
        for (let i = 0; i < length; i++) value.push(await this.string());
        return { type: "array", of, value };
      }
      case "array": {
        const value: GgufArray[] = [];
        for (let i = 0; i < length; i++) value.push(await this.array());
        return { type: "array", of, value };
      }
      case "bool": {
        const b = await this.bytes(length);
        return { type: "array", of, value: Array.from(b, (x) => x !== 0) };
      }
      case "uint64":
      case "int64": {
        const b = await this.bytes(length * 8);
        return { type: "array", of, value: Array.from({ length }, (_, i) => bigOf(of, b, i * 8)) };
      }
      default: {
        const width = VALUE_WIDTH[of];
        const b = await this.bytes(length * width);
        const value = new Array<number>(length);
        for (let i = 0; i < length; i++) value[i] = numberOf(of, b, i * width);
        return { type: "array", of, value };
      }
    }
  }
}

function numberOf(type: NumberType, b: Buffer, at: number): number {
  switch (type) {
    case "uint8":
      return b.readUInt8(at);
    case "int8":
      return b.readInt8(at);
    case "uint16":
      return b.readUInt16LE(at);
    case "int16":
      return b.readInt16LE(at);
    case "uint32":
      return b.readUInt32LE(at);
    case "int32":
      return b.readInt32LE(at);
    case "float32":
      return b.readFloatLE(at);
    case "float64":
      return b.readDoubleLE(at);
  }
}

function bigOf(type: BigIntType, b: Buffer, at: number): bigint {
  return type === "uint64" ? b.readBigUInt64LE(at) : b.readBigInt64LE(at);
}
