/**
 * The worker process (`platform worker --endpoint <name>`): one replica, until SIGTERM.
 * With `--standby` it loads its code and the engine's native binding, then waits for its
 * endpoint on stdin: `up` keeps one such process ready, so a scale-up or a replacement
 * skips the process start (docs/fleet.md, "Standby worker").
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { Endpoint } from "../src/endpoints/record.ts";
import { findRevision, revisionId } from "../src/endpoints/rollout.ts";
import { getEndpoint } from "../src/endpoints/store.ts";
import { connectControl } from "../src/redis/connection.ts";
import { trimMemoryWhenIdle } from "../src/process/idle-memory.ts";
import { resolveModelVersion } from "../src/models/versions.ts";
import { loadSettings } from "../src/settings/index.ts";
import { configureLogging, logger } from "../src/telemetry/log.ts";
import { startTracing, stopTracing } from "../src/telemetry/tracing.ts";
import { loadEngine } from "./engines/index.ts";
import { prepareLlamaCpp } from "./engines/llamacpp.ts";
import { draftFile, modelFile } from "./weights.ts";
import { startWorker } from "./worker.ts";
import { adapterCacheDir, hasAdapters, ReplicaAdapters } from "./adapters.ts";
import { openStore } from "../src/storage/index.ts";

/**
 * How often a worker started by `up` checks its parent (a cheap getppid). An `up` killed outright
 * leaves its Redis running for a few seconds (REDIS_GRACE_AFTER_PARENT_S) so that its workers can
 * hand their jobs back: the sooner they notice, the more of that time is theirs. Redis itself
 * going away is ridden out: `up` restarts it (src/redis/supervisor.ts), and the connections come
 * back by themselves; an `up` that gives up on Redis exits, which this check sees.
 */
const WATCH_EVERY_MS = 100;
/** After the drain deadline, the drain gets this long to hand jobs back and clean up. */
const HARD_EXIT_AFTER_DRAIN_MS = 5_000;

/**
 * `endpoint` undefined: a standby worker, told its endpoint and replica id on stdin. `revision`:
 * which of the endpoint's revisions to run (src/endpoints/rollout.ts); absent: its own.
 */
export type WorkerProcessOptions = { endpoint?: string; replicaId?: string; revision?: string; healthPort?: number };

/** What `up` writes to a standby worker's stdin, one JSON line. */
export const StandbyAssignment = z.object({
  endpoint: z.string().min(1),
  replicaId: z.string().min(1),
  revision: z.string().min(1).optional(),
});
export type StandbyAssignment = z.infer<typeof StandbyAssignment>;

export async function runWorkerProcess(options: WorkerProcessOptions): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; a worker needs the platform's Redis");
  configureLogging(settings.logging, { role: "worker", defaultFormat: "json" });
  const log = logger("worker");
  // Before the first job, standby workers included: the SDK (when on) is loaded while nothing waits.
  await startTracing(settings.tracing, "worker");
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  // Until the worker runs, losing the parent just ends the process.
  let lost: (why: string) => void = (why) => {
    log.warn(`${why}: exiting`);
    process.exit(0);
  };
  // Started by `platform up`: never outlive it, even if it was killed without a chance to stop us.
  if (settings.worker.exitWithParent) {
    const parent = process.ppid;
    setInterval(() => {
      if (process.ppid !== parent) lost("the process that started this worker is gone");
    }, WATCH_EVERY_MS).unref();
  }
  // A standby worker gives back what loading llama.cpp used while it waits; a serving one, when it has no job.
  let inFlight = () => 0;
  trimMemoryWhenIdle({ busy: () => inFlight() > 0 });
  let assigned: { endpoint: string; replicaId?: string; revision?: string };
  if (options.endpoint === undefined) {
    await prepareLlamaCpp(settings.engine);
    const assignment = await readAssignment();
    if (!assignment) return lost("standby worker: stdin closed before an endpoint was assigned");
    assigned = assignment;
  } else {
    assigned = { endpoint: options.endpoint, replicaId: options.replicaId, revision: options.revision };
  }
  const endpoint = await revisionToRun(await getEndpoint(ctl, assigned.endpoint), assigned.revision);
  const model = await resolveModelVersion(ctl, endpoint.config.model.name, endpoint.version);
  const replicaId = assigned.replicaId ?? `${endpoint.name}-${randomBytes(4).toString("hex")}`;
  let modelPath = "";
  const artifacts = openStore(settings.artifactsUrl, settings.storage.s3);
  const adapters = new ReplicaAdapters({
    ctl,
    store: artifacts,
    cacheDir: adapterCacheDir(settings.dataDir),
    replicaId,
    endpoint,
    model,
    modelPath: () => modelPath,
  });
  const worker = startWorker({
    ctl,
    endpoint,
    replicaId,
    healthPort: options.healthPort,
    heartbeatMs: settings.heartbeats.intervalMs,
    schemaLimits: settings.structured.limits,
    adapters,
    images: endpoint.framework === "diffusers" ? artifacts : undefined,
    loadEngine: async (describeWeights) => {
      modelPath = await modelFile(settings, ctl, endpoint, model, replicaId, describeWeights);
      return loadEngine(endpoint, modelPath, {
        vllm: settings.vllm,
        images: settings.pictures,
        draftModelPath: await draftFile(settings, ctl, endpoint, replicaId),
        grammarTimeoutMs: settings.structured.grammarTimeoutMs,
        llamaBinary: settings.engine,
        // vLLM reserves LoRA memory only when adapters may come: set max_loras, or have one registered.
        vllmLora: endpoint.framework === "vllm" && (await hasAdapters(ctl, model)),
      });
    },
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
  // Parent gone: nobody waits for answers, so generations are aborted and their jobs
  // handed back at once.
  lost = (why) => void stop(0, 0, why);
  try {
    await worker.ready;
    log.info(
      { replica: replicaId, endpoint: endpoint.name, model: model.name, version: model.version },
      `replica ${replicaId} ready: ${endpoint.name} (${model.name}@${model.version})`,
    );
  } catch (e) {
    log.error({ replica: replicaId, err: e }, `replica ${replicaId} failed to start: ${(e as Error).message}`);
    await stop(1, 0);
  }
}

/** The endpoint as the asked-for revision runs it: an update rolling out runs beside the one it replaces. */
async function revisionToRun(endpoint: Endpoint, revision: string | undefined): Promise<Endpoint> {
  if (revision === undefined) return endpoint;
  const view = findRevision(endpoint, revision);
  if (view) return view;
  throw new Error(`endpoint ${endpoint.name} no longer runs revision ${revision} (it runs ${revisionId(endpoint)})`);
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
