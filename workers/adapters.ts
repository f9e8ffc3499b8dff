/**
 * A replica's LoRA adapters (docs/adapters.md): a job's `adapter` ("<name>@<version>") resolved to
 * what its engine loads. The version must be an adapter of this replica's model version; its files
 * come from the artifact store (checked against its manifest) into the node's cache, and for
 * llama.cpp its GGUF conversion (src/formats/convert/lora.ts) is made once per adapter and base
 * and kept in the store like a checkpoint's. Which adapters stay loaded is the engine's business.
 */
import { join } from "node:path";
import { DEFAULT_MAX_LORA_RANK } from "../src/contracts/engines.ts";
import { PlatformError } from "../src/contracts/errors.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import type { Control } from "../src/redis/connection.ts";
import { convertedAdapter } from "../src/models/converted.ts";
import type { DerivedDeps } from "../src/models/derived.ts";
import { localArtifact } from "../src/models/materialize.ts";
import type { RegisteredVersion } from "../src/models/record.ts";
import { listModelVersions, resolveModelVersion } from "../src/models/versions.ts";
import type { ObjectStore } from "../src/storage/store.ts";
import { logger } from "../src/telemetry/log.ts";
import type { AppliedAdapter } from "./engines/engine.ts";

/** Resolutions remembered per replica (a few hundred bytes each); past this the oldest go. */
const MAX_REMEMBERED = 256;

export type AdapterSource = {
  ctl: Control;
  store: ObjectStore;
  /** The node's cache (<dataDir>/cache/models), where adapter directories and conversions land. */
  cacheDir: string;
  replicaId: string;
  endpoint: Endpoint;
  /** This replica's model version: the base every adapter it serves must name. */
  model: RegisteredVersion;
  /** The file (llama.cpp: the GGUF) or directory (vLLM) the replica loaded for the model, once it has. */
  modelPath: () => string;
};

/** What a job handler needs: an adapter reference made into what the engine applies. */
export type AdapterResolver = { resolve(ref: string): Promise<AppliedAdapter> };

export class ReplicaAdapters implements AdapterResolver {
  private readonly source: AdapterSource;
  private readonly resolved = new Map<string, Promise<AppliedAdapter>>();

  constructor(source: AdapterSource) {
    this.source = source;
  }

  /** The adapter a job names, ready for the engine; a 404 or 400 naming the job's `adapter` field otherwise. */
  resolve(ref: string): Promise<AppliedAdapter> {
    let found = this.resolved.get(ref);
    if (!found) {
      found = this.load(ref);
      // A failure is not remembered: the adapter may be registered (or the store reachable) next time.
      found.catch(() => this.resolved.delete(ref));
      if (this.resolved.size >= MAX_REMEMBERED) this.resolved.delete(this.resolved.keys().next().value as string);
      this.resolved.set(ref, found);
    }
    return found;
  }

  private async load(ref: string): Promise<AppliedAdapter> {
    const { ctl, model, endpoint } = this.source;
    const at = ref.indexOf("@");
    const record = await resolveModelVersion(ctl, ref.slice(0, at), ref.slice(at + 1)).catch((e: unknown) => {
      if (e instanceof PlatformError && e.code === "model_not_found")
        throw new PlatformError(404, "adapter_not_found", `adapter ${ref} is not registered`, "adapter");
      throw e;
    });
    const adapter = record.adapter;
    if (record.kind !== "adapter" || !adapter)
      throw new PlatformError(400, "invalid_request", `${ref} is a model, not an adapter`, "adapter");
    if (adapter.base.name !== model.name || adapter.base.version !== model.version)
      throw new PlatformError(
        400,
        "adapter_base_mismatch",
        `adapter ${ref} adapts ${adapter.base.name}@${adapter.base.version}; this replica serves ${model.name}@${model.version}`,
        "adapter",
      );
    const maxRank = endpoint.config.runtime.max_lora_rank ?? DEFAULT_MAX_LORA_RANK;
    if (adapter.rank > maxRank)
      throw new PlatformError(
        400,
        "invalid_request",
        `adapter ${ref} has rank ${adapter.rank}, above this endpoint's runtime.max_lora_rank ${maxRank}; raise it in the deployment`,
        "adapter",
      );
    const started = Date.now();
    const deps: DerivedDeps = {
      ctl,
      store: this.source.store,
      holder: this.source.replicaId,
      cacheDir: this.source.cacheDir,
    };
    const dir = await localArtifact(deps.store, deps.cacheDir, record);
    if (endpoint.framework !== "llamacpp") return { ref, path: dir, rank: adapter.rank };
    const converted = await convertedAdapter(deps, {
      dir,
      digest: record.sha256,
      basePath: this.source.modelPath(),
      baseKey: model.sha256,
    });
    logger("worker").info(
      { replica: this.source.replicaId, adapter: ref, outcome: converted.outcome, ms: Date.now() - started },
      `replica ${this.source.replicaId}: adapter ${ref} converted to GGUF (${converted.outcome})`,
    );
    return { ref, path: converted.path, rank: adapter.rank };
  }
}

/** Where a replica keeps adapter files: beside its models' cache. */
export function adapterCacheDir(dataDir: string): string {
  return join(dataDir, "cache", "models");
}

/** Whether any registered adapter names `model` as its base (a vLLM replica then starts with LoRA enabled). */
export async function hasAdapters(ctl: Control, model: RegisteredVersion): Promise<boolean> {
  return (await listModelVersions(ctl)).some(
    (v) => v.adapter?.base.name === model.name && v.adapter.base.version === model.version,
  );
}
