/**
 * Metrics that move by exactly what was sent: a real gateway, worker (with its health port, so
 * its own /metrics) and batch coordinator in process against a private Redis, on the tiny model.
 * Each test scrapes the gateway's and the worker's /metrics before and after known traffic and
 * checks every histogram and counter it should move, per endpoint and version.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchCoordinator, startBatchCoordinator } from "../../src/batch/index.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { moved, type Sample, scrape, total } from "../helpers/metrics-text.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { freePort, type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const REPLICA = "tiny-metrics-1";
/** The gateway's series for what the client named and the version that served it. */
const TINY = { model_name: "tiny", version: "v1", replica: "" };
/** The worker's own series. */
const ON_WORKER = { model_name: "tiny", version: "v1", replica: REPLICA };
/** The same tiny model registered with the embed task, on a worker of its own: a model serves one task. */
const EMBED_REPLICA = "tiny-embed-metrics-1";
const TINY_EMBED = { model_name: "tiny-embed", version: "v1", replica: "" };
const ON_EMBED_WORKER = { model_name: "tiny-embed", version: "v1", replica: EMBED_REPLICA };

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
let worker: RunningWorker;
let embedWorker: RunningWorker;
let embedWorkerMetricsUrl: string;
let coordinator: BatchCoordinator;
let key: string;
let dataDir: string;
let root: string;
let workerMetricsUrl: string;

beforeAll(async () => {
  redis = await privateRedis();
  dataDir = await mkdtemp(join(tmpdir(), "platform-metrics-"));
  root = join(dataDir, "batch");
  await mkdir(root, { recursive: true });
  const settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: dataDir }),
    redisUrl: redis.url,
    storageRoots: [{ scheme: "file" as const, path: root }],
  };
  ctl = connectControl(redis.url, settings.prefix);
  key = (await createApiKey(ctl, "admin", "admin")).key;
  const modelPath = await tinyModelPath();
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny", framework: "llamacpp", source: modelPath },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny" }, resources: { parallel: 2 } }));
  const healthPort = await freePort();
  workerMetricsUrl = `http://127.0.0.1:${healthPort}/metrics`;
  worker = startWorker({
    ctl,
    endpoint: await getEndpoint(ctl, "tiny"),
    replicaId: REPLICA,
    healthPort,
    loadEngine: () => loadLlamaCpp({ modelPath, parallel: 2, threads: 1 }),
  });
  await worker.ready;
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny-embed", framework: "llamacpp", source: modelPath, task: "embed" },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny-embed" }, resources: { parallel: 1 } }));
  const embedHealthPort = await freePort();
  embedWorkerMetricsUrl = `http://127.0.0.1:${embedHealthPort}/metrics`;
  embedWorker = startWorker({
    ctl,
    endpoint: await getEndpoint(ctl, "tiny-embed"),
    replicaId: EMBED_REPLICA,
    healthPort: embedHealthPort,
    loadEngine: () => loadLlamaCpp({ modelPath, parallel: 1, threads: 1 }),
  });
  await embedWorker.ready;
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  coordinator = await startBatchCoordinator(ctl, settings);
}, 120_000);

afterAll(async () => {
  await coordinator?.stop();
  await gateway?.close();
  await worker?.drain({ deadlineMs: 0 });
  await embedWorker?.drain({ deadlineMs: 0 });
  await ctl?.redis.quit();
  await redis?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

const post = (path: string, body: unknown) =>
  fetch(`${gateway.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

async function ok<T>(res: Response): Promise<T> {
  expect(res.ok, `${res.status}: ${await res.clone().text()}`).toBe(true);
  return (await res.json()) as T;
}

type Usage = { prompt_tokens: number; completion_tokens: number };
type Snapshot = { gateway: Sample[]; worker: Sample[] };
const snapshot = async (): Promise<Snapshot> => ({
  gateway: await scrape(gateway.metricsUrl),
  worker: await scrape(workerMetricsUrl),
});

describe("request metrics", () => {
  it("non-streaming chat, completion and generate: every counter and histogram, and TTFT at the first token, not the whole answer", async () => {
    const before = await snapshot();
    const started = performance.now();
    const chat = await ok<{ usage: Usage }>(
      await post("/v1/chat/completions", {
        model: "tiny",
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 5,
        temperature: 0,
      }),
    );
    const pinned = await ok<{ usage: Usage }>(
      await post("/v1/chat/completions", {
        model: "tiny@v1",
        messages: [{ role: "user", content: "The little dog" }],
        max_tokens: 7,
        temperature: 0,
      }),
    );
    const completion = await ok<{ usage: Usage }>(
      await post("/v1/completions", { model: "tiny", prompt: "Once upon a time", max_tokens: 6, temperature: 0 }),
    );
    const generate = await ok<{ usage: Usage; version: string }>(
      await post("/v1/inference/tiny/generate", { prompt: "The cat", max_tokens: 4 }),
    );
    const wall = (performance.now() - started) / 1000;
    const after = await snapshot();
    expect(generate.version).toBe("v1");
    const answers = [chat, pinned, completion, generate];
    const g = (name: string, match: Record<string, string> = {}) =>
      moved(before.gateway, after.gateway, name, { ...TINY, source: "online", ...match });
    const w = (name: string, match: Record<string, string> = {}) =>
      moved(before.worker, after.worker, name, { ...ON_WORKER, source: "online", ...match });

    for (const count of [g, w]) {
      expect(count("platform_requests_total", { kind: "chat" })).toBe(2);
      expect(count("platform_requests_total", { kind: "completion" })).toBe(1);
      expect(count("platform_requests_total", { kind: "generate" })).toBe(1);
      expect(count("platform_request_errors_total")).toBe(0);
      // The fixture never emits EOS: every answer hit max_tokens.
      expect(count("vllm:request_success_total", { finished_reason: "length" })).toBe(4);
      expect(count("vllm:request_success_total")).toBe(4);
      expect(count("vllm:generation_tokens_total")).toBe(5 + 7 + 6 + 4);
      expect(count("vllm:prompt_tokens_total")).toBe(answers.reduce((n, a) => n + a.usage.prompt_tokens, 0));
      for (const histogram of [
        "vllm:e2e_request_latency_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
      ]) {
        expect(count(`${histogram}_count`), histogram).toBe(4);
        expect(count(`${histogram}_bucket`, { le: "+Inf" }), histogram).toBe(4);
      }
    }
    // Sums: requests one after the other fit in the time they took, and each replica's share in the gateway's.
    const e2e = g("vllm:e2e_request_latency_seconds_sum");
    expect(e2e).toBeGreaterThan(0);
    expect(e2e).toBeLessThanOrEqual(wall);
    expect(w("vllm:e2e_request_latency_seconds_sum")).toBeLessThanOrEqual(e2e);
    const ttft = g("vllm:time_to_first_token_seconds_sum");
    expect(ttft).toBeGreaterThan(0);
    expect(ttft).toBeLessThan(e2e);
    // The gateway's TTFT covers the replica's and the queue before it (same clock here: one process).
    expect(ttft + 1e-6).toBeGreaterThanOrEqual(w("vllm:time_to_first_token_seconds_sum"));
    // Non-streaming: nothing was relayed token by token at the gateway.
    expect(g("vllm:inter_token_latency_seconds_count")).toBe(0);
    // Everything is labelled with the endpoint and the version that served it, nothing left without.
    expect(total(after.gateway, "vllm:request_success_total", { model_name: "tiny", version: "" })).toBe(0);
  });

  it("one long non-streaming answer: its TTFT leaves out the time the replica spent after the first token", async () => {
    const before = await snapshot();
    await ok(await post("/v1/completions", { model: "tiny", prompt: "Once", max_tokens: 200, temperature: 0 }));
    const after = await snapshot();
    const g = (name: string) => moved(before.gateway, after.gateway, name, { ...TINY, source: "online" });
    const w = (name: string) => moved(before.worker, after.worker, name, { ...ON_WORKER, source: "online" });
    expect(g("vllm:time_to_first_token_seconds_count")).toBe(1);
    expect(g("vllm:e2e_request_latency_seconds_count")).toBe(1);
    const ttft = g("vllm:time_to_first_token_seconds_sum");
    const e2e = g("vllm:e2e_request_latency_seconds_sum");
    // The replica's own figures: from taking the job to its first token, and to its end.
    const afterFirstToken = w("vllm:e2e_request_latency_seconds_sum") - w("vllm:time_to_first_token_seconds_sum");
    expect(afterFirstToken).toBeGreaterThan(0);
    expect(ttft).toBeGreaterThan(0);
    expect(ttft).toBeLessThan(e2e);
    // Exactly the client's wait less what came after the first token (not the whole answer).
    expect(Math.abs(ttft - (e2e - afterFirstToken))).toBeLessThan(1e-6);
  });

  it("a stream: TTFT once, one inter-token gap per text delta after the first at the gateway, per engine text piece on the replica", async () => {
    const before = await snapshot();
    const res = await post("/v1/completions", {
      model: "tiny",
      prompt: "Once upon a time",
      max_tokens: 8,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const chunks = (await res.text())
      .split("\n\n")
      .map((e) => e.replace(/^data: /, ""))
      .filter((d) => d !== "" && d !== "[DONE]")
      .map((d) => JSON.parse(d) as { choices: { finish_reason: string | null }[]; usage?: Usage | null });
    const after = await snapshot();
    // Text chunks: those with no finish reason, less the opening one.
    const tokenEvents = chunks.filter((c) => c.choices[0]?.finish_reason === null).length - 1;
    expect(tokenEvents).toBeGreaterThan(1);
    const usage = chunks.at(-1)?.usage as Usage;
    const g = (name: string) => moved(before.gateway, after.gateway, name, { ...TINY, source: "online" });
    const w = (name: string) => moved(before.worker, after.worker, name, { ...ON_WORKER, source: "online" });
    // The replica sends its tokens a few to a message (src/queue/replies.ts): the gateway sees a
    // gap per delta relayed, the replica one per piece of text from the engine (8 tokens, at most 7 gaps).
    expect(g("vllm:inter_token_latency_seconds_count")).toBe(tokenEvents - 1);
    expect(w("vllm:inter_token_latency_seconds_count")).toBeGreaterThanOrEqual(tokenEvents - 1);
    expect(w("vllm:inter_token_latency_seconds_count")).toBeLessThanOrEqual(7);
    for (const count of [g, w]) {
      expect(count("vllm:time_to_first_token_seconds_count")).toBe(1);
      expect(count("vllm:e2e_request_latency_seconds_count")).toBe(1);
      expect(count("vllm:generation_tokens_total")).toBe(8);
      expect(count("vllm:prompt_tokens_total")).toBe(usage.prompt_tokens);
    }
    expect(g("vllm:inter_token_latency_seconds_sum")).toBeLessThan(g("vllm:e2e_request_latency_seconds_sum"));
  });

  it("embeddings are counted: prompt tokens, latency, success, on the gateway and the replica", async () => {
    const embedSnapshot = async (): Promise<Snapshot> => ({
      gateway: await scrape(gateway.metricsUrl),
      worker: await scrape(embedWorkerMetricsUrl),
    });
    const before = await embedSnapshot();
    const res = await ok<{ usage: { prompt_tokens: number }; data: unknown[] }>(
      await post("/v1/embeddings", { model: "tiny-embed", input: ["Once upon a time", "The little dog"] }),
    );
    const after = await embedSnapshot();
    expect(res.data).toHaveLength(2);
    const g = (name: string, match: Record<string, string> = {}) =>
      moved(before.gateway, after.gateway, name, { ...TINY_EMBED, source: "online", ...match });
    const w = (name: string, match: Record<string, string> = {}) =>
      moved(before.worker, after.worker, name, { ...ON_EMBED_WORKER, source: "online", ...match });
    for (const count of [g, w]) {
      expect(count("platform_requests_total", { kind: "embedding" })).toBe(1);
      expect(count("vllm:request_success_total", { finished_reason: "stop" })).toBe(1);
      expect(count("vllm:prompt_tokens_total")).toBe(res.usage.prompt_tokens);
      expect(count("vllm:generation_tokens_total")).toBe(0);
      expect(count("vllm:e2e_request_latency_seconds_count")).toBe(1);
      expect(count("vllm:request_queue_time_seconds_count")).toBe(1);
      // No token is generated: no time to a first one.
      expect(count("vllm:time_to_first_token_seconds_count")).toBe(0);
    }
  });

  it("errors by code and status: routed ones under their endpoint and version, the others with empty labels", async () => {
    const before = await snapshot();
    const tooLong = await post("/v1/chat/completions", {
      model: "tiny",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 100_000,
    });
    expect(tooLong.status).toBe(400);
    const unknown = await post("/v1/chat/completions", { model: "nope", messages: [{ role: "user", content: "hi" }] });
    expect(unknown.status).toBe(404);
    const badJson = await post("/v1/completions", "{not json");
    expect(badJson.status).toBe(400);
    const after = await snapshot();
    const g = (name: string, match: Record<string, string>) =>
      moved(before.gateway, after.gateway, name, { source: "online", ...match });
    expect(
      g("platform_request_errors_total", { ...TINY, kind: "chat", code: "context_length_exceeded", status: "400" }),
    ).toBe(1);
    expect(
      g("platform_request_errors_total", {
        model_name: "",
        version: "",
        kind: "chat",
        code: "model_not_found",
        status: "404",
      }),
    ).toBe(1);
    expect(
      g("platform_request_errors_total", {
        model_name: "",
        version: "",
        kind: "completion",
        code: "invalid_json",
        status: "400",
      }),
    ).toBe(1);
    expect(g("platform_request_errors_total", {})).toBe(3);
    // Every error is an answered request too (the error ratio's denominator).
    expect(g("platform_requests_total", {})).toBe(3);
    expect(g("vllm:request_success_total", {})).toBe(0);
    // None of them reached the replica.
    expect(moved(before.worker, after.worker, "platform_requests_total")).toBe(0);
  });
});

describe("batch metrics", () => {
  it("a batch job's records are counted as batch where they complete, and its progress is reported", async () => {
    const before = await snapshot();
    const input = join(root, "in.jsonl");
    await writeFile(
      input,
      [
        '{"id":"a","prompt":"Once upon a time","max_tokens":3}',
        "{not json",
        '{"id":"b","prompt":"The little dog","max_tokens":4}',
        "",
      ].join("\n"),
    );
    const created = await ok<{ id: string }>(
      await post("/v1/batch-jobs", {
        model: "tiny",
        version: "v1",
        input: pathToFileURL(input).href,
        output: pathToFileURL(join(root, "out.jsonl")).href,
        concurrency: 2,
      }),
    );
    const state = async () => {
      const job = await fetch(`${gateway.url}/v1/batch-jobs/${created.id}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      return ((await job.json()) as { state: string }).state;
    };
    await expect.poll(state, { timeout: 60_000 }).toMatch(/^(completed|failed|cancelled)$/);
    expect(await state()).toBe("completed");
    const after = await snapshot();
    const g = (name: string, match: Record<string, string> = {}) =>
      moved(before.gateway, after.gateway, name, { ...TINY, source: "batch", ...match });
    const w = (name: string, match: Record<string, string> = {}) =>
      moved(before.worker, after.worker, name, { ...ON_WORKER, source: "batch", ...match });
    // The bad line never reaches a model: two records were answered.
    for (const count of [g, w]) {
      expect(count("platform_requests_total", { kind: "batch_record" })).toBe(2);
      expect(count("vllm:request_success_total", { finished_reason: "length" })).toBe(2);
      expect(count("vllm:generation_tokens_total")).toBe(3 + 4);
      expect(count("vllm:e2e_request_latency_seconds_count")).toBe(2);
      expect(count("vllm:time_to_first_token_seconds_count")).toBe(2);
      expect(count("vllm:request_queue_time_seconds_count")).toBe(2);
    }
    expect(g("vllm:time_to_first_token_seconds_sum")).toBeLessThan(g("vllm:e2e_request_latency_seconds_sum"));
    // Nothing of it counted as online.
    expect(moved(before.gateway, after.gateway, "platform_requests_total", { source: "online" })).toBe(0);
    // Progress, read from the job records at scrape time.
    expect(total(after.gateway, "platform_batch_jobs", { state: "completed" })).toBe(1);
    expect(total(after.gateway, "platform_batch_jobs", { state: "running" })).toBe(0);
    const records = (outcome: string) =>
      total(after.gateway, "platform_batch_records", { state: "completed", outcome });
    expect([records("total"), records("succeeded"), records("failed"), records("in_flight")]).toEqual([3, 2, 1, 0]);
  });
});

describe("platform gauges", () => {
  it("queue depth and replicas per endpoint version on the gateway; running and waiting sequences on the replica", async () => {
    const { gateway: g, worker: w } = await snapshot();
    expect(total(g, "platform_replicas_ready", TINY)).toBe(1);
    expect(total(g, "platform_replicas_desired", TINY)).toBe(1);
    expect(total(g, "vllm:num_requests_waiting", TINY)).toBe(0);
    expect(total(g, "vllm:num_requests_running", TINY)).toBe(0);
    expect(
      g.some(
        (s) => s.name === "platform_replicas_ready" && s.labels.model_name === "tiny" && s.labels.version === "v1",
      ),
    ).toBe(true);
    expect(w.filter((s) => s.name === "vllm:num_requests_running").map((s) => s.labels)).toEqual([ON_WORKER]);
    expect(total(w, "vllm:num_requests_running", ON_WORKER)).toBe(0);
    expect(total(w, "vllm:num_requests_waiting", ON_WORKER)).toBe(0);
  });
});
