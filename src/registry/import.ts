/**
 * Registering a model version: fetch the artifact from wherever the user says
 * (a local path, file://, https://, hf://, s3://, or an upload), hash it, read
 * its GGUF metadata, copy it into the artifact store, and record the version.
 */
import { createHash, randomUUID } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Framework } from "../contracts/deployment.ts";
import type { GgufSummary, ModelVersionRecord } from "../contracts/records.ts";
import type { Control } from "../control/redis.ts";
import { PlatformError, withDetail } from "../errors.ts";
import type { ObjectStore } from "../storage/store.ts";
import { openObject, type S3Settings } from "../storage/index.ts";
import { loadSettings } from "../settings/index.ts";
import { checkSourceScheme, isRemoteSource, openRemoteSource, type SourcePolicy, type SourceProgress } from "./sources.ts";
import { nextVersion, saveModelVersion, versionExists } from "./versions.ts";

export type ImportRequest = {
  name: string;
  framework: Framework;
  /** Where it comes from, as the user wrote it; kept on the record. */
  source: string;
  version?: string;
  /** The artifact's bytes, when uploaded instead of fetched from `source`. */
  body?: Readable;
  /** Called as a remote source downloads (bytes so far, and the total when the server said it). */
  onProgress?: (p: SourceProgress) => void;
};

/**
 * `sources`: what remote sources may reach (settings.sources; default: the strict policy of an empty
 * environment). `s3`: how s3:// sources are reached (settings.storage.s3).
 */
export type ImportDeps = { ctl: Control; artifacts: ObjectStore; scratchDir: string; sources?: SourcePolicy; s3?: S3Settings };

export async function importModel(deps: ImportDeps, req: ImportRequest): Promise<ModelVersionRecord> {
  if (req.version !== undefined && (await versionExists(deps.ctl, req.name, req.version))) {
    throw new PlatformError(409, "version_exists", `model "${req.name}" already has a version "${req.version}"; choose another --version or omit it`, "version");
  }
  await mkdir(deps.scratchDir, { recursive: true });
  const scratch = join(deps.scratchDir, `import-${randomUUID()}`);
  try {
    const { sha256, size } = await copyHashing(req.body ?? (await openSource(req.source, deps.sources ?? loadSettings({}).sources, deps.s3, req.onProgress)), scratch);
    if (size === 0) throw new PlatformError(400, "invalid_artifact", `${req.source}: the artifact is empty`, "source");
    const gguf = await summarizeGguf(scratch, req);
    const version = req.version ?? (await nextVersion(deps.ctl, req.name));
    const artifact = `models/${req.name}/${version}/${fileName(req.source)}`;
    await deps.artifacts.put(artifact, createReadStream(scratch));
    const record: ModelVersionRecord = {
      name: req.name,
      version,
      framework: req.framework,
      source: req.source,
      artifact,
      sha256,
      size_bytes: size,
      gguf,
      created: Date.now(),
    };
    await saveModelVersion(deps.ctl, record);
    return record;
  } finally {
    await rm(scratch, { force: true });
  }
}

async function openSource(source: string, policy: SourcePolicy, s3: S3Settings | undefined, onProgress?: (p: SourceProgress) => void): Promise<Readable> {
  checkSourceScheme(source);
  if (isRemoteSource(source)) return openRemoteSource(source, policy, onProgress);
  // file://, s3:// and plain paths all go through the storage module.
  const { store, key } = openObject(source, s3);
  return store.get(key);
}

async function copyHashing(input: Readable, dest: string): Promise<{ sha256: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      size += chunk.length;
      done(null, chunk);
    },
  });
  await pipeline(input, tap, createWriteStream(dest));
  return { sha256: hash.digest("hex"), size };
}

const GGUF_MAGIC = Buffer.from("GGUF");

/** Whether the file starts with the GGUF magic; its bytes are never quoted back (they are the client's data). */
async function hasGgufMagic(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(GGUF_MAGIC.length);
    const { bytesRead } = await file.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.equals(GGUF_MAGIC);
  } finally {
    await file.close();
  }
}

async function summarizeGguf(path: string, req: ImportRequest): Promise<GgufSummary | null> {
  // vLLM serves Hugging Face-style checkpoints too: only llama.cpp needs GGUF.
  if (!(await hasGgufMagic(path))) {
    if (req.framework !== "llamacpp") return null;
    throw new PlatformError(400, "invalid_artifact", `${req.source}: not a GGUF file (no GGUF magic), which framework "llamacpp" needs`, "source");
  }
  // node-llama-cpp (~45 MiB resident) loads only when a model is imported: a gateway rarely does.
  const { GgmlType, GgufFileType, readGgufFileInfo } = await import("node-llama-cpp");
  let info: Awaited<ReturnType<typeof readGgufFileInfo>>;
  try {
    info = await readGgufFileInfo(path, { readTensorInfo: true });
  } catch (e) {
    if (req.framework !== "llamacpp") return null;
    // The parser's text may quote the scratch path or the file's bytes: the gateway logs it with the request id.
    throw withDetail(new PlatformError(400, "invalid_artifact", `${req.source}: a GGUF file whose header cannot be read (truncated or corrupt), which framework "llamacpp" needs`, "source"), e);
  }
  const meta = info.metadata as Record<string, Record<string, unknown> | undefined>;
  const architecture = typeof meta.general?.architecture === "string" ? meta.general.architecture : null;
  const archMeta = architecture ? meta[architecture] : undefined;
  const parameters = (info.fullTensorInfo ?? info.tensorInfo ?? []).reduce((sum, t) => sum + t.dimensions.reduce<number>((a, d) => a * Number(d), 1), 0);
  return {
    architecture,
    parameters: parameters > 0 ? parameters : null,
    context_length: typeof archMeta?.context_length === "number" ? archMeta.context_length : null,
    quantization: quantizationName(meta.general?.file_type, info.tensorInfo ?? [], GgufFileType, GgmlType),
    chat_template: typeof meta.tokenizer?.chat_template === "string",
    max_token_bytes: longestToken((meta.tokenizer as { ggml?: { tokens?: unknown } } | undefined)?.ggml?.tokens),
  };
}

/** UTF-8 bytes of the vocabulary's longest token (the stored form, never shorter than what it decodes to). */
function longestToken(tokens: unknown): number | null {
  if (!Array.isArray(tokens) || tokens.length === 0) return null;
  let longest = 0;
  for (const t of tokens) if (typeof t === "string") longest = Math.max(longest, Buffer.byteLength(t, "utf8"));
  return longest > 0 ? longest : null;
}

function quantizationName(fileType: unknown, tensors: { ggmlType: number }[], GgufFileType: Record<number, string>, GgmlType: Record<number, string>): string | null {
  if (typeof fileType === "number" && GgufFileType[fileType]) return GgufFileType[fileType].replace(/^(MOSTLY|ALL)_/, "");
  const counts = new Map<number, number>();
  for (const t of tensors) counts.set(t.ggmlType, (counts.get(t.ggmlType) ?? 0) + 1);
  const top = [...counts.entries()].sort((a, b) => b[1] - a[1])[0];
  return top ? (GgmlType[top[0]] ?? null) : null;
}

function fileName(source: string): string {
  const name = basename(source.split("?")[0] ?? source);
  return /^[\w.-]+$/.test(name) ? name : "model.gguf";
}
