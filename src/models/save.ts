/**
 * What every kind of import (import.ts, adapter-register.ts, diffusers.ts) shares: the request and
 * its dependencies, a name holding one kind, the fetched files stored, the version recorded.
 */
import { createReadStream } from "node:fs";
import { join } from "node:path";
import type { Framework } from "../contracts/deployment.ts";
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import type { S3Settings } from "../storage/index.ts";
import type { ObjectStore } from "../storage/store.ts";
import { manifestDigest, sortManifest } from "./checkpoint.ts";
import type { SourceRequest } from "./fetch.ts";
import type { ArtifactFile, ModelTask, RegisteredVersion, TrainingSummary } from "./record.ts";
import { listModelVersions, nextVersion, saveModelVersion } from "./versions.ts";

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

/**
 * A name holds models or adapters, never both: `<name>` (latest) must mean one kind of thing to a
 * deployment and to `<endpoint>:<name>`. A 409 naming the clash when `name` holds the other kind.
 */
export async function requireKind(
  deps: Pick<ImportDeps, "ctl">,
  name: string,
  kind: "adapter" | "model",
): Promise<void> {
  const existing = await listModelVersions(deps.ctl, name);
  const other = existing.find((v) => (v.kind === "adapter") !== (kind === "adapter"));
  if (!other) return;
  throw new PlatformError(
    409,
    "name_taken",
    kind === "adapter"
      ? `name: "${name}" already holds model versions (${other.version}); register the adapter under a name of its own`
      : `name: "${name}" already holds LoRA adapter versions (${other.version}); register the model under a name of its own`,
    "name",
  );
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
