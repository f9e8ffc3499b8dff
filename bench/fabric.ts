/**
 * `npm run bench:fabric`: what the fabric costs, each figure a ratio against a
 * baseline measured in the same run, in interleaved rounds (medians), because
 * the machines this runs on are small and shared. What each figure means and
 * the latest numbers: docs/performance.md. Writes bench/results/fabric.json.
 * Each benchmark is a file of its own; this one runs them in order:
 *   1. Echo engine (a worker process of its own): latency and requests/s vs the
 *      queue floor (bench/queue-floor.ts) and, printed only, the HTTP floor
 *      (fabric-echo.ts); the Redis commands one request costs, what Redis keeps
 *      after a steady run (fabric-redis.ts).
 *   2. Real engine under `platform up` (fabric-engine.ts): 1-token latency against the queue
 *      floor plus the engine paced, streamed tokens/s vs node-llama-cpp called directly with the
 *      same model, threads and sequences, and what a 1-token chat costs above an echo replica
 *      under the same `up` (the worker's engine path); then (fabric-process.ts) CLI start-up vs
 *      `node -e 0` and resident memory of a worker and of `up`.
 * The table and the JSON: fabric-report.ts.
 */
import { loadavg } from "node:os";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import { measureEcho, startEchoFabric } from "./fabric-echo.ts";
import { measureEngine, PARALLEL, startModelStack, THREADS } from "./fabric-engine.ts";
import { measureCli, measureRss } from "./fabric-process.ts";
import { measureRedis } from "./fabric-redis.ts";
import { report } from "./fabric-report.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Requests per series per round at c=1; the concurrent series send more. */
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 200);
const STEADY_REQUESTS = Number(process.env.BENCH_STEADY_REQUESTS ?? 5000);
const STEADY_BLOCKS = Number(process.env.BENCH_STEADY_BLOCKS ?? 3);
const ONE_TOKEN_REQUESTS = Number(process.env.BENCH_ONE_TOKEN_REQUESTS ?? 100);

const loadAtStart = loadavg();
const modelPath = sharedModelPath() ?? (await tinyModelPath());

// 1. the fabric, echo engine
const fabric = await startEchoFabric(modelPath);
const echo = await measureEcho(fabric, { rounds: ROUNDS, requests: REQUESTS });
const redisFigures = await measureRedis({
  redisUrl: fabric.redisUrl,
  prefix: fabric.prefix,
  echo: fabric.echo,
  steadyRequests: STEADY_REQUESTS,
  steadyBlocks: STEADY_BLOCKS,
});
await fabric.close();

// 2. a real engine under `platform up`
const ms = await startModelStack(modelPath);
const engine = await measureEngine(ms, { rounds: ROUNDS, oneTokenRequests: ONE_TOKEN_REQUESTS });
const cliRounds = await measureCli(ms.stack, ms.endpoint, ROUNDS);
const rss = await measureRss(ms.stack);
await ms.ctl.redis.quit();
await ms.stack.stop();

await report({
  modelPath,
  threads: THREADS,
  parallel: PARALLEL,
  rounds: ROUNDS,
  loadAtStart,
  ...echo,
  redisFigures,
  ...engine,
  cliRounds,
  rss,
});
process.exit(0);
