/** The worker process (`platform worker --endpoint <name>`): one replica, until SIGTERM. */
import { mkdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import type { ModelVersionRecord } from "../src/contracts/records.ts";
import { getEndpoint } from "../src/control/endpoints.ts";
import { connectControl } from "../src/control/redis.ts";
import { resolveModelVersion } from "../src/registry/versions.ts";
import { loadSettings, type Settings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { loadEngine } from "./engines/index.ts";
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

export type WorkerProcessOptions = { endpoint: string; replicaId?: string; healthPort?: number };

export async function runWorkerProcess(options: WorkerProcessOptions): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; a worker needs the platform's Redis");
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  // Until the worker runs, losing the parent or Redis just ends the process.
  let lost: (why: string) => void = (why) => {
    console.error(`[worker] ${why}: exiting`);
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
  const endpoint = await getEndpoint(ctl, options.endpoint);
  const model = await resolveModelVersion(ctl, endpoint.config.model.name, endpoint.version);
  const replicaId = options.replicaId ?? `${endpoint.name}-${randomBytes(4).toString("hex")}`;
  const worker = startWorker({
    ctl,
    endpoint,
    replicaId,
    healthPort: options.healthPort,
    heartbeatMs: settings.heartbeats.intervalMs,
    loadEngine: async () => loadEngine(endpoint, await localArtifact(settings, model), settings.vllm),
  });

  let stopping = false;
  /** `deadlineMs`: how long in-flight generations may run on before they are aborted and requeued. */
  const stop = async (code: number, deadlineMs: number, why?: string) => {
    if (stopping) return;
    stopping = true;
    if (why) console.error(`[worker ${replicaId}] ${why}: stopping`);
    // Whatever hangs (Redis gone, an engine stuck), the process still ends.
    setTimeout(() => process.exit(code), deadlineMs + HARD_EXIT_AFTER_DRAIN_MS).unref();
    await worker.drain({ deadlineMs });
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
    console.log(`[worker ${replicaId}] ready: ${endpoint.name} (${model.name}@${model.version})`);
  } catch (e) {
    console.error(`[worker ${replicaId}] failed to start: ${(e as Error).message}`);
    await stop(1, 0);
  }
}

/** node-llama-cpp needs a file: use the store's own when local, else a cached download. */
async function localArtifact(settings: Settings, model: ModelVersionRecord): Promise<string> {
  const store = openStore(settings.artifactsUrl, settings.storage.s3);
  const local = store.localPath(model.artifact);
  if (local) return local;
  const dir = join(settings.dataDir, "cache", "models");
  await mkdir(dir, { recursive: true });
  const path = join(dir, `${model.sha256}.gguf`);
  const existing = await stat(path).catch(() => undefined);
  if (existing?.size !== model.size_bytes) await store.download(model.artifact, path);
  return path;
}
