/**
 * Evaluations of a `framework: vllm` version: perplexity and accuracy read prompt scores (echo with
 * logprobs), which the vLLM engine maps onto vLLM's echo without generation. A real gateway, queue,
 * evaluation coordinator and worker run in this process; the worker's engine starts the fake
 * `vllm serve` (test/helpers/fake-vllm.ts: vLLM's field shapes, a made-up model whose prompt-token
 * scores are `fakeLogprob`), so the numbers are checked against those scores, not a real model's:
 * there is no GPU and no vLLM here.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type EvaluationCoordinator, startEvaluationCoordinator } from "../../src/evaluation/index.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { loadVllm } from "../../workers/engines/vllm.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { fakeLogprob, fakePieces, fakeVllmPath, writeFakeVllmBin } from "../helpers/fake-vllm.ts";
import { privateRedis } from "../helpers/redis.ts";

let redis: Awaited<ReturnType<typeof privateRedis>>;
let dir: string;
let storage: string;
let record: string;
let ctl: Control;
let key: string;
let gateway: RunningGateway;
let worker: RunningWorker;
let coordinator: EvaluationCoordinator;

beforeAll(async () => {
  redis = await privateRedis();
  dir = await mkdtemp(join(tmpdir(), "vllm-evaluation-"));
  storage = join(dir, "storage");
  await mkdir(storage);
  const bin = await writeFakeVllmBin(dir);
  record = join(dir, "record.json");
  const settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: dir, PLATFORM_STORAGE_ROOTS: storage }),
    redisUrl: redis.url,
  };
  ctl = connectControl(redis.url, settings.prefix);
  key = (await createApiKey(ctl, "admin", "admin")).key;
  // vLLM reads a checkpoint directory or a file; the fake only needs a path that exists.
  const weights = join(dir, "model.safetensors");
  await writeFile(weights, "weights");
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") },
    { name: "vl", framework: "vllm", source: weights },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "vl" }, resources: { parallel: 4 } }));
  const endpoint = await getEndpoint(ctl, "vl");
  worker = startWorker({
    ctl,
    endpoint,
    replicaId: "vl-eval-1",
    loadEngine: () =>
      loadVllm({
        modelPath: weights,
        servedName: endpoint.name,
        runtime: endpoint.config.runtime,
        resources: endpoint.config.resources,
        bin,
        env: { FAKE_VLLM_RECORD: record, PATH: fakeVllmPath() },
        log: () => undefined,
      }),
  });
  await worker.ready;
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  coordinator = await startEvaluationCoordinator(ctl, settings);
}, 60_000);

afterAll(async () => {
  await coordinator?.stop();
  await gateway?.close();
  await worker?.drain({ deadlineMs: 0 });
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

type Evaluation = {
  id: string;
  state: string;
  metric: string;
  result: { value: number; n: number; tokens?: number; boundary_merges?: number } | null;
  error: { code: string; message: string } | null;
};

async function api<T>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

async function evaluate(name: string, lines: unknown[]): Promise<Evaluation> {
  const path = join(storage, name);
  await writeFile(path, `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);
  const created = await api<Evaluation>("POST", "/admin/v1/evaluations", { model: "vl@v1", dataset: path });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const evaluation = async () => (await api<Evaluation>("GET", `/admin/v1/evaluations/${created.body.id}`)).body;
  await expect
    .poll(async () => (await evaluation()).state, { timeout: 60_000, message: `evaluation ${created.body.id}` })
    .toMatch(/^(succeeded|failed|cancelled)$/);
  return evaluation();
}

/** The fake model's log-likelihood of a text's tokens, each given the ones before it (the first given BOS). */
function loglikelihood(text: string): number {
  return fakePieces(text).reduce((s, piece) => s + fakeLogprob(piece), 0);
}

async function completionBodies(): Promise<Record<string, unknown>[]> {
  const text = await readFile(`${record}.requests.jsonl`, "utf8");
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { path?: string; body?: Record<string, unknown> })
    .filter((r) => r.path === "/v1/completions")
    .map((r) => r.body ?? {});
}

describe("evaluations of a vLLM version (against the fake vllm serve)", () => {
  it("computes perplexity from vLLM's echoed prompt scores, BOS not predicted", async () => {
    const texts = ["Once upon a time there was a fox.", "The little dog ran to the park.", "Hello"];
    const e = await evaluate(
      "texts.jsonl",
      texts.map((text) => ({ text })),
    );
    expect(e.state, JSON.stringify(e.error)).toBe("succeeded");
    expect(e.metric).toBe("perplexity");
    const tokens = texts.reduce((n, t) => n + fakePieces(t).length, 0);
    const nll = -texts.reduce((s, t) => s + loglikelihood(t), 0);
    expect(e.result?.n).toBe(texts.length);
    // Every text token is predicted (the first given the BOS vLLM put before it); BOS itself is not.
    expect(e.result?.tokens).toBe(tokens);
    expect(e.result?.value).toBeCloseTo(Math.exp(nll / tokens), 10);
    // Each line went to vLLM as its echo without generation.
    const scored = (await completionBodies()).filter((b) => b.echo === true);
    expect(scored.map((b) => b.prompt).sort()).toEqual([...texts].sort());
    for (const b of scored)
      expect(b).toEqual({ model: "vl", prompt: b.prompt, echo: true, max_tokens: 0, logprobs: 0 });
  }, 60_000);

  it("scores multiple choice from the continuations' summed log-likelihoods", async () => {
    const items: { context: string; choices: string[]; answer: number }[] = [
      { context: "The cat sat on the", choices: [" mat", " wonderful sofa", " bed"], answer: 0 },
      { context: "Ben found a shiny", choices: [" rock", " coin", " key"], answer: 0 },
      { context: "They were very ", choices: ["tired", "happy together", "hungry"], answer: 0 },
    ];
    const e = await evaluate("questions.jsonl", items);
    expect(e.state, JSON.stringify(e.error)).toBe("succeeded");
    expect(e.metric).toBe("accuracy");
    const right = items.filter((item) => {
      // lm-eval's rule: the context's trailing whitespace belongs to the continuation.
      const context = item.context.trimEnd();
      const lls = item.choices.map(
        (c) => loglikelihood(context + item.context.slice(context.length) + c) - loglikelihood(context),
      );
      return lls.indexOf(Math.max(...lls)) === item.answer;
    }).length;
    // The fake's scores make some answers right and some wrong, so the value says which were read.
    expect(right).toBeGreaterThan(0);
    expect(right).toBeLessThan(items.length);
    expect(e.result?.value).toBeCloseTo(right / items.length, 10);
    expect(e.result?.boundary_merges).toBe(0);
  }, 60_000);
});
