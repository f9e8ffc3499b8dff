/**
 * `npm run bench:hot-path`: what tracing and rate limiting cost on the hot path (issue 9's
 * bench). Rate limiting: the same stack, requests from a key with limits (rpm, tpm and
 * max-concurrency set high enough never to refuse, so every check and settlement runs) against
 * requests from a key without. Tracing: two identical stacks on one Redis,
 * each a `platform gateway` process and an echo worker process (bench/echo-worker.ts): one with
 * tracing off (the default), one recording every span (sampler always_on) and exporting it over
 * OTLP/HTTP protobuf, the default protocol, to a local receiver (bench/otlp-sink.ts, a process
 * of its own). Echo requests at c=1, the two stacks taking turns request by request; each
 * series' latency is the median of its rounds' p50, and each ratio the median of the rounds'
 * ratios, each round's taken between requests sent side by side (a ratio of the two medians
 * could pair a quiet round's p50 with a busy one's). Also the CPU each side's processes spend
 * per request. Both stacks serve the same traffic, each its own unlimited and limited key in
 * turn: a stack that served a third of the requests while the other served two thirds ran
 * 9-26% slower with identical settings (both off), a bias the tracing ratio used to carry.
 * Prints both p50 ratios against their target (≤ 1.10) and writes bench/results/hot-path.json.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { createApiKey } from "../src/keys/store.ts";
import { startEmbeddedRedis } from "../src/redis/embedded.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { connectControl } from "../src/redis/connection.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { tinyModelPath } from "../test/helpers/models.ts";
import { BIN } from "../test/helpers/stack.ts";
import { median, percentile, postJson } from "./measure.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 200);
const TARGET = 1.1;
const loadAtStart = loadavg();

async function timeEach(n: number, fn: () => Promise<unknown>): Promise<{ p50: number; p99: number }> {
  const latencies: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    latencies.push(performance.now() - t0);
  }
  latencies.sort((a, b) => a - b);
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

/** CPU time (user + system) a process has used so far, in ms (Linux /proc; clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Waits for a child's output to show `pattern`; returns the first capture group. */
function waitForOutput(child: ChildProcess, pattern: RegExp, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${what} did not start in 60 s:\n${out}`)), 60_000);
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = pattern.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] ?? "");
      }
    });
    child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    child.once("exit", (code) => reject(new Error(`${what} exited with ${code}:\n${out}`)));
  });
}

// ------------------------------------------------------------------ setup

const dir = await mkdtemp(join(tmpdir(), "platform-bench-tracing-"));
const redis = await startEmbeddedRedis(join(dir, "redis"));
const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dir }), redisUrl: redis.url };
const ctl = connectControl(redis.url, settings.prefix);
const key = (await createApiKey(ctl, "bench", "user")).key;
// Limits far above what the bench sends: every request pays the checks, none is refused.
const limitedKey = (
  await createApiKey(ctl, "bench-limited", "user", { rpm: 1_000_000_000, tpm: 1_000_000_000, max_concurrency: 1000 })
).key;
const modelPath = await tinyModelPath();
const imports = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
const sink = spawn(process.execPath, [fileURLToPath(new URL("./otlp-sink.ts", import.meta.url))], {
  stdio: ["ignore", "pipe", "pipe"],
});
const sinkUrl = await waitForOutput(sink, /listening (\S+)/, "the OTLP sink");

/** Everything of this environment but OTEL_* (a developer's own collector settings must not leak into the "off" side). */
const baseEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !k.startsWith("OTEL_")),
);
const sides = {
  off: { ...baseEnv, OTEL_TRACES_EXPORTER: "none" },
  on: {
    ...baseEnv,
    OTEL_TRACES_EXPORTER: "otlp",
    OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl,
    OTEL_TRACES_SAMPLER: "always_on",
  },
};
const children: ChildProcess[] = [];
// A bench that fails midway (a refused request throws) must not leave its gateways and workers running.
process.once("exit", () => {
  for (const child of [...children, sink]) if (child.exitCode === null) child.kill("SIGKILL");
});
const urls: Record<keyof typeof sides, string> = { off: "", on: "" };
const pids: Record<keyof typeof sides, number[]> = { off: [], on: [] };
for (const [side, extra] of Object.entries(sides) as [keyof typeof sides, NodeJS.ProcessEnv][]) {
  const name = `echo-${side}`;
  // One model each, so each side's worker has a queue of its own.
  await importModel(imports, { name, framework: "llamacpp", source: modelPath });
  const endpoint = await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name } }));
  const env = {
    ...extra,
    REDIS_URL: redis.url,
    PLATFORM_PREFIX: settings.prefix,
    PLATFORM_DATA_DIR: dir,
    PLATFORM_LOG_FORMAT: "json",
  };
  const worker = spawn(process.execPath, [fileURLToPath(new URL("./echo-worker.ts", import.meta.url)), endpoint.name], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const gateway = spawn(process.execPath, [BIN, "gateway", "--host", "127.0.0.1", "--port", "0"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(worker, gateway);
  pids[side] = [worker.pid as number, gateway.pid as number];
  await waitForOutput(worker, /ready/, `the ${side} echo worker`);
  urls[side] = await waitForOutput(gateway, /gateway listening on (http:\/\/[^\s";]+)/, `the ${side} gateway`);
}

/**
 * A series: `off` and `on` are the tracing sides with the unlimited key; `limited` is the `off`
 * stack with the limited key, `on-limited` the `on` stack's (so that both stacks serve alike).
 */
type Series = "off" | "on" | "limited" | "on-limited";
const sideOf = (series: Series): keyof typeof sides => (series === "off" || series === "limited" ? "off" : "on");
const request = (series: Series) => () =>
  postJson(
    `${urls[sideOf(series)]}/v1/completions`,
    { model: `echo-${sideOf(series)}`, prompt: "hi", max_tokens: 1 },
    { authorization: `Bearer ${series === "limited" || series === "on-limited" ? limitedKey : key}` },
  );
// Warm connections, caches and the JIT on every series.
for (const series of ["off", "on", "limited", "on-limited"] as const) await timeEach(200, request(series));

// ------------------------------------------------------------------ rounds

/** CPU each side's gateway and worker spend per request (background work included alike on both sides). */
const cpuPerRequest: Record<keyof typeof sides, number> = { off: 0, on: 0 };
const cpuOf = (side: keyof typeof sides) => pids[side].reduce((sum, pid) => sum + cpuMs(pid), 0);
const rounds: Record<Series, { p50: number; p99: number }>[] = [];
// The stacks alternate request by request, each alternating its keys; the two orders (taken in
// turn) give `off` and `on` mirror-image predecessors: off after on-limited or on, on after limited or off.
const ORDERS: Series[][] = [
  ["off", "on", "limited", "on-limited"],
  ["off", "on-limited", "limited", "on"],
];
for (let round = 0; round < ROUNDS; round++) {
  // The series take turns request by request, so a burst of other work on this shared machine
  // lands on all alike rather than on one series' whole round.
  const latencies: Record<Series, number[]> = { off: [], on: [], limited: [], "on-limited": [] };
  const cpuBefore = { off: cpuOf("off"), on: cpuOf("on") };
  for (let i = 0; i < REQUESTS; i++) {
    for (const series of ORDERS[(i + round) % ORDERS.length] as Series[]) {
      const t0 = performance.now();
      await request(series)();
      latencies[series].push(performance.now() - t0);
    }
  }
  // Each stack serves two series (its unlimited and limited keys): its CPU is shared over both.
  for (const side of ["off", "on"] as const)
    cpuPerRequest[side] += (cpuOf(side) - cpuBefore[side]) / (REQUESTS * ROUNDS * 2);
  const stats = (xs: number[]) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  };
  rounds.push({
    off: stats(latencies.off),
    on: stats(latencies.on),
    limited: stats(latencies.limited),
    "on-limited": stats(latencies["on-limited"]),
  });
}
// The spans still buffered leave when the "on" processes stop (they flush on SIGTERM); then the sink reports.
for (const child of children) child.kill("SIGTERM");
await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once("exit", r)) : undefined)));
const received = waitForOutput(sink, /received (\d+ \d+)/, "the OTLP sink's count");
sink.kill("SIGTERM");
const [exportRequests, exportBytes] = (await received).split(" ").map(Number) as [number, number];

const off = { p50_ms: median(rounds.map((r) => r.off.p50)), p99_ms: median(rounds.map((r) => r.off.p99)) };
const on = { p50_ms: median(rounds.map((r) => r.on.p50)), p99_ms: median(rounds.map((r) => r.on.p99)) };
const ratios = rounds.map((r) => r.on.p50 / r.off.p50);
const ratio = median(ratios);
const limited = { p50_ms: median(rounds.map((r) => r.limited.p50)), p99_ms: median(rounds.map((r) => r.limited.p99)) };
const limitRatios = rounds.map((r) => r.limited.p50 / r.off.p50);
const limitRatio = median(limitRatios);
// The same cost measured on the traced stack: not the target's figure, a second reading of it.
const onLimited = {
  p50_ms: median(rounds.map((r) => r["on-limited"].p50)),
  p99_ms: median(rounds.map((r) => r["on-limited"].p99)),
};
const onLimitRatio = median(rounds.map((r) => r["on-limited"].p50 / r.on.p50));
const results = {
  when: new Date().toISOString(),
  rounds: ROUNDS,
  requests_per_round: REQUESTS,
  load_average: { at_start: loadAtStart, at_end: loadavg() },
  tracing_off: off,
  tracing_on: on,
  p50_ratio: ratio,
  p50_ratio_per_round: ratios,
  p99_ratio: on.p99_ms / off.p99_ms,
  cpu_ms_per_request: { off: cpuPerRequest.off, on: cpuPerRequest.on, added: cpuPerRequest.on - cpuPerRequest.off },
  target: `≤ ${TARGET}`,
  met: ratio <= TARGET,
  exported: { protocol: "http/protobuf", sampler: "always_on", export_requests: exportRequests, bytes: exportBytes },
  rate_limits: {
    unlimited_key: off,
    limited_key: limited,
    p50_ratio: limitRatio,
    p50_ratio_per_round: limitRatios,
    target: `≤ ${TARGET}`,
    met: limitRatio <= TARGET,
    with_tracing_on: { unlimited_key: on, limited_key: onLimited, p50_ratio: onLimitRatio },
  },
};

const out = new URL("./results/", import.meta.url);
await mkdir(out, { recursive: true });
await writeFile(new URL("hot-path.json", out), `${JSON.stringify(results, null, 2)}\n`);

const f = (n: number, digits = 3) => n.toFixed(digits);
console.log(
  `tracing overhead, echo engine, c=1, ${ROUNDS} rounds × ${REQUESTS} requests; load average ${loadAtStart.map((l) => l.toFixed(2)).join(" ")} at start`,
);
console.log(`  off: p50 ${f(off.p50_ms)} ms, p99 ${f(off.p99_ms)} ms`);
console.log(
  `  on:  p50 ${f(on.p50_ms)} ms, p99 ${f(on.p99_ms)} ms (every span exported: ${exportRequests} OTLP requests, ${exportBytes} bytes)`,
);
console.log(
  `  CPU per request, gateway + worker: off ${f(cpuPerRequest.off)} ms, on ${f(cpuPerRequest.on)} ms (each over its requests with and without limits; spans exported as they fill a batch, so included)`,
);
console.log(
  `  p50 ratio on/off ${f(ratio)} (rounds ${ratios.map((r) => f(r)).join(" ")}), target ≤ ${TARGET}: ${ratio <= TARGET ? "met" : "NOT met"}`,
);
console.log(
  `rate limiting, same stack, c=1: key without limits p50 ${f(off.p50_ms)} ms, key with rpm, tpm and max-concurrency p50 ${f(limited.p50_ms)} ms`,
);
console.log(
  `  p50 ratio limited/unlimited ${f(limitRatio)} (rounds ${limitRatios.map((r) => f(r)).join(" ")}), target ≤ ${TARGET}: ${limitRatio <= TARGET ? "met" : "NOT met"}`,
);
console.log(`  on the traced stack: p50 ${f(on.p50_ms)} → ${f(onLimited.p50_ms)} ms, ratio ${f(onLimitRatio)}`);
console.log(`written to ${new URL("hot-path.json", out).pathname}`);

await ctl.redis.quit();
await redis.stop();
await rm(dir, { recursive: true, force: true });
process.exit(0);
