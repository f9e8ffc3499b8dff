/**
 * The benchmark's trivial engine, and a worker process that serves it: run as
 * `node bench/echo-worker.ts <endpoint>` with REDIS_URL set, it is a replica
 * like any other, in its own process as deployed, so the fabric is measured
 * without the model's time hiding it.
 */
import { fileURLToPath } from "node:url";
import { getEndpoint } from "../src/endpoints/store.ts";
import { connectControl } from "../src/redis/connection.ts";
import { loadSettings } from "../src/settings/index.ts";
import { startTracing, stopTracing } from "../src/telemetry/tracing.ts";
import type { Engine } from "../workers/engines/engine.ts";
import { startWorker } from "../workers/worker.ts";

/** Answers at once with a fixed text. */
export const echoEngine: Engine = {
  name: "echo",
  parallel: 64,
  warmup: async () => {},
  generate: async (_request, hooks) => {
    hooks.onText?.("ok");
    return { text: "ok", finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
  },
  embed: async () => ({ embeddings: [[0]], usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 } }),
  dispose: async () => {},
};

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const settings = loadSettings();
  // Off unless OTEL_TRACES_EXPORTER is set (bench/hot-path.ts sets it for one of its workers).
  await startTracing(settings.tracing, "worker");
  const ctl = connectControl(settings.redisUrl as string, settings.prefix);
  const endpoint = await getEndpoint(ctl, process.argv[2] as string);
  const worker = startWorker({ ctl, endpoint, replicaId: "echo-1", loadEngine: async () => echoEngine });
  await worker.ready;
  console.log("ready");
  process.once("SIGTERM", async () => {
    await worker.drain();
    await stopTracing();
    await ctl.redis.quit();
    process.exit(0);
  });
}
