/**
 * The files a replica loads (workers/main.ts): its model as registered, or what llama.cpp needs
 * made of it (a checkpoint's GGUF conversion, a quantized copy), and a draft model for
 * speculative decoding.
 */
import { join } from "node:path";
import type { Endpoint } from "../src/endpoints/record.ts";
import type { Control } from "../src/redis/connection.ts";
import { convertedModel } from "../src/models/converted.ts";
import type { DerivedDeps, DerivedFile } from "../src/models/derived.ts";
import { localArtifact } from "../src/models/materialize.ts";
import { quantizedModel } from "../src/models/quantized.ts";
import type { RegisteredVersion } from "../src/models/record.ts";
import { resolveDraftModel } from "../src/models/versions.ts";
import type { Settings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { logger } from "../src/telemetry/log.ts";

/**
 * The file or directory this replica loads: the artifact (src/models/materialize.ts: a vLLM replica of a
 * checkpoint gets its directory), for llama.cpp a checkpoint's GGUF conversion, and for a llama.cpp endpoint
 * with `runtime.quantization` its quantized copy. Conversion and quantization happen here at replica start
 * (not at registration or deploy time) so that the gateway never spends minutes of CPU on a large model
 * while it serves, the work lands on nodes sized for loading models, and a failure shows in `status` as the
 * replica's. Both are cached in the artifact store, so only the first replica of a (model, type) pays for
 * them (src/models/derived.ts).
 */
export async function modelFile(
  settings: Settings,
  ctl: Control,
  endpoint: Endpoint,
  model: RegisteredVersion,
  replicaId: string,
  describeWeights: (weights: string) => void,
): Promise<string> {
  const deps = derivedDeps(settings, ctl, replicaId);
  if (endpoint.framework !== "llamacpp") return localArtifact(deps.store, deps.cacheDir, model);
  const notes: string[] = [];
  let path = await llamaCppFile(deps, model, notes);
  const quantization = endpoint.config.runtime.quantization;
  if (quantization !== undefined) {
    const q = await logged(deps, `${quantization} model`, () =>
      quantizedModel(deps, { path, sha256: model.sha256 }, quantization),
    );
    notes.push(
      q.outcome === "as-is"
        ? `${quantization}: the model as it is${q.detail ? ` (${q.detail})` : ""}`
        : `${quantization} copy (${WEIGHTS_OUTCOME[q.outcome]})`,
    );
    path = q.path;
  }
  if (notes.length > 0) describeWeights(notes.join("; "));
  return path;
}

/** Where a replica finds artifacts and keeps derived files (conversions, quantized copies), and who it is to their locks. */
function derivedDeps(settings: Settings, ctl: Control, replicaId: string): DerivedDeps {
  return {
    ctl,
    store: openStore(settings.artifactsUrl, settings.storage.s3),
    holder: replicaId,
    cacheDir: join(settings.dataDir, "cache", "models"),
  };
}

/** How `status` words a derived file's outcome (src/models/derived.ts). */
const WEIGHTS_OUTCOME = {
  produced: "made by this replica",
  cached: "from the artifact store",
  waited: "made by another replica",
  "as-is": "as it is",
} as const;

/** Makes (or finds) a derived file, logging what it took. */
async function logged<T extends DerivedFile & { key?: string }>(
  deps: DerivedDeps,
  what: string,
  make: () => Promise<T>,
): Promise<T> {
  const started = Date.now();
  const made = await make();
  logger("worker").info(
    { replica: deps.holder, outcome: made.outcome, key: made.key, ms: Date.now() - started },
    `replica ${deps.holder}: ${what} (${made.outcome}${made.detail ? `: ${made.detail}` : ""})`,
  );
  return made;
}

/**
 * A GGUF file llama.cpp loads for `model`: the artifact itself, or a checkpoint's conversion (made once per
 * manifest digest); `notes` gets a line for `status` when it is a conversion.
 */
async function llamaCppFile(deps: DerivedDeps, model: RegisteredVersion, notes?: string[]): Promise<string> {
  const source = await localArtifact(deps.store, deps.cacheDir, model);
  if (model.kind !== "hf") return source;
  const c = await logged(deps, `${model.name}@${model.version} converted to GGUF`, () =>
    convertedModel(deps, { dir: source, digest: model.sha256 }),
  );
  notes?.push(`GGUF converted from the checkpoint (${WEIGHTS_OUTCOME[c.outcome]})`);
  return c.path;
}

/** A llama.cpp endpoint's draft model for speculative decoding (`runtime.speculative_model`), as a local file. */
export async function draftFile(
  settings: Settings,
  ctl: Control,
  endpoint: Endpoint,
  replicaId: string,
): Promise<string | undefined> {
  const spec = endpoint.framework === "llamacpp" ? endpoint.config.runtime.speculative_model : undefined;
  if (spec === undefined) return undefined;
  return llamaCppFile(derivedDeps(settings, ctl, replicaId), await resolveDraftModel(ctl, spec));
}
