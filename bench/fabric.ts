/**
 * `npm run bench:fabric`: what the fabric costs, against baselines measured in
 * the same run.
 *   1. Overhead: one small request through HTTP → gateway → Redis → worker → back,
 *      with a trivial engine in a worker process of its own, vs the same engine
 *      called in process; and the HTTP floor (the same client, a route that
 *      answers at once) to show what any HTTP service pays here.
 *   2. Throughput: tokens/s through the platform vs node-llama-cpp called directly
 *      with the same model, threads and sequences; 1 and 4 concurrent streams.
 * Prints a summary and writes bench/results/fabric.json.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { getLlama, LlamaCompletion, LlamaLogLevel } from "node-llama-cpp";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { createApiKey } from "../src/control/apikeys.ts";
import { startEmbeddedRedis } from "../src/control/embedded-redis.ts";
import { deployEndpoint } from "../src/control/endpoints.ts";
import { connectControl } from "../src/control/redis.ts";
import { startGateway } from "../src/gateway/app.ts";
import { importModel } from "../src/registry/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import { echoEngine } from "./echo-worker.ts";
import { loadLlamaCpp } from "../workers/engines/llamacpp.ts";
import { startWorker } from "../workers/worker.ts";

const THREADS = 1;
const PARALLEL = 4;
const OVERHEAD_REQUESTS = Number(process.env.BENCH_REQUESTS ?? 400);
const TOKENS = 200;

const modelPath = sharedModelPath() ?? (await tinyModelPath());
const dir = await mkdtemp(join(tmpdir(), "platform-bench-"));
const redis = await startEmbeddedRedis(join(dir, "redis"));
const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dir }), redisUrl: redis.url };
const ctl = connectControl(redis.url, settings.prefix);
const key = (await createApiKey(ctl, "bench", "user")).key;
const imports = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
await importModel(imports, { name: "echo", framework: "llamacpp", source: modelPath });
await importModel(imports, { name: "model", framework: "llamacpp", source: modelPath });
const echoEndpoint = await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "echo" } }));
const modelEndpoint = await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "model" }, resources: { parallel: PARALLEL, cpu: THREADS } }));
const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });

/**
 * A lean keep-alive HTTP client (node:http), as a production caller would use: fetch
 * (undici) costs about 0.5 ms more per request on these machines, which is the
 * client's cost, not the platform's. The HTTP floor below is measured with it too.
 */
const agent = new Agent({ keepAlive: true });
function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<unknown> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: "POST", agent, headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(payload) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => ((res.statusCode ?? 500) < 300 ? resolve(JSON.parse(text)) : reject(new Error(`HTTP ${res.statusCode}: ${text}`))));
    });
    req.on("error", reject);
    req.end(payload);
  });
}
const post = (body: unknown) => postJson(`${gateway.url}/v1/completions`, body, { authorization: `Bearer ${key}` }) as Promise<{ usage: { completion_tokens: number } }>;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

async function timeEach(n: number, concurrency: number, fn: () => Promise<unknown>): Promise<{ latencies: number[]; perSecond: number }> {
  const latencies: number[] = [];
  const start = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < n) {
        const t0 = performance.now();
        await fn();
        latencies.push(performance.now() - t0);
      }
    }),
  );
  return { latencies: latencies.sort((a, b) => a - b), perSecond: (n / (performance.now() - start)) * 1000 };
}

// 1. Fabric overhead with the echo engine.
// The worker in its own process, as deployed: its JS must not share the gateway's event loop.
const echoWorker = spawn(process.execPath, [fileURLToPath(new URL("./echo-worker.ts", import.meta.url)), echoEndpoint.name], {
  env: { ...process.env, REDIS_URL: redis.url, PLATFORM_PREFIX: settings.prefix },
  stdio: ["ignore", "pipe", "inherit"],
});
await new Promise<void>((resolve, reject) => {
  echoWorker.stdout.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
  echoWorker.once("exit", (code) => reject(new Error(`echo worker exited with ${code}`)));
});
const request = { model: "echo", prompt: "hi", max_tokens: 1 };
await timeEach(50, 1, () => post(request)); // warm connections and caches
const direct = await timeEach(OVERHEAD_REQUESTS, 1, () => echoEngine.generate({ kind: "prompt", prompt: "hi", params: {} }, {}));
// The floor any HTTP service pays here: the same client against a Hono route that answers at once.
const floorApp = new Hono().post("/", async (c) => c.json({ echo: await c.req.json() }));
const floorServer = serve({ fetch: floorApp.fetch, hostname: "127.0.0.1", port: 0 });
await new Promise((r) => floorServer.once("listening", r));
const floorUrl = `http://127.0.0.1:${(floorServer.address() as { port: number }).port}/`;
await timeEach(50, 1, () => postJson(floorUrl, request));
const httpFloor = await timeEach(OVERHEAD_REQUESTS, 1, () => postJson(floorUrl, request));
floorServer.close();
const overhead: Record<string, unknown>[] = [];
for (const concurrency of [1, 8, 32]) {
  const r = await timeEach(OVERHEAD_REQUESTS, concurrency, () => post(request));
  overhead.push({
    concurrency,
    p50_ms: percentile(r.latencies, 50),
    p99_ms: percentile(r.latencies, 99),
    added_p50_ms: percentile(r.latencies, 50) - percentile(direct.latencies, 50),
    added_p99_ms: percentile(r.latencies, 99) - percentile(direct.latencies, 99),
    requests_per_s: r.perSecond,
  });
}
echoWorker.kill("SIGTERM");
await once(echoWorker, "exit");

// 2. Tokens/s through the platform vs node-llama-cpp directly, same model, threads and sequences.
const prompts = ["Once upon a time", "The little dog", "One day, a girl", "There was a big tree"];
async function directTokensPerSecond(streams: number): Promise<number> {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ sequences: PARALLEL, threads: THREADS, contextSize: Math.min(model.trainContextSize, 4096) });
  const run = async (i: number) => {
    const completion = new LlamaCompletion({ contextSequence: context.getSequence(), autoDisposeSequence: true });
    let tokens = 0;
    await completion.generateCompletion(prompts[i % prompts.length] as string, { maxTokens: TOKENS, temperature: 0, repeatPenalty: false, onToken: (t) => (tokens += t.length) });
    completion.dispose();
    return tokens;
  };
  await run(0); // warm-up, as the worker does
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: streams }, (_, i) => run(i)));
  const rate = (counts.reduce((a, b) => a + b, 0) / (performance.now() - t0)) * 1000;
  await context.dispose();
  await model.dispose();
  return rate;
}
async function platformTokensPerSecond(streams: number): Promise<number> {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: streams }, (_, i) => post({ model: "model", prompt: prompts[i % prompts.length], max_tokens: TOKENS, temperature: 0 })));
  return (results.reduce((a, r) => a + r.usage.completion_tokens, 0) / (performance.now() - t0)) * 1000;
}

const throughput: Record<string, unknown>[] = [];
for (const streams of [1, 4]) {
  const directRate = await directTokensPerSecond(streams);
  const worker = startWorker({
    ctl,
    endpoint: modelEndpoint,
    replicaId: `model-${streams}`,
    loadEngine: () => loadLlamaCpp({ modelPath, parallel: PARALLEL, threads: THREADS }),
  });
  await worker.ready;
  await platformTokensPerSecond(streams); // same warm state as the direct run
  const platformRate = await platformTokensPerSecond(streams);
  await worker.drain();
  throughput.push({ streams, direct_tokens_per_s: directRate, platform_tokens_per_s: platformRate, ratio: platformRate / directRate });
}

const results = {
  when: new Date().toISOString(),
  model: modelPath.split("/").at(-1),
  threads: THREADS,
  direct_engine_call: { p50_ms: percentile(direct.latencies, 50), p99_ms: percentile(direct.latencies, 99) },
  http_floor: { p50_ms: percentile(httpFloor.latencies, 50), p99_ms: percentile(httpFloor.latencies, 99) },
  overhead,
  throughput,
  targets: { fabric_p50_overhead_ms_at_c1: 2, platform_over_direct_single_stream: 0.9 },
};
await gateway.close();
await ctl.redis.quit();
await redis.stop();

const out = new URL("./results/", import.meta.url);
await mkdir(out, { recursive: true });
await writeFile(new URL("fabric.json", out), `${JSON.stringify(results, null, 2)}\n`);
const f = (n: unknown) => (typeof n === "number" ? n.toFixed(2) : String(n));
console.log(`model ${results.model}, ${THREADS} thread(s)`);
console.log("fabric overhead (echo engine; direct call p50 %s ms; HTTP floor p50 %s ms):", f(results.direct_engine_call.p50_ms), f(results.http_floor.p50_ms));
for (const o of overhead) console.log(`  c=${o.concurrency}: p50 ${f(o.p50_ms)} ms (+${f(o.added_p50_ms)}), p99 ${f(o.p99_ms)} ms (+${f(o.added_p99_ms)}), ${f(o.requests_per_s)} req/s`);
console.log("tokens/s, platform vs direct:");
for (const t of throughput) console.log(`  ${t.streams} stream(s): ${f(t.platform_tokens_per_s)} vs ${f(t.direct_tokens_per_s)} → ratio ${f(t.ratio)}`);
console.log(`written to ${new URL("fabric.json", out).pathname}`);
process.exit(0);
