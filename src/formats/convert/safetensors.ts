/**
 * Reads Hugging Face checkpoints stored as safetensors: one `model.safetensors`, or shards listed
 * by `model.safetensors.index.json`. Only headers are read up front; each tensor's bytes are read
 * when asked for and widened to float32, so a converter holds one tensor at a time, not the model.
 * Format: https://github.com/huggingface/safetensors (8-byte little-endian header length, a JSON
 * header of name → {dtype, shape, data_offsets}, then the data).
 */
import { type FileHandle, open, readFile, stat } from "node:fs/promises";
import { basename, join } from "node:path";

/** The dtypes a converter can widen to float32 (what checkpoints of the supported families use). */
export const SAFETENSORS_DTYPES = ["F32", "F16", "BF16", "F64"] as const;
export type SafetensorsDtype = (typeof SAFETENSORS_DTYPES)[number];

const DTYPE_BYTES: Record<string, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
};

export type SafetensorsTensor = {
  name: string;
  dtype: string;
  /** Row-major, outermost first (PyTorch's order; ggml's is the reverse). */
  shape: number[];
  /** The shard that holds it, relative to the checkpoint directory. */
  file: string;
  /** Absolute byte range in that file. */
  begin: number;
  end: number;
};

/** Far beyond any real header (a 70B model's is ~100 KB), small enough to refuse a corrupt length at once. */
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export class SafetensorsError extends Error {}

/** A checkpoint's tensors by name, read lazily from its shard files. */
export class SafetensorsCheckpoint {
  private readonly handles = new Map<string, Promise<FileHandle>>();

  readonly dir: string;
  readonly tensors: ReadonlyMap<string, SafetensorsTensor>;
  /** The `__metadata__` of the first shard (e.g. `{"format": "pt"}`). */
  readonly metadata: Readonly<Record<string, string>>;

  private constructor(
    dir: string,
    tensors: ReadonlyMap<string, SafetensorsTensor>,
    metadata: Readonly<Record<string, string>>,
  ) {
    this.dir = dir;
    this.tensors = tensors;
    this.metadata = metadata;
  }

  /**
   * Opens `dir`'s checkpoint: the sharded index when present, else `model.safetensors`; with `single`,
   * that one file (a PEFT adapter's `adapter_model.safetensors`).
   */
  static async open(dir: string, single?: string): Promise<SafetensorsCheckpoint> {
    const files = single === undefined ? await shardFiles(dir) : [single];
    const tensors = new Map<string, SafetensorsTensor>();
    let metadata: Record<string, string> = {};
    for (const [i, file] of files.entries()) {
      const header = await readHeader(join(dir, file), file);
      if (i === 0) metadata = header.metadata;
      for (const t of header.tensors) {
        if (tensors.has(t.name)) throw new SafetensorsError(`${file}: tensor ${t.name} is also in another shard`);
        tensors.set(t.name, t);
      }
    }
    return new SafetensorsCheckpoint(dir, tensors, metadata);
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  /** The tensor's description; an error naming it when the checkpoint lacks it. */
  info(name: string): SafetensorsTensor {
    const t = this.tensors.get(name);
    if (!t) throw new SafetensorsError(`the checkpoint has no tensor ${name}`);
    return t;
  }

  /** The tensor's values widened to float32, row-major. */
  async read(name: string): Promise<Float32Array> {
    const t = this.info(name);
    return this.readRange(t, t.begin, t.end);
  }

  /**
   * Rows [from, to) of the tensor's outermost dimension, widened to float32: one expert of a
   * fused expert tensor without reading (and widening) all of them.
   */
  async readRows(name: string, from: number, to: number): Promise<Float32Array> {
    const t = this.info(name);
    const outer = t.shape[0] ?? 1;
    if (!(Number.isSafeInteger(from) && Number.isSafeInteger(to) && 0 <= from && from <= to && to <= outer))
      throw new SafetensorsError(`tensor ${name}: rows ${from}..${to} are outside its ${outer}`);
    const rowBytes = outer === 0 ? 0 : (t.end - t.begin) / outer;
    return this.readRange(t, t.begin + from * rowBytes, t.begin + to * rowBytes);
  }

  private async readRange(t: SafetensorsTensor, begin: number, end: number): Promise<Float32Array> {
    if (!(SAFETENSORS_DTYPES as readonly string[]).includes(t.dtype)) {
      throw new SafetensorsError(
        `tensor ${t.name} is ${t.dtype}; only ${SAFETENSORS_DTYPES.join(", ")} checkpoints can be converted`,
      );
    }
    const bytes = Buffer.alloc(end - begin);
    const handle = await this.handle(t.file);
    const { bytesRead } = await handle.read(bytes, 0, bytes.length, begin);
    if (bytesRead !== bytes.length) throw new SafetensorsError(`${t.file}: truncated inside tensor ${t.name}`);
    return toFloat32(bytes, t.dtype as SafetensorsDtype);
  }

  async close(): Promise<void> {
    const handles = [...this.handles.values()];
    this.handles.clear();
    await Promise.all(handles.map(async (h) => (await h).close()));
  }

  private handle(file: string): Promise<FileHandle> {
    let h = this.handles.get(file);
    if (!h) {
      h = open(join(this.dir, file), "r");
      this.handles.set(file, h);
    }
    return h;
  }
}

/** The shard file names: from the index when there is one (each listed once), else the single file. */
async function shardFiles(dir: string): Promise<string[]> {
  const index = join(dir, "model.safetensors.index.json");
  const indexed = await readFile(index, "utf8").catch((e: NodeJS.ErrnoException) => {
    if (e.code === "ENOENT") return undefined;
    throw e;
  });
  if (indexed === undefined) {
    if (!(await stat(join(dir, "model.safetensors")).catch(() => undefined))) {
      throw new SafetensorsError("no model.safetensors or model.safetensors.index.json in the checkpoint directory");
    }
    return ["model.safetensors"];
  }
  let map: unknown;
  try {
    map = (JSON.parse(indexed) as { weight_map?: unknown }).weight_map;
  } catch {
    throw new SafetensorsError("model.safetensors.index.json is not valid JSON");
  }
  if (typeof map !== "object" || map === null)
    throw new SafetensorsError("model.safetensors.index.json has no weight_map");
  const files = [...new Set(Object.values(map))];
  for (const f of files) {
    // Shard names come from the checkpoint: they may not leave its directory.
    if (typeof f !== "string" || basename(f) !== f || f.startsWith("."))
      throw new SafetensorsError("model.safetensors.index.json names a shard outside the checkpoint directory");
  }
  return (files as string[]).sort();
}

async function readHeader(
  path: string,
  file: string,
): Promise<{ tensors: SafetensorsTensor[]; metadata: Record<string, string> }> {
  const handle = await open(path, "r").catch(() => {
    throw new SafetensorsError(`${file}: listed by the index but missing`);
  });
  try {
    const size = (await handle.stat()).size;
    const lengthBytes = Buffer.alloc(8);
    await handle.read(lengthBytes, 0, 8, 0);
    const length = Number(lengthBytes.readBigUInt64LE(0));
    if (size < 8 || length > MAX_HEADER_BYTES || 8 + length > size)
      throw new SafetensorsError(`${file}: not a safetensors file (bad header length)`);
    const json = Buffer.alloc(length);
    await handle.read(json, 0, length, 8);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(json.toString("utf8")) as Record<string, unknown>;
    } catch {
      throw new SafetensorsError(`${file}: the safetensors header is not valid JSON`);
    }
    const dataStart = 8 + length;
    const tensors: SafetensorsTensor[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, entry] of Object.entries(header)) {
      if (name === "__metadata__") {
        metadata = (entry ?? {}) as Record<string, string>;
        continue;
      }
      const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      const width = typeof e.dtype === "string" ? DTYPE_BYTES[e.dtype] : undefined;
      const shape = e.shape;
      const offsets = e.data_offsets;
      if (
        width === undefined ||
        !Array.isArray(shape) ||
        !shape.every((d) => Number.isSafeInteger(d) && d >= 0) ||
        !Array.isArray(offsets) ||
        offsets.length !== 2 ||
        !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
      ) {
        throw new SafetensorsError(`${file}: tensor ${name} has an unreadable entry (dtype, shape or data_offsets)`);
      }
      const [from, to] = offsets as [number, number];
      const elements = (shape as number[]).reduce((a, b) => a * b, 1);
      if (to - from !== elements * width || dataStart + to > size)
        throw new SafetensorsError(
          `${file}: tensor ${name}'s data does not match its shape or lies past the end of the file`,
        );
      tensors.push({
        name,
        dtype: e.dtype as string,
        shape: shape as number[],
        file,
        begin: dataStart + from,
        end: dataStart + to,
      });
    }
    return { tensors, metadata };
  } finally {
    await handle.close();
  }
}

function toFloat32(bytes: Buffer, dtype: SafetensorsDtype): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (dtype) {
    case "F32": {
      const out = new Float32Array(bytes.length / 4);
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
      return out;
    }
    case "F64": {
      const out = new Float32Array(bytes.length / 8);
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(i * 8, true);
      return out;
    }
    case "F16": {
      const out = new Float32Array(bytes.length / 2);
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat16(i * 2, true);
      return out;
    }
    case "BF16": {
      // bfloat16 is the top half of a float32.
      const out = new Float32Array(bytes.length / 2);
      const bits = new Uint32Array(out.buffer);
      for (let i = 0; i < out.length; i++) bits[i] = view.getUint16(i * 2, true) << 16;
      return out;
    }
  }
}
