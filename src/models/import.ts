/**
 * Registering a model version: fetch the artifact from wherever the user says (a local path,
 * file://, https://, hf://, s3://, or an upload: fetch.ts, fetch-checkpoint.ts), read its metadata
 * (a GGUF header: src/formats/gguf/summary.ts), copy it into the artifact store, and record the
 * version. The artifact is one GGUF file, or a Hugging Face-style checkpoint directory (config,
 * tokenizer, safetensors) kept file by file under one version with a manifest
 * (src/models/checkpoint.ts; docs/models.md).
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Framework } from "../contracts/deployment.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { requireConvertible } from "../formats/convert/index.ts";
import { type GgufInfo, type GgufSummary, hasGgufMagic, readGgufInfo, summarizeGguf } from "../formats/gguf/index.ts";
import type { Control } from "../redis/connection.ts";
import { loadSettings } from "../settings/index.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import type { S3Settings } from "../storage/index.ts";
import type { ObjectStore } from "../storage/store.ts";
import { importAdapter, requireKind } from "./adapter-register.ts";
import { manifestDigest, sortManifest, summarizeCheckpoint } from "./checkpoint.ts";
import { fetchFile, isDirectoryRequest, type SourceRequest } from "./fetch.ts";
import { fetchCheckpoint } from "./fetch-checkpoint.ts";
import {
  type ArtifactFile,
  defaultCheckpointTask,
  defaultTask,
  type ModelTask,
  type RegisteredVersion,
  type TrainingSummary,
} from "./record.ts";
import { importPipeline } from "./diffusers.ts";
import { isPipelineFile } from "./pipeline-files.ts";
import { nextVersion, saveModelVersion, versionExists } from "./versions.ts";

export type ImportRequest = SourceRequest & {
  name: string;
  framework: Framework;
  version?: string;
  /** What the model serves; absent: its architecture's default (`defaultTask`: encoders embed, decoders generate). */
  task?: ModelTask;
  /**
   * The base version a LoRA adapter adapts, `<model>@<version>`: required when the source holds
   * adapter_config.json (an adapter, src/models/adapter.ts), refused otherwise.
   */
  base?: string;
  /** Versions a fine-tuning job made: how (kept on the record). */
  training?: TrainingSummary;
  /** The organization that made it (a fine-tuning job's): its name is claimed for it (src/models/owners.ts). */
  owner?: string;
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
  if (await isDirectoryRequest(req)) {
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
    const { sha256, size } = await fetchFile(req, scratch, policy, deps.s3);
    if (size === 0) throw new PlatformError(400, "invalid_artifact", `${req.source}: the artifact is empty`, "source");
    const gguf = await readSummary(scratch, req);
    const version = req.version ?? (await nextVersion(deps.ctl, req.name));
    const artifact = `models/${req.name}/${version}/${fileName(req.source)}`;
    await deps.artifacts.put(artifact, createReadStream(scratch));
    return await saveVersion(deps.ctl, req, {
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

/** Fetches the checkpoint into the scratch directory `dir`, then checks, summarises, stores and records it. */
async function importCheckpoint(
  deps: ImportDeps,
  req: ImportRequest,
  dir: string,
  policy: SourcePolicy,
): Promise<RegisteredVersion> {
  const files = await fetchCheckpoint(req, dir, policy, deps.s3);
  const all = [...files.keys()];
  // A diffusers pipeline (model_index.json): src/models/diffusers.ts. Elsewhere its folders' names mean nothing.
  if (all.includes("model_index.json")) return importPipeline(deps, req, dir, files);
  const names = all.filter((name) => !isPipelineFile(name));
  if (names.includes("adapter_config.json")) return importAdapter(deps, req, dir, files);
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
  return saveVersion(deps.ctl, req, {
    ...(await storeFetched(deps, req, dir, files, names)),
    checkpoint,
    task: req.task ?? defaultCheckpointTask(checkpoint),
  });
}

/** Stores the fetched files `names` (from `dir`) as the next version's directory artifact: the record's storage fields. */
export async function storeFetched(
  deps: ImportDeps,
  req: ImportRequest,
  dir: string,
  files: ReadonlyMap<string, { size: number; sha256: string }>,
  names: readonly string[],
) {
  const manifest: ArtifactFile[] = sortManifest(names.map((path) => ({ path, ...files.get(path)! })));
  const version = req.version ?? (await nextVersion(deps.ctl, req.name));
  const artifact = await storeDirectory(deps, `models/${req.name}/${version}`, dir, manifest);
  return {
    version,
    artifact,
    sha256: manifestDigest(manifest),
    size_bytes: manifest.reduce((n, f) => n + f.size, 0),
    gguf: null,
    kind: "hf" as const,
    manifest,
  };
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
export async function saveVersion(
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
    ...(req.owner ? { owner: req.owner } : {}),
  };
  await saveModelVersion(ctl, record);
  return record;
}

/** The file's GGUF summary; null for a file vLLM serves (not GGUF), refused for llama.cpp, which needs one. */
async function readSummary(path: string, req: ImportRequest): Promise<GgufSummary | null> {
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
  return summarizeGguf(info);
}

function fileName(source: string): string {
  const name = basename(source.split("?")[0] ?? source);
  return /^[\w.-]+$/.test(name) ? name : "model.gguf";
}
