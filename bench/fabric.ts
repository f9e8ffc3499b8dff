/**
 * `npm run bench:fabric`: what the fabric costs, each figure a ratio against a
 * baseline measured in the same run, in interleaved rounds (medians), because
 * the machines this runs on are small and shared. What each figure means and
 * the latest numbers: docs/performance.md. Writes bench/results/fabric.json.
 *   1. Echo engine (a worker process of its own): latency and requests/s vs the
 *      queue floor (bench/queue-floor.ts) and, printed only, the HTTP floor; the Redis
 *      commands one request costs, what Redis keeps after a steady run.
 *   2. Real engine under `platform up`: 1-token latency against the queue floor plus the engine
 *      paced, and streamed tokens/s vs node-llama-cpp called directly with the same model,
 *      threads and sequences, and what a 1-token chat costs above an echo replica under the
 *      same `up` (the worker's engine path); CLI start-up vs `node -e 0`; resident memory of a worker and of `up`.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { Redis } from "ioredis";
import { getLlama, LlamaCompletion, LlamaLogLevel, type LlamaContextSequence } from "node-llama-cpp";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { createApiKey } from "../src/keys/store.ts";
import { startEmbeddedRedis } from "../src/redis/embedded.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { connectControl } from "../src/redis/connection.ts";
import { startGateway } from "../src/gateway/server/app.ts";
import { IDLE_CHECK_MS } from "../src/process/idle-memory.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { WORKER_NODE_FLAGS, withWorkerAllocator } from "../src/process/worker-env.ts";
import { openStore } from "../src/storage/index.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import { BIN, startStack } from "../test/helpers/stack.ts";
import { echoEngine } from "./echo-worker.ts";
import { median, percentile, postJson, postText } from "./measure.ts";
import { startQueueFloor } from "./queue-floor.ts";

const THREADS = 1;
/**
 * The target proposed for the worker's engine path against the engine paced as the platform
 * runs it, beside the one against the engine called back to back (docs/performance.md,
 * "1-token chat: the worker's engine path").
 */
const PACED_TARGET = 1.5;
const PACED_TARGET_TEXT = "≤ 1.5× (proposed)";
const PARALLEL = 4;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Requests per series per round at c=1; the concurrent series send more. */
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 200);
const STEADY_REQUESTS = Number(process.env.BENCH_STEADY_REQUESTS ?? 5000);
const STEADY_BLOCKS = Number(process.env.BENCH_STEADY_BLOCKS ?? 3);
const ONE_TOKEN_REQUESTS = Number(process.env.BENCH_ONE_TOKEN_REQUESTS ?? 100);
const TOKENS = 400;
/** Samples per side per round for tokens/s: one generation lasts a fifth of a second with stories260K, too short to be stable alone. */
const REPEATS = 4;

const loadAtStart = loadavg();
const modelPath = sharedModelPath() ?? (await tinyModelPath());

// ---------------------------------------------------------------- helpers

const halfRange = (xs: number[]) => (Math.max(...xs) - Math.min(...xs)) / 2;

type Timed = { p50: number; p99: number; perSecond: number };
/** `elapsedMs`: the wall time the samples were taken in, for the rate. */
function summarize(latencies: number[], elapsedMs: number): Timed {
  latencies.sort((a, b) => a - b);
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    perSecond: (latencies.length / elapsedMs) * 1000,
  };
}
async function timeEach(n: number, concurrency: number, fn: () => Promise<unknown>): Promise<Timed> {
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
  return summarize(latencies, performance.now() - start);
}
async function timeOne(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** Runs the pair in alternating order, so neither always runs on the warmer (or busier) side. */
async function pair<A, B>(round: number, a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> {
  if (round % 2 === 0) {
    const x = await a();
    return [x, await b()];
  }
  const y = await b();
  return [await a(), y];
}

function wallMs(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { env, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    child.once("exit", (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${args.join(" ")} exited ${code}: ${err}`)),
    );
  });
}

function procStatus(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
    const i = line.indexOf(":");
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}
const rssMiB = (pid: number) => Number.parseInt(procStatus(pid).VmRSS ?? "0", 10) / 1024;
function childPids(parent: number): { pid: number; cmdline: string }[] {
  const out: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(procStatus(Number(entry)).PPid) === parent)
        out.push({ pid: Number(entry), cmdline: readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ") });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** bench/echo-worker.ts serving `endpoint` in a process of its own; resolves once it takes jobs. */
async function startEchoWorker(endpoint: string, env: NodeJS.ProcessEnv, nodeFlags: readonly string[] = []) {
  const child = spawn(
    process.execPath,
    [...nodeFlags, fileURLToPath(new URL("./echo-worker.ts", import.meta.url)), endpoint],
    { env, stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
    child.once("exit", (code) => reject(new Error(`echo worker exited with ${code}`)));
  });
  return child;
}

async function redisSnapshot(r: Redis): Promise<{
  usedMemory: number;
  dataset: number;
  commands: number;
  keys: number;
  hashes: number;
  streams: Record<string, number>;
  sizes: Record<string, number>;
}> {
  const memory = await r.info("memory");
  const stats = await r.info("stats");
  let keys = 0;
  let hashes = 0;
  const streams: Record<string, number> = {};
  const sizes: Record<string, number> = {};
  let cursor = "0";
  do {
    const [nextCursor, batch] = await r.scan(cursor, "COUNT", 1000);
    cursor = nextCursor;
    keys += batch.length;
    const types = await Promise.all(batch.map((k) => r.type(k)));
    // Job hashes: a model queue's keys (`<prefix>:{<model>@<version>}:<job id>`) but its meta; not the usage counters' hashes.
    hashes += batch.filter(
      (k, i) => types[i] === "hash" && /^[^{]*\{[^}]*@[^}]*\}:/.test(k) && !k.endsWith(":meta"),
    ).length;
    for (const [i, k] of batch.entries()) {
      if (types[i] === "stream") streams[k] = await r.xlen(k);
      sizes[k] = Number(await r.call("MEMORY", "USAGE", k, "SAMPLES", "0"));
    }
  } while (cursor !== "0");
  const field = (info: string, name: string) => Number((info.match(new RegExp(`^${name}:(\\d+)`, "m")) ?? [])[1]);
  return {
    usedMemory: field(memory, "used_memory"),
    dataset: field(memory, "used_memory_dataset"),
    commands: field(stats, "total_commands_processed"),
    keys,
    hashes,
    streams,
    sizes,
  };
}

// ------------------------------------------------ 1. the fabric, echo engine

const dir = await mkdtemp(join(tmpdir(), "platform-bench-"));
const redis = await startEmbeddedRedis(join(dir, "redis"));
const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dir }), redisUrl: redis.url };
const ctl = connectControl(redis.url, settings.prefix);
const key = (await createApiKey(ctl, "bench", "user")).key;
const imports = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
await importModel(imports, { name: "echo", framework: "llamacpp", source: modelPath });
const echoEndpoint = await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "echo" } }));
const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
const post = (body: unknown) =>
  postJson<{ usage: { completion_tokens: number } }>(`${gateway.url}/v1/completions`, body, {
    authorization: `Bearer ${key}`,
  });

// The worker in its own process, as deployed: its JS must not share the gateway's event loop.
const echoWorker = await startEchoWorker(echoEndpoint.name, {
  ...process.env,
  REDIS_URL: redis.url,
  PLATFORM_PREFIX: settings.prefix,
});
// The floor any HTTP service pays here: the same client against a Hono route that answers at once.
const floorApp = new Hono().post("/", async (c) => c.json({ echo: await c.req.json() }));
const floorServer = serve({ fetch: floorApp.fetch, hostname: "127.0.0.1", port: 0 });
await new Promise((r) => floorServer.once("listening", r));
const floorUrl = `http://127.0.0.1:${(floorServer.address() as { port: number }).port}/`;
// The least a hand-off to a second process through Redis and back costs, the same client in front.
const queueFloor = await startQueueFloor(redis.url, settings.prefix);

const echoRequest = { model: "echo", prompt: "hi", max_tokens: 1 };
const echo = () => post(echoRequest);
const floor = () => postJson(floorUrl, echoRequest);
const queued = () => postJson(queueFloor.url, echoRequest);
const direct = () => echoEngine.generate({ kind: "prompt", prompt: "hi", params: {} }, {});
await timeEach(100, 1, echo); // warm connections and caches
await timeEach(100, 1, floor);
await timeEach(200, 32, echo);
await timeEach(200, 32, floor);
await timeEach(100, 1, queued);
await timeEach(200, 32, queued);

const echoRounds: {
  direct: Timed;
  floor1: Timed;
  queued1: Timed;
  echo1: Timed;
  echo8: Timed;
  floor32: Timed;
  queued32: Timed;
  echo32: Timed;
}[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const d = await timeEach(REQUESTS, 1, direct);
  const [floor1, echo1] = await pair(
    round,
    () => timeEach(REQUESTS, 1, floor),
    () => timeEach(REQUESTS, 1, echo),
  );
  const queued1 = await timeEach(REQUESTS, 1, queued);
  const echo8 = await timeEach(REQUESTS * 2, 8, echo);
  const [floor32, echo32] = await pair(
    round,
    () => timeEach(REQUESTS * 4, 32, floor),
    () => timeEach(REQUESTS * 4, 32, echo),
  );
  const queued32 = await timeEach(REQUESTS * 4, 32, queued);
  echoRounds.push({ direct: d, floor1, queued1, echo1, echo8, floor32, queued32, echo32 });
}
await queueFloor.close(); // before the command count and the memory snapshots below
const directP50 = median(echoRounds.map((r) => r.direct.p50));
const directP99 = median(echoRounds.map((r) => r.direct.p99));
const overhead = (
  [
    [1, "echo1"],
    [8, "echo8"],
    [32, "echo32"],
  ] as const
).map(([concurrency, k]) => {
  const p50 = median(echoRounds.map((r) => r[k].p50));
  const p99 = median(echoRounds.map((r) => r[k].p99));
  return {
    concurrency,
    p50_ms: p50,
    p99_ms: p99,
    added_p50_ms: p50 - directP50,
    added_p99_ms: p99 - directP99,
    requests_per_s: median(echoRounds.map((r) => r[k].perSecond)),
  };
});

// Redis round trips: every command one request causes, from MONITOR on this private Redis.
// Commands a Lua script runs are listed apart: they cost no round trip.
const redisProbe = new Redis(redis.url);
const monitor = await redisProbe.monitor();
let monitoring = false;
const seen: { source: string; command: string }[] = [];
monitor.on("monitor", (_time: string, args: string[], source: string) => {
  if (monitoring) seen.push({ source, command: String(args[0]).toLowerCase() });
});
await sleep(200);
// Idle traffic (blocking reads being re-issued, heartbeats) over a window as long as the probe's, to subtract.
const PROBE_REQUESTS = 20;
monitoring = true;
const idleStart = performance.now();
await sleep(1000);
monitoring = false;
const idleMs = performance.now() - idleStart;
const idleCommands = seen.filter((s) => s.source !== "lua").length;
seen.length = 0;
monitoring = true;
const probeStart = performance.now();
for (let i = 0; i < PROBE_REQUESTS; i++) await echo();
await sleep(50);
monitoring = false;
const probeMs = performance.now() - probeStart;
const clientCommands = seen.filter((s) => s.source !== "lua");
const commandCounts: Record<string, number> = {};
for (const c of clientCommands) commandCounts[c.command] = (commandCounts[c.command] ?? 0) + 1;
for (const k of Object.keys(commandCounts)) commandCounts[k] = (commandCounts[k] as number) / PROBE_REQUESTS;
const luaPerRequest = seen.filter((s) => s.source === "lua").length / PROBE_REQUESTS;
const commandsPerRequest = (clientCommands.length - (idleCommands * probeMs) / idleMs) / PROBE_REQUESTS;
monitor.disconnect();

// What Redis keeps per served request: memory and keys before and after steady runs. The queue's
// event stream is capped (BullMQ: ~10,000 entries, trimmed a node of ~100 at a time) and fills up
// with the first requests, each entry the size of its event: until every entry is one of this
// traffic's, it grows at a constant length (the c=1 rounds above left small `drained` events).
// So the warm-up runs this traffic until more entries than the cap have been added, and the
// figure is over STEADY_BLOCKS runs in a row: the trim's node-sized steps (±15-60 KB between two
// snapshots, whatever the requests in between) are noise that a longer run divides away, not
// something kept per request; each block's figure is printed to show it.
const eventStreams = async () =>
  (await redisProbe.keys(`${settings.prefix}:*:events`)).filter((k) => !k.includes(":cp:"));
const entriesAdded = async (k: string) => {
  const info = (await redisProbe.call("XINFO", "STREAM", k)) as unknown[];
  return Number(info[info.indexOf("entries-added") + 1]);
};
const streamKey = (await eventStreams())[0] as string;
// BullMQ keeps the cap in the queue's meta hash (Queue option streams.events.maxLen).
const cap = Number(await redisProbe.hget(streamKey.replace(/:events$/, ":meta"), "opts.maxLenEvents")) || 10_000;
const addedAtStart = await entriesAdded(streamKey);
while ((await entriesAdded(streamKey)) - addedAtStart < cap * 1.2) await timeEach(1000, 8, echo);
/** The gateway trims reply entries it has routed at most every 5 s, on its next request: snapshots are taken just after such a trim. */
async function settledSnapshot() {
  await sleep(5500);
  await echo();
  await sleep(500);
  return redisSnapshot(redisProbe);
}
const snapshots = [await settledSnapshot()];
const steadyRuns: Timed[] = [];
for (let b = 0; b < STEADY_BLOCKS; b++) {
  steadyRuns.push(await timeEach(STEADY_REQUESTS, 8, echo));
  snapshots.push(await settledSnapshot());
}
const before = snapshots[0] as Awaited<ReturnType<typeof redisSnapshot>>;
const after = snapshots.at(-1) as Awaited<ReturnType<typeof redisSnapshot>>;
const blockRetained = snapshots
  .slice(1)
  .map((s, i) => (s.usedMemory - (snapshots[i] as typeof s).usedMemory) / STEADY_REQUESTS);
const redisFigures = {
  commands_per_request_monitor: commandsPerRequest,
  commands_by_name_per_request: commandCounts,
  lua_commands_per_request: luaPerRequest,
  idle_commands_per_s: (idleCommands / idleMs) * 1000,
  steady_requests: STEADY_REQUESTS,
  steady_blocks: STEADY_BLOCKS,
  steady_requests_per_s: median(steadyRuns.map((r) => r.perSecond)),
  steady_commands_per_request: (after.commands - before.commands) / (STEADY_REQUESTS * STEADY_BLOCKS),
  used_memory_before: before.usedMemory,
  used_memory_after: after.usedMemory,
  // (used_memory after − before) ÷ requests over all the blocks; and each block's, to show the noise.
  retained_bytes_per_request: (after.usedMemory - before.usedMemory) / (STEADY_REQUESTS * STEADY_BLOCKS),
  retained_bytes_per_request_by_block: blockRetained,
  // used_memory less Redis's own overhead (client buffers, AOF buffer, scripts): the keys alone.
  retained_dataset_bytes_per_request: (after.dataset - before.dataset) / (STEADY_REQUESTS * STEADY_BLOCKS),
  // The bounded part: the queue's event stream at its cap, whatever the traffic.
  event_stream_bytes: after.sizes[streamKey] ?? 0,
  event_stream_entries: after.streams[streamKey] ?? 0,
  keys_left: after.keys - before.keys,
  job_hashes_left: after.hashes - before.hashes,
  // Where the dataset's growth went, key by key (MEMORY USAGE), the largest first.
  keys_grown_bytes: Object.fromEntries(
    Object.keys({ ...before.sizes, ...after.sizes })
      .map((k) => [k, (after.sizes[k] ?? 0) - (before.sizes[k] ?? 0)] as const)
      .filter(([, d]) => d !== 0)
      .sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]))
      .slice(0, 8),
  ),
  stream_entries_added: Object.fromEntries(
    Object.entries(after.streams).map(([k, n]) => [k, n - (before.streams[k] ?? 0)]),
  ),
};
redisProbe.disconnect();

echoWorker.kill("SIGTERM");
await once(echoWorker, "exit");
floorServer.close();
await gateway.close();
await ctl.redis.quit();
await redis.stop();

// ------------------------------------------- 2. a real engine under `platform up`

const stack = await startStack();
const stackSettings = loadSettings(stack.env);
const stackCtl = connectControl(stack.redisUrl, stackSettings.prefix);
await importModel(
  { ctl: stackCtl, artifacts: openStore(stackSettings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
  { name: "model", framework: "llamacpp", source: modelPath },
);
const modelEndpoint = await deployEndpoint(
  stackCtl,
  DeploymentConfig.parse({ model: { name: "model" }, resources: { replicas: 1, parallel: PARALLEL, cpu: THREADS } }),
);
await stack.waitFor(
  async () =>
    (await stack.admin<{ state: string }>("GET", `/admin/v1/endpoints/${modelEndpoint.name}`)).body.state ===
    "available",
  "the model endpoint to be available",
  120_000,
);
const auth = { authorization: `Bearer ${stack.apiKey}` };
// An echo replica under the same `up`, started as `up` starts workers (its Node flags and
// allocator): a 1-token chat to the model less one to it is the worker's engine path alone.
// Deployed with no replicas of `up`'s own, so `up` leaves it to the bench's process.
await importModel(
  { ctl: stackCtl, artifacts: openStore(stackSettings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
  { name: "echo", framework: "llamacpp", source: modelPath },
);
const stackEchoEndpoint = await deployEndpoint(
  stackCtl,
  DeploymentConfig.parse({ model: { name: "echo" }, resources: { replicas: 0, parallel: PARALLEL } }),
);
const stackEchoWorker = await startEchoWorker(
  stackEchoEndpoint.name,
  withWorkerAllocator({ ...stack.env, REDIS_URL: stack.redisUrl, PLATFORM_PREFIX: stackSettings.prefix }),
  WORKER_NODE_FLAGS,
);
const prompts = ["Once upon a time", "The little dog", "One day, a girl", "There was a big tree"];

// node-llama-cpp directly, set up as the worker sets itself up: one context, PARALLEL sequences
// kept for the whole run and reused (so both sides may reuse a cached prompt prefix alike).
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({
  sequences: PARALLEL,
  threads: THREADS,
  contextSize: Math.min(model.trainContextSize, 4096),
});
const sequences: LlamaContextSequence[] = Array.from({ length: PARALLEL }, () => context.getSequence());
async function directGenerate(i: number, prompt: string, maxTokens: number): Promise<number> {
  const completion = new LlamaCompletion({ contextSequence: sequences[i] as LlamaContextSequence });
  let tokens = 0;
  try {
    await completion.generateCompletion(prompt, {
      maxTokens,
      temperature: 0,
      repeatPenalty: false,
      onToken: (t) => (tokens += t.length),
    });
  } finally {
    completion.dispose();
  }
  return tokens;
}
const chatOne = () =>
  postJson(
    `${stack.baseUrl}/v1/chat/completions`,
    { model: "model", messages: [{ role: "user", content: prompts[0] }], max_tokens: 1, temperature: 0 },
    auth,
  );
const echoChatOne = () =>
  postJson(
    `${stack.baseUrl}/v1/chat/completions`,
    { model: "echo", messages: [{ role: "user", content: prompts[0] }], max_tokens: 1, temperature: 0 },
    auth,
  );
const directOne = () => directGenerate(0, prompts[0] as string, 1);
await stack.waitFor(async () => Boolean(await echoChatOne()), "the echo replica under `up` to answer", 30_000);

/**
 * 1-token chats to the model and to the echo replica, alternating (the order swapped every
 * request), each pair followed by one direct engine call ("paced"): that call then runs, as the
 * worker's engine does, after the client, the gateway, Redis and the other processes have run on
 * the same two cores, with what that leaves of its code and data in the caches
 * (docs/performance.md, "1-token chat: the worker's engine path").
 */
async function oneTokenSeries(round: number): Promise<{ chat: Timed; echo: Timed; paced: Timed }> {
  const latencies = { chat: [] as number[], echo: [] as number[], paced: [] as number[] };
  const start = performance.now();
  for (let i = 0; i < ONE_TOKEN_REQUESTS; i++) {
    if ((round + i) % 2 === 0) {
      latencies.chat.push(await timeOne(chatOne));
      latencies.echo.push(await timeOne(echoChatOne));
    } else {
      latencies.echo.push(await timeOne(echoChatOne));
      latencies.chat.push(await timeOne(chatOne));
    }
    latencies.paced.push(await timeOne(directOne));
  }
  const elapsed = performance.now() - start;
  return {
    chat: summarize(latencies.chat, elapsed),
    echo: summarize(latencies.echo, elapsed),
    paced: summarize(latencies.paced, elapsed),
  };
}

/** Tokens and milliseconds of `streams` concurrent streams, each generating one completion. */
async function sample(
  streams: number,
  k: number,
  generate: (i: number, prompt: string) => Promise<number>,
): Promise<{ tokens: number; ms: number }> {
  const t0 = performance.now();
  const counts = await Promise.all(
    Array.from({ length: streams }, (_, i) => generate(i, prompts[(i + k) % prompts.length] as string)),
  );
  return { tokens: counts.reduce((a, b) => a + b, 0), ms: performance.now() - t0 };
}
/**
 * Tokens/s of both sides, from REPEATS samples each taken in alternation (ABAB…), so a burst of
 * load from elsewhere on the machine falls on both sides rather than on one.
 */
async function rates(round: number, streams: number): Promise<{ direct: number; platform: number }> {
  const sum = { direct: { tokens: 0, ms: 0 }, platform: { tokens: 0, ms: 0 } };
  for (let k = 0; k < REPEATS; k++) {
    const [p, d] = await pair(
      round + k,
      () => sample(streams, k, platformGenerate),
      () => sample(streams, k, directGenerateTokens),
    );
    for (const [side, x] of [
      ["platform", p],
      ["direct", d],
    ] as const) {
      sum[side].tokens += x.tokens;
      sum[side].ms += x.ms;
    }
  }
  return {
    direct: (sum.direct.tokens / sum.direct.ms) * 1000,
    platform: (sum.platform.tokens / sum.platform.ms) * 1000,
  };
}
const directGenerateTokens = (i: number, prompt: string) => directGenerate(i, prompt, TOKENS);
/** Streamed, as a chat UI reads it: the count from the usage chunk the stream ends with. */
async function platformGenerate(_i: number, prompt: string): Promise<number> {
  const events = await postText(
    `${stack.baseUrl}/v1/completions`,
    {
      model: "model",
      prompt,
      max_tokens: TOKENS,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    },
    auth,
  );
  const last = events.slice(0, events.lastIndexOf("data: [DONE]")).trimEnd();
  const usage = JSON.parse(last.slice(last.lastIndexOf("data: ") + 6)) as { usage: { completion_tokens: number } };
  return usage.usage.completion_tokens;
}

// Warm both sides alike.
await timeEach(20, 1, chatOne);
await timeEach(20, 1, echoChatOne);
await timeEach(20, 1, directOne);
for (const streams of [1, 4]) {
  await sample(streams, 0, directGenerateTokens);
  await sample(streams, 0, platformGenerate);
}
const realRounds: {
  chat: Timed;
  echo: Timed;
  direct: Timed;
  paced: Timed;
  rates: Record<number, { direct: number; platform: number }>;
}[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const [{ chat, echo: echoChat, paced }, d] = await pair(
    round,
    () => oneTokenSeries(round),
    () => timeEach(ONE_TOKEN_REQUESTS, 1, directOne),
  );
  const byStreams: Record<number, { direct: number; platform: number }> = {};
  for (const streams of [1, 4]) byStreams[streams] = await rates(round, streams);
  realRounds.push({ chat, echo: echoChat, direct: d, paced, rates: byStreams });
}
stackEchoWorker.kill("SIGTERM");
await once(stackEchoWorker, "exit");
// Reply entries one streamed generation costs (src/queue/replies.ts gathers a stream's tokens):
// what every token would otherwise cost the worker, Redis, the gateway and the client.
const replyStreams = (await stackCtl.redis.keys(`${stackSettings.prefix}:cp:replies:*`)) as string[];
const entriesAddedTo = async (k: string) => {
  const info = (await stackCtl.redis.call("XINFO", "STREAM", k)) as unknown[];
  return Number(info[info.indexOf("entries-added") + 1]);
};
const allReplyEntries = async () =>
  (await Promise.all(replyStreams.map((k) => entriesAddedTo(k).catch(() => 0)))).reduce((a, b) => a + b, 0);
const entriesBefore = await allReplyEntries();
const streamedTokens = await platformGenerate(0, prompts[0] as string);
const replyEntriesPerToken = ((await allReplyEntries()) - entriesBefore) / streamedTokens;
const throughput = [1, 4].map((streams) => {
  const ratios = realRounds.map(
    (r) => (r.rates[streams] as { platform: number }).platform / (r.rates[streams] as { direct: number }).direct,
  );
  return {
    streams,
    direct_tokens_per_s: median(realRounds.map((r) => (r.rates[streams] as { direct: number }).direct)),
    platform_tokens_per_s: median(realRounds.map((r) => (r.rates[streams] as { platform: number }).platform)),
    ratio: median(ratios),
    ratio_spread: halfRange(ratios),
    ratios,
  };
});
await context.dispose();
await model.dispose();

// CLI start-up, interleaved with the floor any Node program pays.
const cliRounds: { node: number; version: number; status: number }[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const node = await wallMs(["-e", "0"], stack.env);
  const version = await wallMs([BIN, "--version"], stack.env);
  const status = await wallMs([BIN, "inference", "status", modelEndpoint.name, "--json"], stack.env);
  cliRounds.push({ node, version, status });
}

// Resident memory, idle with the model loaded: after two of the idle checks at which each
// process gives back what its busy spell grew (src/process/idle-memory.ts).
await sleep(2 * IDLE_CHECK_MS + 1000);
const upPid = stack.process.pid as number;
const workers = childPids(upPid).filter((c) => / worker\b/.test(c.cmdline));
if (workers.length === 0) throw new Error(`no worker process found under platform up (pid ${upPid})`);
const rss = {
  up_mib: rssMiB(upPid),
  worker_mib: Math.max(...workers.map((w) => rssMiB(w.pid))),
  workers: workers.length,
};

await stackCtl.redis.quit();
await stack.stop();

// ------------------------------------------------------------------ report

type Figure = {
  figure: string;
  measured: number;
  baseline: number | null;
  unit: string;
  ratio: number | null;
  spread?: number;
  target: string;
  met: boolean;
};
const perRound = <T>(rounds: T[], m: (r: T) => number, b: (r: T) => number) => median(rounds.map((r) => m(r) / b(r)));
// Not targets: where the queue floor sits between the HTTP floor and the platform; the echo
// figures against the queue floor are the table's.
const queueFloorFigures = {
  c1_p50_ms: median(echoRounds.map((r) => r.queued1.p50)),
  c32_requests_per_s: median(echoRounds.map((r) => r.queued32.perSecond)),
  c1_p50_vs_http_floor: perRound(
    echoRounds,
    (r) => r.queued1.p50,
    (r) => r.floor1.p50,
  ),
  c32_requests_per_s_vs_http_floor: perRound(
    echoRounds,
    (r) => r.queued32.perSecond,
    (r) => r.floor32.perSecond,
  ),
  echo_c1_p50_vs_queue_floor: perRound(
    echoRounds,
    (r) => r.echo1.p50,
    (r) => r.queued1.p50,
  ),
  echo_c32_requests_per_s_vs_queue_floor: perRound(
    echoRounds,
    (r) => r.echo32.perSecond,
    (r) => r.queued32.perSecond,
  ),
};
/**
 * The 1-token chat against what no design with a queue between two processes can save: the
 * queue floor (section 1, the same round) plus the engine paced as a worker runs it. Per round,
 * so the spread across rounds can be given.
 */
const oneTokenBase = (r: (typeof realRounds)[number], i: number) =>
  (echoRounds[i] as (typeof echoRounds)[number]).queued1.p50 + r.paced.p50;
const oneTokenRatios = realRounds.map((r, i) => r.chat.p50 / oneTokenBase(r, i));
const oneTokenRatio = median(oneTokenRatios);
const oneTokenSpread = halfRange(oneTokenRatios);
/** What a 1-token chat costs above the echo replica's under the same `up`: the worker's engine path. */
const enginePath = (r: (typeof realRounds)[number]) => r.chat.p50 - r.echo.p50;
const enginePathMs = median(realRounds.map(enginePath));
const enginePathRatio = perRound(realRounds, enginePath, (r) => r.direct.p50);
const enginePathPacedRatio = perRound(realRounds, enginePath, (r) => r.paced.p50);
const versionRatio = perRound(
  cliRounds,
  (r) => r.version,
  (r) => r.node,
);
const statusRatio = perRound(
  cliRounds,
  (r) => r.status,
  (r) => r.node,
);
const t1 = throughput[0] as (typeof throughput)[number];
const t4 = throughput[1] as (typeof throughput)[number];
const figures: Figure[] = [
  {
    figure: "echo c=1 p50 ÷ queue floor p50",
    measured: overhead[0]?.p50_ms as number,
    baseline: queueFloorFigures.c1_p50_ms,
    unit: "ms",
    ratio: queueFloorFigures.echo_c1_p50_vs_queue_floor,
    target: "≤ 2.5×",
    met: queueFloorFigures.echo_c1_p50_vs_queue_floor <= 2.5,
  },
  {
    figure: "echo c=32 req/s ÷ queue floor req/s",
    measured: overhead[2]?.requests_per_s as number,
    baseline: queueFloorFigures.c32_requests_per_s,
    unit: "req/s",
    ratio: queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor,
    target: "≥ 0.4×",
    met: queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor >= 0.4,
  },
  {
    figure: "1-token chat p50 ÷ (queue floor p50 + direct paced p50)",
    measured: median(realRounds.map((r) => r.chat.p50)),
    baseline: median(realRounds.map(oneTokenBase)),
    unit: "ms",
    ratio: oneTokenRatio,
    spread: oneTokenSpread,
    target: "≤ 1.5×",
    met: oneTokenRatio <= 1.5,
  },
  {
    figure: "1-token chat − echo chat p50 ÷ direct p50",
    measured: enginePathMs,
    baseline: median(realRounds.map((r) => r.direct.p50)),
    unit: "ms",
    ratio: enginePathRatio,
    target: "≤ 1.5×",
    met: enginePathRatio <= 1.5,
  },
  {
    figure: "1-token chat − echo chat p50 ÷ direct paced p50",
    measured: enginePathMs,
    baseline: median(realRounds.map((r) => r.paced.p50)),
    unit: "ms",
    ratio: enginePathPacedRatio,
    target: PACED_TARGET_TEXT,
    met: enginePathPacedRatio <= PACED_TARGET,
  },
  {
    figure: "tokens/s platform ÷ direct, 1 stream",
    measured: t1.platform_tokens_per_s,
    baseline: t1.direct_tokens_per_s,
    unit: "tok/s",
    ratio: t1.ratio,
    spread: t1.ratio_spread,
    target: "≥ 0.97 ±0.03",
    met: t1.ratio >= 0.97 && t1.ratio_spread <= 0.03,
  },
  {
    figure: "tokens/s platform ÷ direct, 4 streams",
    measured: t4.platform_tokens_per_s,
    baseline: t4.direct_tokens_per_s,
    unit: "tok/s",
    ratio: t4.ratio,
    spread: t4.ratio_spread,
    target: "≥ 0.97 ±0.03",
    met: t4.ratio >= 0.97 && t4.ratio_spread <= 0.03,
  },
  {
    figure: "`platform --version` ÷ `node -e 0`",
    measured: median(cliRounds.map((r) => r.version)),
    baseline: median(cliRounds.map((r) => r.node)),
    unit: "ms",
    ratio: versionRatio,
    target: "≤ 3×",
    met: versionRatio <= 3,
  },
  {
    figure: "`inference status --json` ÷ `node -e 0`",
    measured: median(cliRounds.map((r) => r.status)),
    baseline: median(cliRounds.map((r) => r.node)),
    unit: "ms",
    ratio: statusRatio,
    target: "≤ 8×",
    met: statusRatio <= 8,
  },
  {
    figure: "RSS, worker (model loaded, idle)",
    measured: rss.worker_mib,
    baseline: null,
    unit: "MiB",
    ratio: null,
    target: "≤ 120 MiB",
    met: rss.worker_mib <= 120,
  },
  {
    figure: "RSS, `platform up` process (idle)",
    measured: rss.up_mib,
    baseline: null,
    unit: "MiB",
    ratio: null,
    target: "≤ 120 MiB",
    met: rss.up_mib <= 120,
  },
  // used_memory moves by a few KiB on its own (allocator, client buffers): below 8 bytes a request over the steady run is that noise.
  {
    figure: "Redis used_memory retained per request",
    measured: redisFigures.retained_bytes_per_request,
    baseline: null,
    unit: "B",
    ratio: null,
    target: "≈ 0 (|x| < 8 B)",
    met: Math.abs(redisFigures.retained_bytes_per_request) < 8,
  },
  {
    figure: "job hashes left after steady run",
    measured: redisFigures.job_hashes_left,
    baseline: null,
    unit: "",
    ratio: null,
    target: "0",
    met: redisFigures.job_hashes_left <= 0,
  },
];

const results = {
  when: new Date().toISOString(),
  model: modelPath.split("/").at(-1),
  threads: THREADS,
  parallel: PARALLEL,
  rounds: ROUNDS,
  load_average: { at_start: loadAtStart, at_end: loadavg() },
  figures,
  direct_engine_call: { p50_ms: directP50, p99_ms: directP99 },
  http_floor: {
    p50_ms: median(echoRounds.map((r) => r.floor1.p50)),
    p99_ms: median(echoRounds.map((r) => r.floor1.p99)),
    c32_requests_per_s: median(echoRounds.map((r) => r.floor32.perSecond)),
  },
  queue_floor: queueFloorFigures,
  overhead,
  redis: redisFigures,
  one_token: {
    platform_chat_p50_ms: median(realRounds.map((r) => r.chat.p50)),
    echo_chat_p50_ms: median(realRounds.map((r) => r.echo.p50)),
    direct_p50_ms: median(realRounds.map((r) => r.direct.p50)),
    direct_paced_p50_ms: median(realRounds.map((r) => r.paced.p50)),
    chat_less_echo_p50_ms: enginePathMs,
    chat_less_echo_vs_direct: enginePathRatio,
    chat_less_echo_vs_direct_paced: enginePathPacedRatio,
    chat_vs_queue_floor_plus_paced: oneTokenRatio,
    chat_vs_queue_floor_plus_paced_by_round: oneTokenRatios,
    chat_vs_direct: perRound(
      realRounds,
      (r) => r.chat.p50,
      (r) => r.direct.p50,
    ),
    platform_chat_p99_ms: median(realRounds.map((r) => r.chat.p99)),
    echo_chat_p99_ms: median(realRounds.map((r) => r.echo.p99)),
    direct_p99_ms: median(realRounds.map((r) => r.direct.p99)),
    direct_paced_p99_ms: median(realRounds.map((r) => r.paced.p99)),
    by_round: realRounds.map((r) => ({
      chat_p50_ms: r.chat.p50,
      echo_chat_p50_ms: r.echo.p50,
      direct_p50_ms: r.direct.p50,
      direct_paced_p50_ms: r.paced.p50,
    })),
  },
  throughput,
  reply_entries_per_streamed_token: replyEntriesPerToken,
  cli: cliRounds,
  rss,
};

const out = new URL("./results/", import.meta.url);
await mkdir(out, { recursive: true });
await writeFile(new URL("fabric.json", out), `${JSON.stringify(results, null, 2)}\n`);

const f = (n: unknown, digits = 2) => (typeof n === "number" ? n.toFixed(digits) : String(n));
const withUnit = (n: number | null, unit: string) =>
  n === null ? "-" : `${f(n, unit === "MiB" || unit === "ms" ? 2 : unit === "" ? 0 : 1)} ${unit}`.trim();
console.log(
  `model ${results.model}, ${THREADS} thread(s), ${PARALLEL} sequences, ${ROUNDS} rounds; load average ${loadAtStart.map((l) => l.toFixed(2)).join(" ")} at start, ${results.load_average.at_end.map((l) => l.toFixed(2)).join(" ")} at end`,
);
console.log(
  "fabric overhead (echo engine; direct call p50 %s ms; HTTP floor p50 %s ms):",
  f(directP50, 3),
  f(results.http_floor.p50_ms),
);
for (const o of overhead)
  console.log(
    `  c=${o.concurrency}: p50 ${f(o.p50_ms)} ms (+${f(o.added_p50_ms)}), p99 ${f(o.p99_ms)} ms (+${f(o.added_p99_ms)}), ${f(o.requests_per_s, 0)} req/s`,
  );
console.log(
  `queue floor (a list and the reply stream, no job queue): c=1 p50 ${f(queueFloorFigures.c1_p50_ms)} ms = ${f(queueFloorFigures.c1_p50_vs_http_floor)}× the HTTP floor, c=32 ${f(queueFloorFigures.c32_requests_per_s, 0)} req/s = ${f(queueFloorFigures.c32_requests_per_s_vs_http_floor)}× the HTTP floor; echo = ${f(queueFloorFigures.echo_c1_p50_vs_queue_floor)}× its p50 and ${f(queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor)}× its req/s`,
);
console.log(
  `redis per echo request: ${f(commandsPerRequest, 1)} commands from clients (+${f(luaPerRequest, 1)} inside scripts); ${f(redisFigures.steady_commands_per_request, 1)} at steady load`,
);
console.log(
  `redis after ${STEADY_BLOCKS} × ${STEADY_REQUESTS} steady requests: ${f(redisFigures.retained_bytes_per_request, 1)} B retained per request (by block: ${redisFigures.retained_bytes_per_request_by_block.map((x) => f(x, 1)).join(", ")}; dataset ${f(redisFigures.retained_dataset_bytes_per_request, 1)} B), ${redisFigures.keys_left} key(s) and ${redisFigures.job_hashes_left} job hash(es) left; the queue's event stream at its cap: ${redisFigures.event_stream_entries} entries, ${f(redisFigures.event_stream_bytes / 1024, 0)} KiB; stream entries added: ${JSON.stringify(redisFigures.stream_entries_added)}`,
);
const oneToken = results.one_token;
console.log(
  `1-token chat under \`up\`: p50 ${f(oneToken.platform_chat_p50_ms)} ms, echo chat ${f(oneToken.echo_chat_p50_ms)} ms (the echo replica under the same \`up\`; echo c=1 above ${f(overhead[0]?.p50_ms)} ms), difference ${f(oneToken.chat_less_echo_p50_ms)} ms; the engine directly ${f(oneToken.direct_p50_ms, 3)} ms back to back, ${f(oneToken.direct_paced_p50_ms, 3)} ms paced (one call after each chat pair)`,
);
console.log(
  `1-token chat ÷ (queue floor + engine paced), by round: ${oneTokenRatios.map((x) => f(x, 2)).join(", ")} → ${f(oneTokenRatio, 2)} ±${f(oneTokenSpread, 2)}`,
);
console.log(
  `tokens/s, platform (streamed) vs direct (${f(replyEntriesPerToken, 3)} reply entries per streamed token: ${f(1 / replyEntriesPerToken, 1)} tokens an entry):`,
);
for (const t of throughput)
  console.log(
    `  ${t.streams} stream(s): ${f(t.platform_tokens_per_s, 0)} vs ${f(t.direct_tokens_per_s, 0)} → ratio ${f(t.ratio, 3)} ±${f(t.ratio_spread, 3)} (by round: ${t.ratios.map((x) => f(x, 3)).join(", ")})`,
  );
console.log("");
const header = ["figure", "measured", "baseline", "ratio", "target", "met"];
const rows = figures.map((x) => [
  x.figure,
  withUnit(x.measured, x.unit),
  withUnit(x.baseline, x.unit),
  x.ratio === null
    ? "-"
    : `${f(x.ratio, x.spread === undefined ? 2 : 3)}${x.spread === undefined ? "×" : ` ±${f(x.spread, 3)}`}`,
  x.target,
  x.met ? "yes" : "no",
]);
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
const line = (cells: string[]) =>
  `| ${cells.map((c, i) => (i === 0 || i === 4 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(" | ")} |`;
console.log(line(header));
console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
for (const r of rows) console.log(line(r));
console.log(`\nwritten to ${new URL("fabric.json", out).pathname}`);
process.exit(0);
