/**
 * The worker process (`platform worker --endpoint <name>`): one replica, until SIGTERM.
 * With `--standby` it loads its code and the engine's native binding, then waits for its
 * endpoint on stdin: `up` keeps one such process ready, so a scale-up or a replacement
 * skips the process start (docs/fleet.md, "Standby worker").
 */
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { EndpointRecord, ModelVersionRecord } from "../src/contracts/records.ts";
import { getEndpoint } from "../src/control/endpoints.ts";
import { type Control, connectControl } from "../src/control/redis.ts";
import { trimMemoryWhenIdle } from "../src/idle-memory.ts";
import { convertedModel } from "../src/registry/converted.ts";
import type { DerivedDeps, DerivedFile } from "../src/registry/derived.ts";
import { localArtifact } from "../src/registry/materialize.ts";
import { quantizedModel } from "../src/registry/quantize/cache.ts";
import { resolveDraftModel, resolveModelVersion } from "../src/registry/versions.ts";
import { loadSettings, type Settings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { configureLogging, logger } from "../src/telemetry/log.ts";
import { startTracing, stopTracing } from "../src/telemetry/tracing.ts";
import { loadEngine } from "./engines/index.ts";
import { prepareLlamaCpp } from "./engines/llamacpp.ts";
import { startWorker } from "./worker.ts";

/**
 * How often a worker started by `up` checks its parent and its Redis connection (a cheap
 * getppid). An `up` killed outright leaves its Redis running for a few seconds
 * (REDIS_GRACE_AFTER_PARENT_S) so that its workers can hand their jobs back: the sooner they
 * notice, the more of that time is theirs.
 */
const WATCH_EVERY_MS = 100;
/** After the drain deadline, the drain gets this long to hand jobs back and clean up. */
const HARD_EXIT_AFTER_DRAIN_MS = 5_000;

/** `endpoint` undefined: a standby worker, told its endpoint and replica id on stdin. */
export type WorkerProcessOptions = { endpoint?: string; replicaId?: string; healthPort?: number };

/** What `up` writes to a standby worker's stdin, one JSON line. */
export const StandbyAssignment = z.object({ endpoint: z.string().min(1), replicaId: z.string().min(1) });
export type StandbyAssignment = z.infer<typeof StandbyAssignment>;

export async function runWorkerProcess(options: WorkerProcessOptions): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; a worker needs the platform's Redis");
  configureLogging(settings.logging, { role: "worker", defaultFormat: "json" });
  const log = logger("worker");
  // Before the first job, standby workers included: the SDK (when on) is loaded while nothing waits.
  await startTracing(settings.tracing, "worker");
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  // Until the worker runs, losing the parent or Redis just ends the process.
  let lost: (why: string) => void = (why) => {
    log.warn(`${why}: exiting`);
    process.exit(0);
  };
  // Started by `platform up`: never outlive it, even if it was killed without a chance to stop us.
  if (settings.worker.exitWithParent) {
    const parent = process.ppid;
    let lastReady = Date.now();
    setInterval(() => {
      if (process.ppid !== parent) return lost("the process that started this worker is gone");
      if (ctl.redis.status === "ready") lastReady = Date.now();
      else if (Date.now() - lastReady > settings.redisGraceMs) lost(`Redis unreachable for ${settings.redisGraceMs} ms`);
    }, WATCH_EVERY_MS).unref();
  }
  // A standby worker gives back what loading llama.cpp used while it waits; a serving one, when it has no job.
  let inFlight = () => 0;
  trimMemoryWhenIdle({ busy: () => inFlight() > 0 });
  let assigned: { endpoint: string; replicaId?: string };
  if (options.endpoint === undefined) {
    await prepareLlamaCpp();
    const assignment = await readAssignment();
    if (!assignment) return lost("standby worker: stdin closed before an endpoint was assigned");
    assigned = assignment;
  } else {
    assigned = { endpoint: options.endpoint, replicaId: options.replicaId };
  }
  const endpoint = await getEndpoint(ctl, assigned.endpoint);
  const model = await resolveModelVersion(ctl, endpoint.config.model.name, endpoint.version);
  const replicaId = assigned.replicaId ?? `${endpoint.name}-${randomBytes(4).toString("hex")}`;
  const worker = startWorker({
    ctl,
    endpoint,
    replicaId,
    healthPort: options.healthPort,
    heartbeatMs: settings.heartbeats.intervalMs,
    loadEngine: async (describeWeights) =>
      loadEngine(endpoint, await modelFile(settings, ctl, endpoint, model, replicaId, describeWeights), { vllm: settings.vllm, draftModelPath: await draftFile(settings, ctl, endpoint, replicaId) }),
  });
  inFlight = worker.inFlight;

  let stopping = false;
  /** `deadlineMs`: how long in-flight generations may run on before they are aborted and requeued. */
  const stop = async (code: number, deadlineMs: number, why?: string) => {
    if (stopping) return;
    stopping = true;
    if (why) log.warn({ replica: replicaId }, `replica ${replicaId}: ${why}: stopping`);
    // Whatever hangs (Redis gone, an engine stuck), the process still ends.
    setTimeout(() => process.exit(code), deadlineMs + HARD_EXIT_AFTER_DRAIN_MS).unref();
    await worker.drain({ deadlineMs });
    await stopTracing();
    await Promise.race([ctl.redis.quit().catch(() => undefined), new Promise((r) => setTimeout(r, 1000).unref())]);
    process.exit(code);
  };
  process.on("SIGTERM", () => void stop(0, settings.drainTimeoutMs));
  process.on("SIGINT", () => void stop(0, settings.drainTimeoutMs));
  process.on("SIGHUP", () => void stop(0, settings.drainTimeoutMs));
  // Parent or Redis gone: nobody waits for answers, so generations are aborted and their jobs
  // handed back at once.
  lost = (why) => void stop(0, 0, why);
  try {
    await worker.ready;
    log.info({ replica: replicaId, endpoint: endpoint.name, model: model.name, version: model.version }, `replica ${replicaId} ready: ${endpoint.name} (${model.name}@${model.version})`);
  } catch (e) {
    log.error({ replica: replicaId, err: e }, `replica ${replicaId} failed to start: ${(e as Error).message}`);
    await stop(1, 0);
  }
}

/** The first line on stdin, or undefined if stdin ends first. A malformed line is a bug in `up`: it throws. */
async function readAssignment(): Promise<StandbyAssignment | undefined> {
  let buffered = "";
  for await (const chunk of process.stdin) {
    buffered += String(chunk);
    const newline = buffered.indexOf("\n");
    if (newline >= 0) {
      process.stdin.destroy();
      return StandbyAssignment.parse(JSON.parse(buffered.slice(0, newline)));
    }
    if (buffered.length > 4096) throw new Error("standby worker: the assignment line is too long");
  }
  return undefined;
}

/**
 * The file or directory this replica loads: the artifact (src/registry/materialize.ts: a vLLM replica of a
 * checkpoint gets its directory), for llama.cpp a checkpoint's GGUF conversion, and for a llama.cpp endpoint
 * with `runtime.quantization` its quantized copy. Conversion and quantization happen here at replica start
 * (not at registration or deploy time) so that the gateway never spends minutes of CPU on a large model
 * while it serves, the work lands on nodes sized for loading models, and a failure shows in `status` as the
 * replica's. Both are cached in the artifact store, so only the first replica of a (model, type) pays for
 * them (src/registry/derived.ts).
 */
async function modelFile(
  settings: Settings,
  ctl: Control,
  endpoint: EndpointRecord,
  model: ModelVersionRecord,
  replicaId: string,
  describeWeights: (weights: string) => void,
): Promise<string> {
  const deps = derivedDeps(settings, ctl, replicaId);
  if (endpoint.framework !== "llamacpp") return localArtifact(deps.store, deps.cacheDir, model);
  const notes: string[] = [];
  let path = await llamaCppFile(deps, model, notes);
  const quantization = endpoint.config.runtime.quantization;
  if (quantization !== undefined) {
    const q = await logged(deps, `${quantization} model`, () => quantizedModel(deps, { path, sha256: model.sha256 }, quantization));
    notes.push(q.outcome === "as-is" ? `${quantization}: the model as it is${q.detail ? ` (${q.detail})` : ""}` : `${quantization} copy (${WEIGHTS_OUTCOME[q.outcome]})`);
    path = q.path;
  }
  if (notes.length > 0) describeWeights(notes.join("; "));
  return path;
}

/** Where a replica finds artifacts and keeps derived files (conversions, quantized copies), and who it is to their locks. */
function derivedDeps(settings: Settings, ctl: Control, replicaId: string): DerivedDeps {
  return { ctl, store: openStore(settings.artifactsUrl, settings.storage.s3), holder: replicaId, cacheDir: join(settings.dataDir, "cache", "models") };
}

/** How `status` words a derived file's outcome (src/registry/derived.ts). */
const WEIGHTS_OUTCOME = { produced: "made by this replica", cached: "from the artifact store", waited: "made by another replica", "as-is": "as it is" } as const;

/** Makes (or finds) a derived file, logging what it took. */
async function logged<T extends DerivedFile & { key?: string }>(deps: DerivedDeps, what: string, make: () => Promise<T>): Promise<T> {
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
async function llamaCppFile(deps: DerivedDeps, model: ModelVersionRecord, notes?: string[]): Promise<string> {
  const source = await localArtifact(deps.store, deps.cacheDir, model);
  if (model.kind !== "hf") return source;
  const c = await logged(deps, `${model.name}@${model.version} converted to GGUF`, () => convertedModel(deps, { dir: source, digest: model.sha256 }));
  notes?.push(`GGUF converted from the checkpoint (${WEIGHTS_OUTCOME[c.outcome]})`);
  return c.path;
}

/** A llama.cpp endpoint's draft model for speculative decoding (`runtime.speculative_model`), as a local file. */
async function draftFile(settings: Settings, ctl: Control, endpoint: EndpointRecord, replicaId: string): Promise<string | undefined> {
  const spec = endpoint.framework === "llamacpp" ? endpoint.config.runtime.speculative_model : undefined;
  if (spec === undefined) return undefined;
  return llamaCppFile(derivedDeps(settings, ctl, replicaId), await resolveDraftModel(ctl, spec));
}
