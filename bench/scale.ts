/**
 * `npm run bench:scale`: how fast the fleet reacts, on `platform up` with the
 * local backend and the tiny test model.
 *   1. Scale-up reaction: from a load step (8 long requests at once, target 1
 *      per replica, no cooldown) to the scaler's decision, and to the new
 *      replica being ready. Baseline: how long `platform up` takes to start
 *      with one replica ready, in the same run.
 *   2. Failover: a replica is SIGKILLed while running a non-streaming job; the
 *      time until the job is back in the queue, taken by another replica, and
 *      answered. Baseline: the same job served without a kill.
 * Prints a summary and the issue-8 figures with their targets (median of
 * BENCH_REPS runs, 3 by default) and writes bench/results/scale.json.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { randomUUID } from "node:crypto";
import { connectControl } from "../src/redis/connection.ts";
import { listReplicas } from "../src/replicas/heartbeats.ts";
import { QueueBase } from "../src/queue/base.ts";
import { replyHandler } from "../src/queue/replies.ts";
import { tinyModelPath } from "../test/helpers/models.ts";
import { startStack } from "../test/helpers/stack.ts";

const REPS = Number(process.env.BENCH_REPS ?? 3);
const PREFIX = "platform";

const model = await tinyModelPath({ contextLength: 4096 });
const t0 = performance.now();
const stack = await startStack({ model, args: ["--name", "tiny", "--parallel", "1"] });
const coldStartMs = performance.now() - t0;
const ctl = connectControl(stack.redisUrl, PREFIX);

const replicas = (endpoint: string) => listReplicas(ctl, endpoint);
const ready = async (endpoint: string) => (await replicas(endpoint)).filter((r) => r.state === "ready").length;
async function until(check: () => Promise<boolean>, what: string, timeoutMs = 120_000): Promise<number> {
  const start = performance.now();
  while (!(await check())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now();
}
const post = (body: unknown) =>
  fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  }).then((r) => r.json());

try {
  // 1. Scale-up reaction. One replica serving one sequence; target 1 per replica; no cooldown.
  const put = await stack.admin("PUT", "/admin/v1/endpoints/tiny/autoscaling", {
    autoscaling: {
      min_replicas: 1,
      max_replicas: 2,
      target_queue_depth: 1,
      scale_up_cooldown: "0s",
      scale_down_cooldown: "0s",
      scale_down_delay: "3s",
    },
  });
  if (put.status !== 200) throw new Error(`autoscaling PUT: ${JSON.stringify(put.body)}`);
  const reaction: { decision_ms: number; ready_ms: number }[] = [];
  for (let i = 0; i < REPS; i++) {
    await until(async () => (await replicas("tiny")).length === 1 && (await ready("tiny")) === 1, "one ready replica");
    await ctl.redis.del(ctl.keys.scalingDecisions("tiny"));
    const step = performance.now();
    const stepWall = Date.now();
    // Enough work to keep the queue above target until the new replica is ready, even on a busy machine.
    const load = Array.from({ length: 8 }, () =>
      post({ model: "tiny", prompt: "Once upon a time", max_tokens: 1500, temperature: 0 }),
    );
    let decidedAt = 0;
    await until(async () => {
      const head = await ctl.redis.lindex(ctl.keys.scalingDecisions("tiny"), 0);
      const d = head ? (JSON.parse(head) as { action: string; at: number }) : undefined;
      if (d?.action === "scale_up") decidedAt = d.at;
      return d?.action === "scale_up";
    }, "a scale-up decision");
    const readyAt = await until(async () => (await ready("tiny")) === 2, "the second replica to be ready");
    reaction.push({ decision_ms: decidedAt - stepWall, ready_ms: readyAt - step });
    await Promise.all(load);
  }

  // 2. Failover. A second endpoint with two replicas and no autoscaling.
  const deploy = await stack.admin("PUT", "/admin/v1/endpoints/fo", {
    model: { name: "tiny" },
    resources: { replicas: 2, parallel: 1 },
  });
  if (deploy.status !== 200) throw new Error(`deploy: ${JSON.stringify(deploy.body)}`);
  // Same queue as "tiny" (same model and version): keep tiny at one replica so `fo` replicas take the jobs.
  await stack.admin("PUT", "/admin/v1/endpoints/tiny/autoscaling", {
    autoscaling: { min_replicas: 1, max_replicas: 1 },
  });
  const base = new QueueBase(ctl);
  const queue = base.queue("tiny", "v1");
  const events = base.events(queue.name);
  await events.waitUntilReady();
  const job = (maxTokens: number) => ({
    v: 1,
    kind: "completion",
    request_id: randomUUID(),
    model: "tiny",
    version: "v1",
    prompt: "Once upon a time",
    params: { max_tokens: maxTokens, temperature: 0 },
  });
  const seen = new Map<string, { event: string; at: number }[]>();
  for (const name of ["active", "stalled", "waiting", "completed", "failed"] as const) {
    events.on(name, ({ jobId, prev }: { jobId: string; prev?: string }) => {
      const list = seen.get(jobId) ?? [];
      // `waiting` after `active`: the job handed back from a dead replica (src/queue/reclaim.ts).
      list.push({ event: name === "waiting" && prev === "active" ? "requeued" : name, at: performance.now() });
      seen.set(jobId, list);
    });
  }
  const replyStream = `bench:replies:${randomUUID()}`;
  const startedBy = new Map<string, string[]>();
  base.reader(replyStream, { blockMs: 200 }).start(
    replyHandler("bench", (jobId, event) => {
      if (event.type === "started") startedBy.set(jobId, [...(startedBy.get(jobId) ?? []), event.replica]);
    }),
  );
  const TOKENS = 2500;
  const baselines: number[] = [];
  const failovers: { requeued_ms: number; picked_up_ms: number; answered_ms: number }[] = [];
  for (let i = 0; i < REPS; i++) {
    await until(async () => (await ready("fo")) + (await ready("tiny")) === 3, "three ready replicas");
    // Baseline: the same job, no kill.
    const start = performance.now();
    const plain = await queue.add("completion", job(TOKENS));
    await plain.waitUntilFinished(events, 120_000);
    baselines.push(performance.now() - start);

    // Streamed to a reply stream only to learn which replica took the job (its `started` event).
    const victimJob = await queue.add("completion", { ...job(TOKENS), stream: true, reply: { stream: replyStream } });
    let victim: { pid: number } | undefined;
    await until(async () => {
      const started = startedBy.get(victimJob.id as string)?.[0];
      victim = started
        ? (await replicas("fo")).concat(await replicas("tiny")).find((r) => r.id === started)
        : undefined;
      return victim !== undefined;
    }, "the replica running the job");
    const killedAt = performance.now();
    process.kill((victim as { pid: number }).pid, "SIGKILL");
    await victimJob.waitUntilFinished(events, 120_000);
    const answeredAt = performance.now();
    const log = seen.get(victimJob.id as string) ?? [];
    const requeued = log.find((e) => e.event === "requeued" || e.event === "stalled")?.at ?? Number.NaN;
    const pickedUp = log.filter((e) => e.event === "active")[1]?.at ?? Number.NaN;
    failovers.push({
      requeued_ms: requeued - killedAt,
      picked_up_ms: pickedUp - killedAt,
      answered_ms: answeredAt - killedAt,
    });
  }
  await base.close();

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const result = {
    when: new Date().toISOString(),
    model: "tiny test model (test/fixtures/tiny-llama.ts), 1 thread, parallel 1",
    machine_cores: (await import("node:os")).availableParallelism(),
    cold_start_ms: Math.round(coldStartMs),
    scale_up: {
      runs: reaction.map((r) => ({ decision_ms: Math.round(r.decision_ms), ready_ms: Math.round(r.ready_ms) })),
      median_decision_ms: Math.round(median(reaction.map((r) => r.decision_ms))),
      median_ready_ms: Math.round(median(reaction.map((r) => r.ready_ms))),
    },
    failover: {
      job_tokens: TOKENS,
      baseline_job_ms: Math.round(median(baselines)),
      runs: failovers.map((f) => ({
        requeued_ms: Math.round(f.requeued_ms),
        picked_up_ms: Math.round(f.picked_up_ms),
        answered_ms: Math.round(f.answered_ms),
      })),
      median_picked_up_ms: Math.round(median(failovers.map((f) => f.picked_up_ms))),
      median_answered_ms: Math.round(median(failovers.map((f) => f.answered_ms))),
    },
  };
  console.log(`cold start of platform up with one replica: ${result.cold_start_ms} ms`);
  console.log(
    `scale-up: load step → decision ${result.scale_up.median_decision_ms} ms, → second replica ready ${result.scale_up.median_ready_ms} ms` +
      ` (${(result.scale_up.median_ready_ms / result.cold_start_ms).toFixed(2)}× the cold start)`,
  );
  console.log(
    `failover: kill → job back in the queue ${Math.round(median(failovers.map((f) => f.requeued_ms)))} ms, → taken by another replica ${result.failover.median_picked_up_ms} ms,` +
      ` → answered ${result.failover.median_answered_ms} ms (the job alone takes ${result.failover.baseline_job_ms} ms)`,
  );
  const readyRatio = result.scale_up.median_ready_ms / result.cold_start_ms;
  const rows = [
    ["figure", "measured", "baseline", "ratio", "target", "met"],
    [
      "load step → second replica ready ÷ cold start",
      `${result.scale_up.median_ready_ms} ms`,
      `${result.cold_start_ms} ms`,
      `${readyRatio.toFixed(2)}×`,
      "≤ 0.4×",
      readyRatio <= 0.4 ? "yes" : "no",
    ],
    [
      "worker SIGKILLed → job taken by another replica",
      `${result.failover.median_picked_up_ms} ms`,
      "-",
      "-",
      "≤ 2000 ms",
      result.failover.median_picked_up_ms <= 2000 ? "yes" : "no",
    ],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((cell, i) => cell.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(
    ["", line(rows[0]!), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.slice(1).map(line)].join("\n"),
  );
  await mkdir(new URL("./results/", import.meta.url), { recursive: true });
  await writeFile(new URL("./results/scale.json", import.meta.url), `${JSON.stringify(result, null, 2)}\n`);
} finally {
  ctl.redis.disconnect();
  await stack.stop();
}
