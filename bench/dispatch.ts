/**
 * `npm run bench:dispatch`: fair share between tenants on one endpoint (src/queue/fair-share.ts),
 * measured against first come, first served (the same jobs without a tenant) in the same run, on a
 * real worker (one replica, BENCH_PARALLEL sequences) and a private Redis.
 *
 * - quiet vs flood: one tenant sends BENCH_FLOOD requests at once; another sends one request once
 *   the flood has begun. Its time to first token against the flood's own p50: ≤ 0.5 is the target
 *   (it waits for the next free sequence, not behind the flood).
 * - Jain's fairness index over four tenants keeping 1, 2, 4 and 8 requests in flight for
 *   BENCH_SECONDS each: (Σx)² / (n·Σx²) over the tokens each was served; 1 is an even share,
 *   0.25 one tenant taking all. Target ≥ 0.9.
 *
 * BENCH_MODEL: a GGUF (default: the shared tiny model). docs/performance.md, "Fair share".
 */
import { randomUUID } from "node:crypto";
import { endpointQueueName } from "../src/contracts/engines.ts";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import { Dispatcher, type Submission } from "../src/queue/dispatcher.ts";
import { connectControl } from "../src/redis/connection.ts";
import { loadLlamaCpp } from "../workers/engines/llamacpp.ts";
import { startWorker } from "../workers/worker.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import { privateRedis } from "../test/helpers/redis.ts";
import { median } from "./measure.ts";

const PARALLEL = Number(process.env.BENCH_PARALLEL ?? 4);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const FLOOD = Number(process.env.BENCH_FLOOD ?? 24);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const modelPath = process.env.BENCH_MODEL ?? sharedModelPath() ?? (await tinyModelPath());

const redis = await privateRedis();
const ctl = connectControl(redis.url, `bench-dispatch-${randomUUID().slice(0, 6)}`);
const dispatcher = new Dispatcher(ctl, "bench-dispatch");
const endpoint: Endpoint = {
  name: "bench",
  config: DeploymentConfig.parse({
    endpoint: "bench",
    model: { name: "bench", version: "v1" },
    resources: { parallel: PARALLEL },
  }),
  version: "v1",
  framework: "llamacpp",
  desired_replicas: 1,
  created: Date.now(),
  updated: Date.now(),
};
const queue = endpointQueueName(endpoint);
const worker = startWorker({
  ctl,
  endpoint,
  replicaId: "bench-1",
  loadEngine: () => loadLlamaCpp({ modelPath, parallel: PARALLEL, threads: THREADS }),
});
await worker.ready;

/** One streamed request; resolves with its time to first token (ms) and the tokens it was served. */
async function request(org: string, fair: boolean): Promise<{ ttftMs: number; tokens: number }> {
  const t0 = performance.now();
  const submission: Submission = {
    kind: "completion",
    request_id: randomUUID(),
    model: "bench",
    version: "v1",
    prompt: `Once upon a time, ${org} said`,
    params: { max_tokens: MAX_TOKENS, temperature: 0 },
    stream: true,
    ...(fair && { tenant: { org, key: `${org}-key` } }),
  };
  const handle = await dispatcher.submit(submission, { timeoutMs: 600_000, queue, cost: MAX_TOKENS + 8 });
  let ttftMs = 0;
  for await (const event of handle.events) {
    if (event.type === "token" && ttftMs === 0) ttftMs = performance.now() - t0;
    if (event.type === "done") return { ttftMs, tokens: event.result.usage.completion_tokens };
    if (event.type === "error") throw new Error(event.error.message);
  }
  throw new Error("no answer");
}

async function quietVsFlood(fair: boolean): Promise<{ quiet: number; flood: number }> {
  let begun: () => void = () => undefined;
  const floodBegun = new Promise<void>((resolve) => (begun = resolve));
  const flood = Array.from({ length: FLOOD }, () =>
    request("flood", fair).then((r) => {
      begun();
      return r;
    }),
  );
  // Sent once the flood's first request is answered: the rest of it waits in the queue.
  await floodBegun;
  const quiet = await request("quiet", fair);
  const floods = await Promise.all(flood);
  return { quiet: quiet.ttftMs, flood: median(floods.map((r) => r.ttftMs)) };
}

async function jain(fair: boolean): Promise<{ index: number; shares: number[] }> {
  const until = performance.now() + SECONDS * 1000;
  const tenants = [1, 2, 4, 8];
  const served = tenants.map(() => 0);
  await Promise.all(
    tenants.flatMap((inFlight, t) =>
      Array.from({ length: inFlight }, async () => {
        while (performance.now() < until) {
          const { tokens } = await request(`t${t}`, fair);
          served[t] = (served[t] ?? 0) + tokens;
        }
      }),
    ),
  );
  const sum = served.reduce((a, b) => a + b, 0);
  const squares = served.reduce((a, b) => a + b * b, 0);
  return { index: (sum * sum) / (tenants.length * squares), shares: served.map((s) => s / sum) };
}

const fmt = (n: number) => n.toFixed(2);
console.log(
  `bench:dispatch on ${modelPath.split("/").pop()}: one replica, ${PARALLEL} sequences, ${THREADS} thread(s), ${MAX_TOKENS} tokens a request`,
);
for (const fair of [false, true]) {
  const label = fair ? "fair share" : "first come";
  const q = await quietVsFlood(fair);
  console.log(
    `${label.padEnd(11)} quiet TTFT ${q.quiet.toFixed(0)} ms, flood TTFT p50 ${q.flood.toFixed(0)} ms: ratio ${fmt(q.quiet / q.flood)} (target ≤ 0.5)`,
  );
  const j = await jain(fair);
  console.log(
    `${label.padEnd(11)} Jain's index over tenants with 1/2/4/8 in flight: ${fmt(j.index)} (shares ${j.shares.map(fmt).join(" / ")}; target ≥ 0.9)`,
  );
}

await worker.drain({ deadlineMs: 0 });
await dispatcher.close();
await ctl.redis.quit();
await redis.stop();
