/**
 * Platform batch jobs (`/v1/batch-jobs`, `platform inference batch`) naming
 * `model: "<endpoint>:<adapter>"`, as OpenAI batch lines do (docs/batch.md, docs/adapters.md): every
 * record runs with the adapter's newest version for the endpoint's version. A real gateway, queue,
 * batch coordinator and worker run in this process; the worker's engine is the vLLM engine on the
 * fake `vllm serve` (test/helpers/fake-vllm.ts), whose adapters answer "[<name>@<version>]" first,
 * so each output line says which adapter produced it. The adapter is a real PEFT directory of the
 * suite's tiny Llama checkpoint, registered through the registry (checked against the base).
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchCoordinator, startBatchCoordinator } from "../../src/batch/coordinator.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { endpointQueueName } from "../../src/contracts/engines.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { registerAdapter } from "../../src/models/import.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { adapterCacheDir, ReplicaAdapters } from "../../workers/adapters.ts";
import { loadVllm } from "../../workers/engines/vllm.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { STORY, fakeVllmPath, writeFakeVllmBin } from "../helpers/fake-vllm.ts";
import { privateRedis } from "../helpers/redis.ts";
import { writeSafetensors } from "../helpers/safetensors.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");

let redis: Awaited<ReturnType<typeof privateRedis>>;
let dir: string;
let storage: string;
let ctl: Control;
let key: string;
let gateway: RunningGateway;
let worker: RunningWorker;
let coordinator: BatchCoordinator;

/** A rank-4 PEFT LoRA adapter of the tiny Llama's layer-0 v_proj ([16, 64]). */
async function writeAdapter(path: string): Promise<void> {
  await mkdir(path, { recursive: true });
  await writeFile(
    join(path, "adapter_config.json"),
    JSON.stringify({ peft_type: "LORA", r: 4, lora_alpha: 8, target_modules: ["v_proj"], bias: "none" }),
  );
  const values = (n: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 0.1);
  const w = "base_model.model.model.layers.0.self_attn.v_proj";
  await writeSafetensors(join(path, "adapter_model.safetensors"), [
    { name: `${w}.lora_A.weight`, shape: [4, 64], data: values(4 * 64) },
    { name: `${w}.lora_B.weight`, shape: [16, 4], data: values(16 * 4) },
  ]);
}

beforeAll(async () => {
  redis = await privateRedis();
  dir = await mkdtemp(join(tmpdir(), "batch-adapter-"));
  storage = join(dir, "storage");
  await mkdir(storage);
  const bin = await writeFakeVllmBin(dir);
  const settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: join(dir, "data"), PLATFORM_STORAGE_ROOTS: storage }),
    redisUrl: redis.url,
  };
  ctl = connectControl(redis.url, settings.prefix);
  key = (await createApiKey(ctl, "admin", "admin")).key;
  const store = openStore(settings.artifactsUrl);
  const deps = { ctl, artifacts: store, scratchDir: join(dir, "tmp") };
  const model = await importModel(deps, { name: "vl", framework: "vllm", source: CHECKPOINT });
  const adapterDir = join(dir, "sql-adapter");
  await writeAdapter(adapterDir);
  await registerAdapter(deps, { name: "sql", base: { name: "vl", version: model.version }, dir: adapterDir });
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "vl" }, resources: { parallel: 4 } }));
  const endpoint = await getEndpoint(ctl, "vl");
  const adapters = new ReplicaAdapters({
    ctl,
    store,
    cacheDir: adapterCacheDir(join(dir, "data")),
    replicaId: "vl-batch-1",
    endpoint,
    model,
    modelPath: () => CHECKPOINT,
  });
  worker = startWorker({
    ctl,
    endpoint,
    replicaId: "vl-batch-1",
    adapters,
    loadEngine: () =>
      loadVllm({
        modelPath: CHECKPOINT,
        servedName: endpoint.name,
        runtime: endpoint.config.runtime,
        resources: endpoint.config.resources,
        lora: true,
        bin,
        env: { PATH: fakeVllmPath() },
        log: () => undefined,
      }),
  });
  await worker.ready;
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  coordinator = await startBatchCoordinator(ctl, settings);
}, 60_000);

afterAll(async () => {
  await coordinator?.stop();
  await gateway?.close();
  await worker?.drain({ deadlineMs: 0 });
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

type Job = {
  id: string;
  state: string;
  model: string;
  version: string;
  adapter?: string;
  output_file: string | null;
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

const PROMPTS = ["Once", "Tell me a story", "Hello"];

async function input(): Promise<string> {
  const path = join(storage, "in.jsonl");
  await writeFile(
    path,
    `${PROMPTS.map((prompt, i) => JSON.stringify({ id: `r${i}`, prompt, max_tokens: 3 })).join("\n")}\n`,
  );
  return path;
}

async function run(body: Record<string, unknown>): Promise<{ job: Job; outputs: string[] }> {
  const created = await api<Job>("POST", "/v1/batch-jobs", body);
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const current = async () => (await api<Job>("GET", `/v1/batch-jobs/${created.body.id}`)).body;
  await expect.poll(async () => (await current()).state, { timeout: 60_000 }).toMatch(/^(completed|failed|cancelled)$/);
  const job = await current();
  expect(job.state, JSON.stringify(job.error)).toBe("completed");
  const lines = (await readFile(fileURLToPath(job.output_file as string), "utf8")).trimEnd().split("\n");
  return { job, outputs: lines.map((l) => (JSON.parse(l) as { output: string }).output) };
}

describe("platform batch jobs naming <endpoint>:<adapter>", () => {
  it("run every record with the adapter's newest version for the endpoint's version", async () => {
    const { job, outputs } = await run({ model: "vl:sql", input: await input(), output: join(storage, "sql/") });
    expect(job).toMatchObject({ model: "vl", version: "v1", adapter: "sql@v1" });
    // The fake's adapter answers say whose they are: "[sql@v1]" is the first of the three tokens.
    expect(outputs).toEqual(PROMPTS.map(() => `[sql@v1]${STORY.slice(0, 2).join("")}`));
  }, 60_000);

  it("run the base when the model names no adapter", async () => {
    const { job, outputs } = await run({ model: "vl", input: await input(), output: join(storage, "base/") });
    expect(job.adapter).toBeUndefined();
    expect(outputs).toEqual(PROMPTS.map(() => STORY.slice(0, 3).join("")));
  }, 60_000);

  it("refuse an unknown adapter, another version than the endpoint's, and a malformed name", async () => {
    const path = await input();
    const output = join(storage, "refused/");
    const unknown = await api<{ error: { code: string; message: string } }>("POST", "/v1/batch-jobs", {
      model: "vl:nope",
      input: path,
      output,
    });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe("model_not_found");
    expect(unknown.body.error.message).toContain("platform training submit --name nope --base vl@v1");
    const version = await api<{ error: { param: string; message: string } }>("POST", "/v1/batch-jobs", {
      model: "vl:sql",
      version: "v7",
      input: path,
      output,
    });
    expect(version.status).toBe(400);
    expect(version.body.error).toMatchObject({ param: "version" });
    expect(version.body.error.message).toContain("vl:sql runs on the version the endpoint vl serves (vl@v1)");
    const malformed = await api<{ error: { param: string; message: string } }>("POST", "/v1/batch-jobs", {
      model: "vl:sql:x",
      input: path,
      output,
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body.error).toMatchObject({ param: "model" });
    expect(malformed.body.error.message).toContain('"<endpoint>:<adapter>"');
  });
});

describe("a job naming an adapter for work no adapter changes", () => {
  it("is refused by the replica, in the words the embeddings route uses (src/contracts/job.ts)", async () => {
    const endpoint = await getEndpoint(ctl, "vl");
    const queues = new QueueBase(ctl);
    try {
      // A producer enqueueing directly (docs/queue-contract.md): the gateway's route is not there to refuse it.
      const queue = queues.queueNamed(endpointQueueName(endpoint));
      const job = await queue.add("embedding", {
        v: 1,
        kind: "embedding",
        request_id: "embed-with-adapter",
        model: "vl",
        version: endpoint.version,
        input: ["Once"],
        adapter: "sql@v1",
      });
      await expect
        .poll(async () => (await queue.getJob(job.id as string))?.failedReason, { timeout: 30_000 })
        .toBeTruthy();
      const reason = (await queue.getJob(job.id as string))?.failedReason as string;
      expect(JSON.parse(reason)).toMatchObject({
        status: 400,
        code: "invalid_request",
        param: "adapter",
        message: "LoRA adapters apply to text generation (chat, completions), not to embeddings",
      });
    } finally {
      await queues.close();
    }
  });
});
