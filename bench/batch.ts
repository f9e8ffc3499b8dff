/**
 * `npm run bench:batch`: a batch job through the platform (JSONL file → batch
 * coordinator → Redis queue → worker → parts → assembled output) against a
 * direct loop over the same engine (same model, threads and sequences, the
 * same number of records in flight) reading and writing the same JSONL, in
 * one process run. Then the cost of checkpointing: batch size 100 vs 10,000.
 *
 * The platform runs as deployed: `platform up` (its Redis, gateway, a worker
 * process), with the coordinator in this process as a gateway would host it.
 * Prints a summary and writes bench/results/batch.json.
 *
 * BENCH_RECORDS (default 1000), BENCH_MAX_TOKENS (default 32) and BENCH_ROUNDS
 * (default 3; medians are reported) size the run.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BatchJobs, startBatchCoordinator } from "../src/batch/index.ts";
import { parseRecord } from "../src/batch/input.ts";
import { isBlank, readLines } from "../src/files/jsonl.ts";
import { outputLine } from "../src/batch/output.ts";
import type { BatchJob } from "../src/batch/record.ts";
import { connectControl } from "../src/redis/connection.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import { startStack } from "../test/helpers/stack.ts";
import { loadLlamaCpp } from "../workers/engines/llamacpp.ts";

const THREADS = 1;
const PARALLEL = 4;
const RECORDS = Number(process.env.BENCH_RECORDS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 32);
const PROMPTS = [
  "Once upon a time",
  "The little dog",
  "One day, a girl",
  "There was a big tree",
  "Tom and Sue went to the park",
  "The sun was hot and",
];

const modelPath = sharedModelPath() ?? (await tinyModelPath());
const dir = await mkdtemp(join(tmpdir(), "platform-bench-batch-"));
const input = join(dir, "input.jsonl");
await writeFile(
  input,
  `${Array.from({ length: RECORDS }, (_, i) => JSON.stringify({ id: `r${i}`, prompt: PROMPTS[i % PROMPTS.length], max_tokens: MAX_TOKENS })).join("\n")}\n`,
);

type Run = { seconds: number; records_per_s: number; tokens_per_s: number; output: string };

function summarise(seconds: number, output: string): Run {
  const tokens = output
    .trimEnd()
    .split("\n")
    .reduce((sum, line) => sum + ((JSON.parse(line) as { tokens_used?: number }).tokens_used ?? 0), 0);
  return { seconds, records_per_s: RECORDS / seconds, tokens_per_s: tokens / seconds, output };
}

/** The baseline: read, generate with `concurrency` records in flight, write; no queue, no checkpoints. */
async function directLoop(concurrency: number): Promise<Run> {
  const engine = await loadLlamaCpp({ modelPath, parallel: PARALLEL, threads: THREADS });
  await engine.warmup();
  const t0 = performance.now();
  const out: string[] = [];
  const running = new Set<Promise<void>>();
  let slot = 0;
  for await (const line of readLines(await openStore(dir).get("input.jsonl"))) {
    if (isBlank(line)) continue;
    const record = parseRecord(line);
    const index = slot++;
    if (!record.ok) {
      out[index] = outputLine(record.id, { ok: false, code: record.code, message: record.message });
      continue;
    }
    const prompt = record.work.kind === "prompt" ? record.work.prompt : "";
    const task: Promise<void> = engine
      .generate({ kind: "prompt", prompt, params: { ...record.params, temperature: 0 } }, {})
      .then((r) => {
        out[index] = outputLine(record.id, { ok: true, text: r.text, tokens: r.usage.total_tokens });
        running.delete(task);
      });
    running.add(task);
    if (running.size >= concurrency) await Promise.race(running);
  }
  await Promise.all(running);
  const text = `${out.join("\n")}\n`;
  await writeFile(join(dir, "direct.jsonl"), text);
  const seconds = (performance.now() - t0) / 1000;
  await engine.dispose();
  return summarise(seconds, text);
}

const loadAtStart = loadavg()[0] as number;
const stack = await startStack({ args: ["--storage-root", dirname(modelPath)] });
const admin = async (method: string, path: string, body: unknown) => {
  const res = await stack.admin<{ state?: string }>(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
};
await admin("POST", "/admin/v1/models", { name: "model", source: modelPath });
await admin("PUT", "/admin/v1/endpoints/model", {
  model: { name: "model" },
  resources: { replicas: 1, parallel: PARALLEL, cpu: THREADS },
});
await stack.waitFor(
  async () =>
    (await stack.admin<{ state: string }>("GET", "/admin/v1/endpoints/model", undefined)).body.state === "available",
  "the endpoint",
);
const settings = loadSettings({ REDIS_URL: stack.redisUrl });
const ctl = connectControl(stack.redisUrl, settings.prefix);
const queue = `bench-batches-${process.pid}`;
const coordinator = await startBatchCoordinator(ctl, settings, { queue });
const jobs = new BatchJobs(ctl, { queue });

async function platformRun(batchSize: number, concurrency: number): Promise<Run> {
  const t0 = performance.now();
  const created = await jobs.create({
    model: "model",
    input,
    output: join(dir, `out-${batchSize}-${concurrency}/`),
    batch_size: batchSize,
    concurrency,
    temperature: 0,
  });
  let job: BatchJob = created;
  while (!["completed", "failed", "cancelled"].includes(job.state)) {
    await new Promise((r) => setTimeout(r, 20));
    job = await jobs.get(created.id);
  }
  const seconds = (performance.now() - t0) / 1000;
  if (job.state !== "completed") throw new Error(`batch job ${job.state}: ${JSON.stringify(job.error)}`);
  return summarise(seconds, await readFile(fileURLToPath(job.output_file as string), "utf8"));
}

/** The same records as online requests through the gateway: what the fabric itself costs, without the batch machinery. */
async function onlineRun(concurrency: number): Promise<Run> {
  const records = Array.from({ length: RECORDS }, (_, i) => ({
    id: `r${i}`,
    prompt: PROMPTS[i % PROMPTS.length] as string,
  }));
  const out: string[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < records.length; i = next++) {
        const record = records[i] as { id: string; prompt: string };
        const res = await fetch(`${stack.baseUrl}/v1/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "model", prompt: record.prompt, max_tokens: MAX_TOKENS, temperature: 0 }),
        });
        const body = (await res.json()) as { choices: { text: string }[]; usage: { total_tokens: number } };
        out[i] = outputLine(record.id, {
          ok: true,
          text: body.choices[0]?.text ?? "",
          tokens: body.usage.total_tokens,
        });
      }
    }),
  );
  return summarise((performance.now() - t0) / 1000, `${out.join("\n")}\n`);
}

await platformRun(100, PARALLEL); // warm-up: the worker's engine as warm as the direct loop's

// Rounds of every run back to back: on a shared machine the load drifts, and a
// ratio taken within one round compares runs made under the same conditions.
type Round = { direct: Run; same: Run; deeper: Run; oneBatch: Run; online: Run };
const rounds: Round[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const direct = await directLoop(PARALLEL);
  const same = await platformRun(100, PARALLEL);
  const deeper = await platformRun(100, 2 * PARALLEL);
  const oneBatch = await platformRun(10_000, 2 * PARALLEL);
  const online = await onlineRun(2 * PARALLEL);
  rounds.push({ direct, same, deeper, oneBatch, online });
  console.log(
    `round ${r + 1}/${ROUNDS}: direct ${direct.records_per_s.toFixed(1)}, batch c=${PARALLEL} ${same.records_per_s.toFixed(1)}, c=${2 * PARALLEL} ${deeper.records_per_s.toFixed(1)}, one batch ${oneBatch.records_per_s.toFixed(1)}, online ${online.records_per_s.toFixed(1)} records/s`,
  );
}

await coordinator.stop();
await jobs.close();
await ctl.redis.quit();
await stack.stop();
await rm(dir, { recursive: true, force: true });

const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const of = (pick: (r: Round) => number) => median(rounds.map(pick));
const row = (pick: (r: Round) => Run) => ({
  records_per_s: of((r) => pick(r).records_per_s),
  tokens_per_s: of((r) => pick(r).tokens_per_s),
});
const results = {
  when: new Date().toISOString(),
  model: modelPath.split("/").at(-1),
  records: RECORDS,
  max_tokens: MAX_TOKENS,
  threads: THREADS,
  sequences: PARALLEL,
  rounds: ROUNDS,
  note: "medians over the rounds; ratios are taken within each round",
  load_average: { start: loadAtStart, end: loadavg()[0] },
  direct: { concurrency: PARALLEL, ...row((r) => r.direct) },
  platform: [
    {
      batch_size: 100,
      concurrency: PARALLEL,
      ...row((r) => r.same),
      ratio: of((r) => r.same.records_per_s / r.direct.records_per_s),
    },
    {
      batch_size: 100,
      concurrency: 2 * PARALLEL,
      ...row((r) => r.deeper),
      ratio: of((r) => r.deeper.records_per_s / r.direct.records_per_s),
    },
  ],
  same_output_as_direct: rounds.every((r) =>
    [r.same, r.deeper, r.oneBatch, r.online].every((run) => run.output === r.direct.output),
  ),
  online_requests: {
    concurrency: 2 * PARALLEL,
    ...row((r) => r.online),
    ratio: of((r) => r.online.records_per_s / r.direct.records_per_s),
  },
  checkpoint_overhead: {
    concurrency: 2 * PARALLEL,
    batch_size_100_records_per_s: of((r) => r.deeper.records_per_s),
    batch_size_10000_records_per_s: of((r) => r.oneBatch.records_per_s),
    overhead: of((r) => 1 - r.deeper.records_per_s / r.oneBatch.records_per_s),
  },
  targets: { platform_over_direct: 0.9 },
};

const outDir = new URL("./results/", import.meta.url);
await mkdir(outDir, { recursive: true });
await writeFile(new URL("batch.json", outDir), `${JSON.stringify(results, null, 2)}\n`);
const f = (n: number) => n.toFixed(2);
console.log(
  `model ${results.model}, ${RECORDS} records x ${MAX_TOKENS} tokens, ${THREADS} thread(s), ${PARALLEL} sequences; medians of ${ROUNDS} rounds; load ${f(results.load_average.start)} → ${f(results.load_average.end as number)}`,
);
console.log(
  `direct loop (${PARALLEL} in flight): ${f(results.direct.records_per_s)} records/s, ${f(results.direct.tokens_per_s)} tokens/s`,
);
for (const p of results.platform) {
  console.log(
    `platform batch (batch size ${p.batch_size}, concurrency ${p.concurrency}): ${f(p.records_per_s)} records/s, ${f(p.tokens_per_s)} tokens/s → ratio ${f(p.ratio)}`,
  );
}
console.log(
  `online requests, same records (concurrency ${2 * PARALLEL}): ${f(results.online_requests.records_per_s)} records/s → ratio ${f(results.online_requests.ratio)} (the fabric without the batch machinery)`,
);
const c = results.checkpoint_overhead;
console.log(
  `checkpoint overhead: batch size 100 ${f(c.batch_size_100_records_per_s)} vs 10,000 ${f(c.batch_size_10000_records_per_s)} records/s → ${f(c.overhead * 100)}%`,
);
console.log(`outputs identical to the direct loop's: ${results.same_output_as_direct}`);
console.log(`written to ${new URL("batch.json", outDir).pathname}`);
process.exit(0);
