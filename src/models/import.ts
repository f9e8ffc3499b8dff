/**
 * Registering a model version: fetch the artifact from wherever the user says (a local path,
 * file://, https://, hf://, s3://, or an upload: fetch.ts, fetch-checkpoint.ts), read its metadata
 * (a GGUF header: src/formats/gguf/summary.ts), copy it into the artifact store, and record the
 * version. The artifact is one GGUF file, or a Hugging Face-style checkpoint directory (config,
 * tokenizer, safetensors) kept file by file under one version with a manifest
 * (src/models/checkpoint.ts; docs/models.md). What every kind ends with, storing and recording,
 * is save.ts; `registerAdapter` is the entry for the platform's own adapters (a fine-tuning job's).
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { requireConvertible } from "../formats/convert/index.ts";
import { type GgufInfo, type GgufSummary, hasGgufMagic, readGgufInfo, summarizeGguf } from "../formats/gguf/index.ts";
import { loadSettings } from "../settings/index.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import { importAdapter } from "./adapter-register.ts";
import { summarizeCheckpoint } from "./checkpoint.ts";
import { fetchFile, isDirectoryRequest } from "./fetch.ts";
import { fetchCheckpoint } from "./fetch-checkpoint.ts";
import {
  defaultCheckpointTask,
  defaultTask,
  type RegisteredVersion,
  type TrainingSummary,
  type VersionRef,
} from "./record.ts";
import { importPipeline } from "./diffusers.ts";
import { isPipelineFile } from "./pipeline-files.ts";
import { type ImportDeps, type ImportRequest, requireKind, saveVersion, storeFetched } from "./save.ts";
import { nextVersion, versionExists } from "./versions.ts";

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

/**
 * Registers the PEFT adapter in the local directory `dir` (adapter_config.json +
 * adapter_model.safetensors) as `name` (its next version, or `version`), adapting `base`; with
 * `training`, the fine-tuning job that made it. Checked against the base as any upload is: a 400
 * PlatformError says why it is refused.
 */
export async function registerAdapter(
  deps: ImportDeps,
  input: {
    name: string;
    version?: string;
    base: VersionRef;
    dir: string;
    training?: TrainingSummary;
    /** The organization that made it (src/models/owners.ts). */
    owner?: string;
  },
): Promise<RegisteredVersion> {
  return importModel(deps, {
    name: input.name,
    version: input.version,
    framework: "llamacpp",
    source: input.training ? `fine-tuning job ${input.training.job_id}` : input.dir,
    directory: { path: input.dir },
    base: `${input.base.name}@${input.base.version}`,
    training: input.training,
    owner: input.owner,
  });
}
