/**
 * Registering a model version: fetch the artifact from wherever the user says
 * (a local path, file://, https://, hf://, s3://, or an upload), hash it, read
 * its metadata, copy it into the artifact store, and record the version. The
 * artifact is one GGUF file, or a Hugging Face-style checkpoint directory
 * (config, tokenizer, safetensors) kept file by file under one version with a
 * manifest (src/registry/checkpoint.ts; docs/registry.md).
 */
import { createHash, randomUUID } from "node:crypto";
import { constants, createReadStream, createWriteStream } from "node:fs";
import { lstat, mkdir, open, readdir, rm, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { type Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Framework } from "../contracts/deployment.ts";
import {
  type ArtifactFile,
  defaultCheckpointTask,
  defaultTask,
  type GgufSummary,
  type ModelTask,
  type RegisteredVersion,
  type TrainingSummary,
} from "./version.ts";
import { importAdapter, requireKind } from "./adapter-register.ts";
import type { Control } from "../redis/connection.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import type { ObjectStore } from "../storage/store.ts";
import { openObject, openStore, type S3Settings, StorageError } from "../storage/index.ts";
import { loadSettings } from "../settings/index.ts";
import { requireConvertible } from "./convert/index.ts";
import {
  isCheckpointFile,
  isModuleDirectory,
  manifestDigest,
  MAX_CHECKPOINT_FILES,
  sortManifest,
  summarizeCheckpoint,
  uploadedEntryName,
} from "./checkpoint.ts";
import { downloadFile, listHubRepo, parseHubRepo } from "./download.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import { checkSourceScheme, huggingFaceUrl, isRemoteSource, type SourceProgress } from "./sources.ts";
import {
  GGML_TYPES,
  GGUF_MAGIC,
  type GgufInfo,
  type GgufTensorInfo,
  LLAMA_FTYPE_NAMES,
  readGgufInfo,
} from "./gguf/index.ts";
import { readTar } from "./tar.ts";
import { componentFiles, isPipelineComponent, isPipelineFile } from "./pipeline-files.ts";
import { importPipeline } from "./diffusers.ts";
import { nextVersion, saveModelVersion, versionExists } from "./versions.ts";

export type ImportRequest = {
  name: string;
  framework: Framework;
  /** Where it comes from, as the user wrote it; kept on the record. */
  source: string;
  version?: string;
  /** What the model serves; absent: its architecture's default (`defaultTask`: encoders embed, decoders generate). */
  task?: ModelTask;
  /** The artifact's bytes, when uploaded instead of fetched from `source`. */
  body?: Readable;
  /** A checkpoint directory uploaded as a tar stream (src/registry/tar.ts) instead of fetched from `source`. */
  tar?: Readable;
  /**
   * A checkpoint directory the caller has already confined: a local directory, or the files under
   * `prefix` of a store (an s3:// prefix). Without it, `source` names one (a local directory, an
   * s3:// URI ending in "/", hf://org/repo[@revision]) or a single file. A store given here is
   * closed once its files are read.
   */
  directory?: { path: string } | { store: ObjectStore; prefix: string };
  /** Called as a remote source downloads (bytes so far, and the total when the server said it). */
  onProgress?: (p: SourceProgress) => void;
  /**
   * The base version a LoRA adapter adapts, `<model>@<version>`: required when the source holds
   * adapter_config.json (an adapter, src/registry/adapter.ts), refused otherwise.
   */
  base?: string;
  /** Versions a fine-tuning job made: how (kept on the record). */
  training?: TrainingSummary;
};

/**
 * `sources`: what remote sources may reach (settings.sources; default: the strict policy of an empty
 * environment). `s3`: how s3:// sources are reached (settings.storage.s3).
 */
export type ImportDeps = {
  ctl: Control;
  artifacts: ObjectStore;
  scratchDir: string;
  sources?: SourcePolicy;
  s3?: S3Settings;
};

export async function importModel(deps: ImportDeps, req: ImportRequest): Promise<RegisteredVersion> {
  if (req.version !== undefined && (await versionExists(deps.ctl, req.name, req.version))) {
    throw new PlatformError(
      409,
      "version_exists",
      `model "${req.name}" already has a version "${req.version}"; choose another --version or omit it`,
      "version",
    );
  }
  await mkdir(deps.scratchDir, { recursive: true });
  const scratch = join(deps.scratchDir, `import-${randomUUID()}`);
  const policy = deps.sources ?? loadSettings({}).sources;
  if (
    req.body === undefined &&
    (req.tar !== undefined || req.directory !== undefined || (await namesDirectory(req.source)))
  ) {
    try {
      return await importCheckpoint(deps, req, scratch, policy);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }
  if (req.base !== undefined)
    throw new PlatformError(
      400,
      "invalid_request",
      "base: only an adapter (a directory holding adapter_config.json and adapter_model.safetensors) has a base; this source is a single file",
      "base",
    );
  await requireKind(deps, req.name, "model");
  try {
    const { sha256, size } = req.body
      ? await copyHashing(req.body, scratch)
      : isRemoteSource(req.source)
        ? await download(req.source, scratch, policy, req.onProgress)
        : await copyHashing(await openSource(req.source, deps.s3), scratch);
    if (size === 0) throw new PlatformError(400, "invalid_artifact", `${req.source}: the artifact is empty`, "source");
    const gguf = await summarizeGguf(scratch, req);
    const version = req.version ?? (await nextVersion(deps.ctl, req.name));
    const artifact = `models/${req.name}/${version}/${fileName(req.source)}`;
    await deps.artifacts.put(artifact, createReadStream(scratch));
    return await saveRecord(deps.ctl, req, {
      version,
      artifact,
      sha256,
      size_bytes: size,
      gguf,
      task: req.task ?? defaultTask(gguf),
      kind: gguf ? "gguf" : undefined,
    });
  } finally {
    await rm(scratch, { force: true });
  }
}

async function openSource(source: string, s3: S3Settings | undefined): Promise<Readable> {
  checkSourceScheme(source);
  // file://, s3:// and plain paths all go through the storage module.
  const { store, key } = openObject(source, s3);
  return store.get(key);
}

/** A remote single file (https://, hf://org/repo/file), resumed after a broken connection. */
async function download(
  source: string,
  dest: string,
  policy: SourcePolicy,
  onProgress?: (p: SourceProgress) => void,
): Promise<{ sha256: string; size: number }> {
  checkSourceScheme(source);
  const hub = /^hf:\/\//i.test(source);
  return downloadFile(hub ? huggingFaceUrl(source, policy.hfEndpoint) : source, dest, policy, {
    hub,
    onBytes: (received, total) => onProgress?.({ received, total }),
  });
}

/** Whether `source` (not uploaded, not opened by the caller) names a checkpoint directory rather than one file. */
async function namesDirectory(source: string): Promise<boolean> {
  if (parseHubRepo(source)) return true;
  if (/^s3:\/\//i.test(source)) return source.endsWith("/");
  if (isRemoteSource(source) || (/^[a-z][a-z0-9+.-]+:/i.test(source) && !/^file:/i.test(source))) return false;
  const path = /^file:/i.test(source) ? new URL(source).pathname : source;
  return (await stat(path).catch(() => undefined))?.isDirectory() ?? false;
}

type Scratch = { dir: string; files: Map<string, { size: number; sha256: string }>; left: number };

function checkpointTooLarge(policy: SourcePolicy): PlatformError {
  return new PlatformError(
    413,
    "source_too_large",
    `source: the checkpoint is larger than ${policy.maxBytes} bytes (PLATFORM_MAX_MODEL_BYTES)`,
    "source",
  );
}

function tooManyFiles(): PlatformError {
  return new PlatformError(
    400,
    "invalid_artifact",
    `source: the checkpoint has more than ${MAX_CHECKPOINT_FILES} files`,
    "source",
  );
}

/** A checked checkpoint path's place in the scratch directory, its module subdirectory (`1_Pooling/`) created. */
async function scratchPath(scratch: Scratch, name: string): Promise<string> {
  const path = join(scratch.dir, name);
  if (name.includes("/")) await mkdir(dirname(path), { recursive: true });
  return path;
}

/** Writes one checkpoint file into the scratch directory, hashing it and counting it against the import's budget. */
async function addFile(
  scratch: Scratch,
  name: string,
  chunks: AsyncIterable<Buffer | Uint8Array>,
  policy: SourcePolicy,
): Promise<void> {
  if (scratch.files.has(name))
    throw new PlatformError(400, "invalid_artifact", `source: the file ${name} appears twice`, "source");
  if (scratch.files.size >= MAX_CHECKPOINT_FILES) throw tooManyFiles();
  const path = await scratchPath(scratch, name);
  const hash = createHash("sha256");
  let size = 0;
  const file = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW);
  try {
    for await (const chunk of chunks) {
      size += chunk.length;
      if (size > scratch.left) throw checkpointTooLarge(policy);
      await file.write(chunk);
      hash.update(chunk);
    }
  } finally {
    await file.close();
  }
  scratch.left -= size;
  scratch.files.set(name, { size, sha256: hash.digest("hex") });
}

/** Fills the scratch directory from the request's source, then checks, summarises, stores and records the checkpoint. */
async function importCheckpoint(
  deps: ImportDeps,
  req: ImportRequest,
  dir: string,
  policy: SourcePolicy,
): Promise<RegisteredVersion> {
  await mkdir(dir);
  const scratch: Scratch = { dir, files: new Map(), left: policy.maxBytes };
  const hub = req.tar || req.directory ? undefined : parseHubRepo(req.source);
  if (req.tar) {
    for await (const entry of readTar(req.tar)) {
      const name = uploadedEntryName(entry.name);
      if (name === undefined || !isCheckpointFile(name)) {
        for await (const _ of entry.body); // not part of the checkpoint (README, .gitattributes, original/): skipped
        continue;
      }
      await addFile(scratch, name, entry.body, policy);
    }
  } else if (hub) {
    await fromHub(scratch, hub, req, policy);
  } else {
    const directory = req.directory ?? openDirectory(req.source, deps.s3);
    if ("path" in directory) await fromLocalDirectory(scratch, directory.path, req, policy);
    else {
      try {
        await fromStore(scratch, directory.store, directory.prefix, req, policy);
      } finally {
        directory.store.close();
      }
    }
  }
  const all = [...scratch.files.keys()];
  // A diffusers pipeline (model_index.json): src/registry/diffusers.ts. Elsewhere its folders' names mean nothing.
  if (all.includes("model_index.json")) return importPipeline(deps, req, dir, scratch.files);
  const names = all.filter((name) => !isPipelineFile(name));
  if (names.includes("adapter_config.json")) return importAdapter(deps, req, dir, scratch.files);
  if (req.base !== undefined)
    throw new PlatformError(
      400,
      "invalid_request",
      "base: the source has no adapter_config.json, so it is not an adapter; register a model without --base, or point --source at the PEFT adapter directory",
      "base",
    );
  await requireKind(deps, req.name, "model");
  const checkpoint = await summarizeCheckpoint(dir, names);
  // llama.cpp serves it converted: refused now, with nothing stored, when no converter knows it.
  if (req.framework === "llamacpp") requireConvertible(checkpoint.architecture);
  const manifest: ArtifactFile[] = sortManifest(names.map((path) => ({ path, ...scratch.files.get(path)! })));
  const version = req.version ?? (await nextVersion(deps.ctl, req.name));
  const artifact = await storeDirectory(deps, `models/${req.name}/${version}`, dir, manifest);
  return saveRecord(deps.ctl, req, {
    version,
    artifact,
    sha256: manifestDigest(manifest),
    size_bytes: manifest.reduce((n, f) => n + f.size, 0),
    gguf: null,
    kind: "hf",
    manifest,
    checkpoint,
    task: req.task ?? defaultCheckpointTask(checkpoint),
  });
}

/** Copies a directory artifact's files (`manifest`, from `dir`) under `artifact` in the store; its key. */
export async function storeDirectory(
  deps: Pick<ImportDeps, "artifacts">,
  artifact: string,
  dir: string,
  manifest: readonly ArtifactFile[],
): Promise<string> {
  try {
    for (const f of manifest) await deps.artifacts.put(`${artifact}/${f.path}`, createReadStream(join(dir, f.path)));
  } catch (e) {
    // Nothing points at a partial copy; it is removed so a retry under the same version starts clean.
    for (const f of manifest) await deps.artifacts.delete(`${artifact}/${f.path}`).catch(() => undefined);
    throw e;
  }
  return artifact;
}

/** Records the version: what every version takes from its request, and what its kind adds. */
export async function saveRecord(
  ctl: Control,
  req: ImportRequest,
  fields: Omit<RegisteredVersion, "name" | "framework" | "source" | "created">,
): Promise<RegisteredVersion> {
  const record: RegisteredVersion = {
    name: req.name,
    framework: req.framework,
    source: req.source,
    created: Date.now(),
    ...fields,
    ...(req.training ? { training: req.training } : {}),
  };
  await saveModelVersion(ctl, record);
  return record;
}

/** A directory `source` names (a path, file:// or an s3:// prefix), for callers that confined nothing (the operator's own `up`). */
function openDirectory(
  source: string,
  s3: S3Settings | undefined,
): { path: string } | { store: ObjectStore; prefix: string } {
  checkSourceScheme(source);
  if (/^s3:\/\//i.test(source)) return { store: openStore(source.replace(/\/+$/, ""), s3), prefix: "" };
  return { path: /^file:/i.test(source) ? new URL(source).pathname : source };
}

/**
 * A directory on this machine: its top-level checkpoint files and its sentence-transformers modules'
 * config.json. They must be regular files in real directories: a symbolic link is refused rather
 * than followed, so a link planted in an allowed directory cannot lead the import anywhere else
 * (the CLI, on the user's own machine, follows links and uploads the files).
 */
async function fromLocalDirectory(
  scratch: Scratch,
  path: string,
  req: ImportRequest,
  policy: SourcePolicy,
): Promise<void> {
  const entries = await readdir(path, { withFileTypes: true }).catch((e: NodeJS.ErrnoException) => {
    throw new PlatformError(
      e.code === "ENOENT" ? 404 : 400,
      "source_not_found",
      `source: "${req.source}": ${e.code === "ENOENT" ? "no such directory" : `cannot list it (${e.code ?? "error"})`}`,
      "source",
    );
  });
  const linked = (name: string) =>
    new PlatformError(
      400,
      "invalid_artifact",
      `source: ${name} is a symbolic link, which is not followed in a directory read on the server; copy the file there, or upload the directory with \`platform training submit\``,
      "source",
    );
  const files: { name: string; size: number }[] = [];
  for (const entry of entries) {
    if (isCheckpointFile(entry.name)) {
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (entry.isFile()) files.push({ name: entry.name, size: (await stat(join(path, entry.name))).size });
    } else if (isModuleDirectory(entry.name)) {
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (!entry.isDirectory()) continue;
      const name = `${entry.name}/config.json`;
      const info = await lstat(join(path, name)).catch(() => undefined);
      if (info?.isSymbolicLink()) throw linked(name);
      if (info?.isFile()) files.push({ name, size: info.size });
    } else if (isPipelineComponent(entry.name)) {
      // A diffusers pipeline's component folder (src/registry/pipeline-files.ts).
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (entry.isDirectory()) files.push(...(await componentFiles(path, entry.name, linked)));
    }
    if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
  }
  const total = { done: 0, known: files.reduce((n, f) => n + f.size, 0) };
  if (total.known > policy.maxBytes) throw checkpointTooLarge(policy);
  for (const f of files) {
    const handle = await open(join(path, f.name), constants.O_RDONLY | constants.O_NOFOLLOW);
    await addFile(scratch, f.name, progressed(handle.createReadStream(), total, req), policy);
  }
}

/** The checkpoint files under `prefix` of a store (an s3:// prefix): top-level ones and modules' `<n>_<Name>/config.json`. */
async function fromStore(
  scratch: Scratch,
  store: ObjectStore,
  prefix: string,
  req: ImportRequest,
  policy: SourcePolicy,
): Promise<void> {
  const base = prefix === "" || prefix.endsWith("/") ? prefix : `${prefix}/`;
  const files: { key: string; name: string; size: number }[] = [];
  try {
    for await (const o of store.list(base)) {
      const name = o.key.slice(base.length);
      if (!isCheckpointFile(name)) continue;
      files.push({ key: o.key, name, size: o.size });
      if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
    }
    const total = { done: 0, known: files.reduce((n, f) => n + f.size, 0) };
    if (total.known > policy.maxBytes) throw checkpointTooLarge(policy);
    for (const f of files) await addFile(scratch, f.name, progressed(await store.get(f.key), total, req), policy);
  } catch (e) {
    if (e instanceof StorageError) {
      const missing = e.code === "not_found" || e.code === "no_such_bucket";
      throw new PlatformError(
        missing ? 404 : 502,
        missing ? "source_not_found" : "source_unreadable",
        `source: "${req.source}": ${missing ? "no such bucket or prefix" : `cannot read it (${e.code})`}`,
        "source",
      );
    }
    throw e;
  }
}

/** hf://org/repo[@revision]: the repository's checkpoint files, listed by the Hub API and each downloaded with resume and its SHA-256 checked. */
async function fromHub(
  scratch: Scratch,
  hub: { org: string; repo: string; revision: string },
  req: ImportRequest,
  policy: SourcePolicy,
): Promise<void> {
  // PLATFORM_SOURCES_TIMEOUT_MS bounds the whole repository, not each of its files.
  const deadline = Date.now() + policy.totalTimeoutMs;
  const listing = await listHubRepo(hub, policy, deadline).catch((e: unknown) => {
    if (e instanceof PlatformError && e.status === 404) {
      throw new PlatformError(
        404,
        "source_not_found",
        `source: the Hub has no repository ${hub.org}/${hub.repo} at revision "${hub.revision}" (or it is gated or private: set HF_TOKEN)`,
        "source",
      );
    }
    throw e;
  });
  const files = listing.files.filter((f) => isCheckpointFile(f.path));
  if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
  const known = files.reduce((n, f) => n + (f.size ?? 0), 0);
  if (known > policy.maxBytes) throw checkpointTooLarge(policy);
  let done = 0;
  // A commit, when the listing names one, pins every file to the same snapshot even if the branch moves meanwhile.
  const revision = listing.commit && /^[0-9a-f]{40}$/.test(listing.commit) ? listing.commit : hub.revision;
  for (const f of files) {
    const url = huggingFaceUrl(`hf://${hub.org}/${hub.repo}@${revision}/${f.path}`, policy.hfEndpoint);
    const dest = await scratchPath(scratch, f.path);
    const got = await downloadFile(url, dest, policy, {
      hub: true,
      maxBytes: scratch.left,
      sha256: f.sha256,
      deadline,
      onBytes: (received) => req.onProgress?.({ received: done + received, total: known }),
    });
    if (f.size !== null && got.size !== f.size) {
      throw new PlatformError(
        502,
        "source_corrupt",
        `source: ${f.path} came as ${got.size} bytes where the Hub lists ${f.size}; try again`,
        "source",
      );
    }
    done += got.size;
    scratch.left -= got.size;
    scratch.files.set(f.path, { size: got.size, sha256: got.sha256 });
  }
}

/** The stream's chunks, reporting the directory's progress as they pass. */
async function* progressed(
  stream: Readable,
  total: { done: number; known: number },
  req: ImportRequest,
): AsyncGenerator<Buffer> {
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    total.done += chunk.length;
    req.onProgress?.({ received: total.done, total: total.known });
    yield chunk;
  }
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

/** Whether the file starts with the GGUF magic; its bytes are never quoted back (they are the client's data). */
async function hasGgufMagic(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(GGUF_MAGIC.length);
    const { bytesRead } = await file.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.toString("latin1") === GGUF_MAGIC;
  } finally {
    await file.close();
  }
}

async function summarizeGguf(path: string, req: ImportRequest): Promise<GgufSummary | null> {
  // vLLM serves Hugging Face-style checkpoints too: only llama.cpp needs GGUF.
  if (!(await hasGgufMagic(path))) {
    if (req.framework !== "llamacpp") return null;
    throw new PlatformError(
      400,
      "invalid_artifact",
      `${req.source}: not a GGUF file (no GGUF magic), which framework "llamacpp" needs`,
      "source",
    );
  }
  // The platform's own header reader: node-llama-cpp (~45 MiB resident) never loads outside workers.
  let info: GgufInfo;
  try {
    info = await readGgufInfo(path);
  } catch (e) {
    if (req.framework !== "llamacpp") return null;
    // The reader's text may quote the file's bytes: the gateway logs it with the request id.
    throw withDetail(
      new PlatformError(
        400,
        "invalid_artifact",
        `${req.source}: a GGUF file whose header cannot be read (truncated or corrupt), which framework "llamacpp" needs`,
        "source",
      ),
      e,
    );
  }
  const value = (key: string) => info.metadata.get(key)?.value;
  const declared = value("general.architecture");
  const architecture = typeof declared === "string" ? declared : null;
  const contextLength = architecture === null ? undefined : value(`${architecture}.context_length`);
  const parameters = info.tensors.reduce((sum, t) => sum + t.dims.reduce((a, d) => a * d, 1), 0);
  return {
    architecture,
    parameters: parameters > 0 ? parameters : null,
    context_length: typeof contextLength === "number" ? contextLength : null,
    quantization: quantizationName(value("general.file_type"), info.tensors),
    chat_template: typeof value("tokenizer.chat_template") === "string",
    tokenizer: tokenizerModel(value("tokenizer.ggml.model")),
    max_token_bytes: longestToken(value("tokenizer.ggml.tokens")),
  };
}

/** `tokenizer.ggml.model` ("llama" for SentencePiece, "gpt2" for byte-level BPE, "bert" for WordPiece, ...), bounded: it is the file's text. */
function tokenizerModel(model: unknown): string | null {
  return typeof model === "string" && /^[\w.-]{1,40}$/.test(model) ? model : null;
}

/** UTF-8 bytes of the vocabulary's longest token (the stored form, never shorter than what it decodes to). */
function longestToken(tokens: unknown): number | null {
  if (!Array.isArray(tokens) || tokens.length === 0) return null;
  let longest = 0;
  for (const t of tokens) if (typeof t === "string") longest = Math.max(longest, Buffer.byteLength(t, "utf8"));
  return longest > 0 ? longest : null;
}

/** The file's declared type, else the type most of its tensors have. */
function quantizationName(fileType: unknown, tensors: GgufTensorInfo[]): string | null {
  if (typeof fileType === "number" && LLAMA_FTYPE_NAMES[fileType]) return LLAMA_FTYPE_NAMES[fileType];
  const counts = new Map<number, number>();
  for (const t of tensors) counts.set(t.type, (counts.get(t.type) ?? 0) + 1);
  const top = [...counts.entries()].sort((a, b) => b[1] - a[1])[0];
  return top ? (GGML_TYPES[top[0]]?.name ?? null) : null;
}

function fileName(source: string): string {
  const name = basename(source.split("?")[0] ?? source);
  return /^[\w.-]+$/.test(name) ? name : "model.gguf";
}
