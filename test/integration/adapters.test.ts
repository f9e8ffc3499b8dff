/**
 * LoRA adapters end to end (docs/adapters.md): three seeded PEFT adapters of the suite's tiny Llama
 * checkpoint (scripts/reference/make-lora.py) and the checkpoint itself are registered through the
 * registry's upload route (as `training submit` sends them), one endpoint with one float32
 * replica serves all four, and requests for them interleaved and concurrent each answer, token
 * for token, what transformers + peft answer. With `runtime.max_loras` 2 the replica keeps at
 * most two adapter contexts, evicting the least recently used, and still answers every adapter.
 * Also: adapters refused at registration with their reason, routing's 404s, /v1/models, and who may register.
 */
import { spawnSync } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startBatchCoordinator } from "../../src/batch/coordinator.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { connectControl, type Control } from "../../src/redis/connection.ts";
import { registerAdapter } from "../../src/models/import.ts";
import { writeTar } from "../../src/models/tar.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { resolveModelVersion } from "../../src/models/versions.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { adapterCacheDir, ReplicaAdapters } from "../../workers/adapters.ts";
import type { Engine } from "../../workers/engines/engine.ts";
import { loadEngine } from "../../workers/engines/index.ts";
import type { AdapterLanes } from "../../workers/engines/llamacpp-adapters.ts";
import { modelFile } from "../../workers/weights.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { referencePython } from "../helpers/models.ts";
import { privateRedis } from "../helpers/redis.ts";
import { serveFloat32Checkpoint } from "../helpers/float32-checkpoint.ts";
import { runCli } from "../helpers/stack.ts";
import { writeSafetensors } from "../helpers/safetensors.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");
const python = referencePython();
const skip = python === undefined ? "the reference venv (.venv-ref, scripts/reference/setup.sh) is absent" : undefined;
if (skip) console.warn(`adapters.test.ts skipped: ${skip}`);

type Reference = {
  prompts: number[][];
  new_tokens: number;
  scored_ids: number[];
  base: { outputs: number[][]; min_gap: number; logprobs: number[] };
  adapters: Record<string, { dir: string; outputs: number[][]; min_gap: number; logprobs: number[] }>;
};

const ADAPTERS = ["a1", "a2", "a3"] as const;
let work: string;
let reference: Reference;
let redis: Awaited<ReturnType<typeof privateRedis>>;
let ctl: Control;
let gateway: RunningGateway;
let worker: RunningWorker;
let engine: Engine;
let key: string;
let userKey: string;
let otherOrgAdmin: string;
let detokenize: (ids: number[]) => string;
let artifactsUrl: string;
let dataDirectory: string;
let disposeModel: () => Promise<void>;

async function upload(
  name: string,
  dir: string,
  files: string[],
  query: Record<string, string> = {},
  auth = key,
): Promise<Response> {
  const q = new URLSearchParams({ framework: "llamacpp", source: dir, ...query });
  const chunks: Buffer[] = [];
  for await (const chunk of writeTar(dir, files) as AsyncIterable<Buffer>) chunks.push(chunk);
  return fetch(`${gateway.url}/admin/v1/models/${name}/upload?${q}`, {
    method: "POST",
    headers: { authorization: `Bearer ${auth}`, "content-type": "application/x-tar" },
    body: Buffer.concat(chunks),
  });
}

const ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"];

const post = (path: string, body: unknown) =>
  fetch(`${gateway.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

async function complete(model: string, prompt: number[]): Promise<{ text: string; tokens: number }> {
  const res = await post("/v1/completions", { model, prompt, max_tokens: reference.new_tokens, temperature: 0 });
  expect(res.status, await res.clone().text()).toBe(200);
  const body = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
  return { text: body.choices[0]!.text, tokens: body.usage.completion_tokens };
}

beforeAll(async () => {
  if (skip) return;
  work = await mkdtemp(join(tmpdir(), "platform-adapters-"));
  const made = spawnSync(python as string, [join(repoRoot, "scripts", "reference", "make-lora.py"), CHECKPOINT, work], {
    encoding: "utf8",
    timeout: 300_000,
  });
  if (made.status !== 0) throw new Error(`make-lora.py failed: ${made.stderr}`);
  reference = JSON.parse(made.stdout) as Reference;

  redis = await privateRedis();
  const dataDir = join(work, "data");
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  artifactsUrl = settings.artifactsUrl;
  dataDirectory = dataDir;
  key = (await createApiKey(ctl, "admin", "admin")).key;
  userKey = (await createApiKey(ctl, "user", "user")).key;
  await createOrg(ctl, "other");
  otherOrgAdmin = (await createApiKey(ctl, "other-admin", "admin", undefined, "other")).key;
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });

  const base = await upload("tiny", CHECKPOINT, [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
  ]);
  expect(base.status, await base.clone().text()).toBe(201);
  for (const name of ADAPTERS) {
    const res = await upload(name, reference.adapters[name]!.dir, ADAPTER_FILES, { base: "tiny@v1" });
    expect(res.status, await res.clone().text()).toBe(201);
  }

  await deployEndpoint(
    ctl,
    DeploymentConfig.parse({
      model: { name: "tiny" },
      runtime: { dtype: "float32", max_loras: 2 },
      resources: { parallel: 4, cpu: 1 },
    }),
  );
  const endpoint = await getEndpoint(ctl, "tiny");
  const model = await resolveModelVersion(ctl, "tiny", "v1");
  let modelPath = "";
  worker = startWorker({
    ctl,
    endpoint,
    replicaId: "tiny-adapters-1",
    adapters: new ReplicaAdapters({
      ctl,
      store: openStore(settings.artifactsUrl),
      cacheDir: adapterCacheDir(dataDir),
      replicaId: "tiny-adapters-1",
      endpoint,
      model,
      modelPath: () => modelPath,
    }),
    loadEngine: async (describe) => {
      modelPath = await modelFile(settings, ctl, endpoint, model, "tiny-adapters-1", describe);
      engine = await loadEngine(endpoint, modelPath);
      return engine;
    },
  });
  await worker.ready;
  // transformers' ids as text, through the converted model's own vocabulary.
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const tokenizer = await llama.loadModel({ modelPath, vocabOnly: true });
  detokenize = (ids) => tokenizer.detokenize(ids as Token[]);
  disposeModel = () => tokenizer.dispose();
}, 600_000);

afterAll(async () => {
  if (skip) return;
  await disposeModel?.();
  await gateway?.close();
  await worker?.drain({ deadlineMs: 0 });
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(work, { recursive: true, force: true });
});

describe.skipIf(skip !== undefined)("LoRA adapters on one replica", () => {
  it("registers adapters with their base, rank, alpha and target modules", async () => {
    const res = await fetch(`${gateway.url}/admin/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = (await res.json()) as { data: RegisteredVersion[] };
    const a2 = data.find((m) => m.name === "a2")!;
    expect(a2.kind).toBe("adapter");
    expect(a2.adapter).toEqual({
      base: { name: "tiny", version: "v1" },
      peft_type: "LORA",
      rank: 8,
      alpha: 16,
      target_modules: ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj"],
      parameters: expect.any(Number),
    });
    expect(a2.manifest!.map((f) => f.path)).toEqual(ADAPTER_FILES);
    expect(data.find((m) => m.name === "a3")!.adapter!.target_modules).toEqual(["down_proj", "k_proj", "up_proj"]);
  });

  it("serves the base and three adapters interleaved and concurrently, each token for token as transformers + peft", async () => {
    // Each adapter changes the greedy output: otherwise this would prove nothing about the adapter.
    // And no step is a near tie (float noise between llama.cpp and torch is ~1e-5 of a logit).
    for (const name of ADAPTERS) {
      for (const [i, out] of reference.adapters[name]!.outputs.entries())
        expect(out).not.toEqual(reference.base.outputs[i]);
      expect(reference.adapters[name]!.min_gap).toBeGreaterThan(1e-3);
    }
    expect(reference.base.min_gap).toBeGreaterThan(1e-3);
    const cases = reference.prompts.flatMap((prompt, i) => [
      { model: "tiny", prompt, want: reference.base.outputs[i]! },
      ...ADAPTERS.map((a) => ({ model: `tiny:${a}`, prompt, want: reference.adapters[a]!.outputs[i]! })),
    ]);
    // Twice over, the second round in reverse: adapters evicted by the first (max_loras 2) load again.
    for (const round of [cases, [...cases].reverse()]) {
      const answers = await Promise.all(round.map((c) => complete(c.model, c.prompt)));
      for (const [i, c] of round.entries()) {
        expect(answers[i]!.tokens, c.model).toBe(reference.new_tokens);
        expect(answers[i]!.text, `${c.model} on prompt ${JSON.stringify(c.prompt)}`).toBe(detokenize(c.want));
      }
    }
    // The bound held: never more than max_loras adapter contexts.
    const lanes = (engine as unknown as { adapters: AdapterLanes }).adapters;
    expect(lanes.loaded().length).toBeLessThanOrEqual(2);
    expect(lanes.loaded().length).toBeGreaterThan(0);
    // Three adapters through two contexts, twice: loaded again after being evicted.
    const stats = engine.adapterStats!();
    expect(stats.loads).toBeGreaterThan(3);
    expect(stats.evictions).toBe(stats.loads - stats.loaded);
    // `status` shows what the replica holds loaded, from its heartbeat.
    const adapters = async () => {
      const res = await fetch(`${gateway.url}/admin/v1/endpoints/tiny`, {
        headers: { authorization: `Bearer ${key}` },
      });
      return ((await res.json()) as { adapters: string[] }).adapters;
    };
    await expect.poll(async () => (await adapters()).length, { timeout: 30_000 }).toBeGreaterThan(0);
    const shown = await adapters();
    expect(shown.length).toBeGreaterThan(0);
    expect(shown.length).toBeLessThanOrEqual(2);
    for (const a of shown) expect(["a1@v1", "a2@v1", "a3@v1"]).toContain(a);
  });

  it("scores a prompt under each adapter as transformers + peft does (echo with logprobs, what evaluation uses)", async () => {
    for (const [model, want] of [
      ["tiny", reference.base.logprobs],
      ...ADAPTERS.map((a) => [`tiny:${a}`, reference.adapters[a]!.logprobs] as const),
    ] as const) {
      const res = await post("/v1/completions", {
        model,
        prompt: reference.scored_ids,
        max_tokens: 0,
        echo: true,
        logprobs: 0,
        temperature: 0,
      });
      expect(res.status, await res.clone().text()).toBe(200);
      const lp = ((await res.json()) as { choices: { logprobs: { token_logprobs: (number | null)[] } }[] }).choices[0]!
        .logprobs.token_logprobs;
      const got = lp.slice(lp.length - want.length) as number[];
      expect(got).toHaveLength(want.length);
      for (const [i, x] of got.entries())
        expect(Math.abs(x - want[i]!), `${model} token ${i}`).toBeLessThanOrEqual(1e-3);
    }
    expect(reference.adapters.a1!.logprobs).not.toEqual(reference.base.logprobs);
  });

  it("streams an adapter's chat answer and counts its usage under <endpoint>:<adapter>", async () => {
    const res = await post("/v1/chat/completions", {
      model: "tiny:a1",
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 4,
      temperature: 0,
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const metrics = await (await fetch(gateway.metricsUrl)).text();
    expect(metrics).toMatch(/vllm:generation_tokens_total\{[^}]*model_name="tiny:a1"/);
    const usage = await fetch(`${gateway.url}/v1/usage?by=model`, { headers: { authorization: `Bearer ${key}` } });
    expect(usage.status).toBe(200);
    expect(JSON.stringify(await usage.json())).toContain('"model":"tiny:a1"');
  });

  it("the generate route takes <endpoint>:<adapter> too, answering as completions does", async () => {
    const body = { prompt: "Once upon a time", max_tokens: 6, temperature: 0 };
    const generated = await post("/v1/inference/tiny:a3/generate", body);
    expect(generated.status, await generated.clone().text()).toBe(200);
    const completed = await post("/v1/completions", { model: "tiny:a3", ...body });
    const base = await post("/v1/completions", { model: "tiny", ...body });
    const text = ((await completed.json()) as { choices: { text: string }[] }).choices[0]!.text;
    expect(((await generated.json()) as { output: string }).output).toBe(text);
    expect(((await base.json()) as { choices: { text: string }[] }).choices[0]!.text).not.toBe(text);
  });

  it("an OpenAI batch of <endpoint>:<adapter> requests runs every record with the adapter (official client)", async () => {
    const coordinator = await startBatchCoordinator(ctl, {
      ...loadSettings({ PLATFORM_DATA_DIR: dataDirectory }),
      redisUrl: redis.url,
    });
    try {
      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 });
      const lines = reference.prompts.map((prompt, i) =>
        JSON.stringify({
          custom_id: `p${i}`,
          method: "POST",
          url: "/v1/completions",
          body: { model: "tiny:a2", prompt, max_tokens: reference.new_tokens, temperature: 0 },
        }),
      );
      const file = await client.files.create({
        file: await toFile(Buffer.from(lines.join("\n")), "a2.jsonl"),
        purpose: "batch",
      });
      const created = await client.batches.create({
        input_file_id: file.id,
        endpoint: "/v1/completions",
        completion_window: "24h",
      });
      await expect
        .poll(async () => (await client.batches.retrieve(created.id)).status, { timeout: 60_000 })
        .toMatch(/^(completed|failed|cancelled|expired)$/);
      const batch = await client.batches.retrieve(created.id);
      expect(batch.status, JSON.stringify(batch)).toBe("completed");
      expect(batch.request_counts).toMatchObject({ total: 3, completed: 3, failed: 0 });
      const output = (await (await client.files.content(batch.output_file_id as string)).text())
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as { custom_id: string; response: { body: { choices: { text: string }[] } } });
      for (const line of output) {
        const i = Number(line.custom_id.slice(1));
        expect(line.response.body.choices[0]!.text).toBe(detokenize(reference.adapters.a2!.outputs[i]!));
      }
      const unknown = await client.files.create({
        file: await toFile(Buffer.from(lines[0]!.replace("tiny:a2", "tiny:nope")), "nope.jsonl"),
        purpose: "batch",
      });
      const refused = await client.batches
        .create({ input_file_id: unknown.id, endpoint: "/v1/completions", completion_window: "24h" })
        .catch((e: unknown) => e);
      expect((refused as { status?: number }).status).toBe(404);
    } finally {
      await coordinator.stop();
    }
  });

  it("lists adapters in /v1/models as <endpoint>:<adapter>, and retrieves one", async () => {
    const res = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    const ids = ((await res.json()) as { data: { id: string }[] }).data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(["tiny", "tiny:a1", "tiny:a2", "tiny:a3"]));
    const one = await fetch(`${gateway.url}/v1/models/tiny:a2`, { headers: { authorization: `Bearer ${key}` } });
    expect(one.status).toBe(200);
    expect(((await one.json()) as { id: string }).id).toBe("tiny:a2");
  });

  it("answers 404 naming the fix for an unknown adapter, and for an adapter of another base", async () => {
    const res = await post("/v1/completions", { model: "tiny:nope", prompt: "Once", max_tokens: 2 });
    expect(res.status).toBe(404);
    const err = ((await res.json()) as { error: { message: string; code: string } }).error;
    expect(err.code).toBe("model_not_found");
    expect(err.message).toContain("platform training submit --name nope --base tiny@v1");
    const ghost = await post("/v1/completions", { model: "ghost:a1", prompt: "Once", max_tokens: 2 });
    expect(ghost.status).toBe(404);
  });

  it("refuses at registration: no base, an unknown base, not LoRA, a target module the base lacks, a shape mismatch", async () => {
    const a1 = reference.adapters.a1!.dir;
    const noBase = await upload("bad", a1, ADAPTER_FILES);
    expect(noBase.status).toBe(400);
    expect(await noBase.text()).toContain("--base <model>@<version>");

    const unknown = await upload("bad", a1, ADAPTER_FILES, { base: "tiny@v9" });
    expect(unknown.status).toBe(400);
    expect(await unknown.text()).toContain("tiny@v9 is not a registered version");

    const ia3 = join(work, "ia3");
    await cp(a1, ia3, { recursive: true });
    const config = JSON.parse(await readFile(join(ia3, "adapter_config.json"), "utf8")) as Record<string, unknown>;
    await writeFile(join(ia3, "adapter_config.json"), JSON.stringify({ ...config, peft_type: "IA3" }));
    const notLora = await upload("bad", ia3, ADAPTER_FILES, { base: "tiny@v1" });
    expect(notLora.status).toBe(400);
    expect(await notLora.text()).toContain('peft_type is \\"IA3\\"; only LORA adapters are served');

    const missing = join(work, "missing-module");
    await mkdir(missing);
    await writeFile(join(missing, "adapter_config.json"), JSON.stringify({ ...config, target_modules: ["q_proj"] }));
    const zeros = (n: number) => new Float32Array(n).fill(0.01);
    await writeSafetensors(join(missing, "adapter_model.safetensors"), [
      { name: "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", shape: [4, 64], data: zeros(256) },
      { name: "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight", shape: [64, 4], data: zeros(256) },
    ]);
    const lacks = await upload("bad", missing, ADAPTER_FILES, { base: "tiny@v1" });
    expect(lacks.status).toBe(400);
    expect(await lacks.text()).toContain(
      "target module q_proj (model.layers.7.self_attn.q_proj.weight) does not exist in the base tiny@v1",
    );

    const shaped = join(work, "bad-shape");
    await mkdir(shaped);
    await writeFile(join(shaped, "adapter_config.json"), JSON.stringify({ ...config, target_modules: ["k_proj"] }));
    // k_proj is [16, 64] (2 KV heads of 8): a B for 64 output rows belongs to another model.
    await writeSafetensors(join(shaped, "adapter_model.safetensors"), [
      { name: "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", shape: [4, 64], data: zeros(256) },
      { name: "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight", shape: [64, 4], data: zeros(256) },
    ]);
    const mismatch = await upload("bad", shaped, ADAPTER_FILES, { base: "tiny@v1" });
    expect(mismatch.status).toBe(400);
    expect(await mismatch.text()).toContain("the base tiny@v1's weight is [16, 64]");

    const notAdapter = await upload("bad", CHECKPOINT, ["config.json", "model.safetensors", "tokenizer.json"], {
      base: "tiny@v1",
    });
    expect(notAdapter.status).toBe(400);
    expect(await notAdapter.text()).toContain("has no adapter_config.json");
    const res = await fetch(`${gateway.url}/admin/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await res.json()) as { data: RegisteredVersion[] }).data.some((m) => m.name === "bad")).toBe(false);

    // A name holds models or adapters, never both; an adapter is not deployed on its own.
    const clash = await upload("tiny", a1, ADAPTER_FILES, { base: "tiny@v1" });
    expect(clash.status).toBe(409);
    expect(await clash.text()).toContain('name: \\"tiny\\" already holds model versions');
    const model = await upload("a1", CHECKPOINT, ["config.json", "model.safetensors", "tokenizer.json"]);
    expect(model.status).toBe(409);
    expect(await model.text()).toContain("already holds LoRA adapter versions");
    const deploy = await fetch(`${gateway.url}/admin/v1/endpoints/a1`, {
      method: "PUT",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: { name: "a1" } }),
    });
    expect(deploy.status).toBe(400);
    expect(await deploy.text()).toContain(
      'a1@v1 is a LoRA adapter of tiny@v1; deploy its base and send requests to \\"<endpoint>:a1\\"',
    );
  });

  it("registering an adapter is an operator's: a user key and another organization's admin are refused", async () => {
    const a1 = reference.adapters.a1!.dir;
    expect((await upload("mine", a1, ADAPTER_FILES, { base: "tiny@v1" }, userKey)).status).toBe(403);
    expect((await upload("mine", a1, ADAPTER_FILES, { base: "tiny@v1" }, otherOrgAdmin)).status).toBe(403);
  });

  it("`training submit --source <adapter dir> --base` uploads and registers an adapter; `training list` shows its base", async () => {
    const env = {
      ...process.env,
      PLATFORM_BASE_URL: gateway.url,
      PLATFORM_API_KEY: key,
      PLATFORM_CONFIG_DIR: join(work, "cli"),
    };
    const dir = reference.adapters.a2!.dir;
    const missing = await runCli(["training", "submit", "--name", "cli-a2", "--source", dir], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(
      "is a LoRA adapter (it holds adapter_config.json): name the version it adapts with --base",
    );
    const bad = await runCli(["training", "submit", "--name", "cli-a2", "--source", dir, "--base", "tiny"], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--base tiny: expected <model>@<version>");
    // PEFT's README.md beside the adapter stays behind; the two adapter files go up.
    const done = await runCli(["training", "submit", "--name", "cli-a2", "--source", dir, "--base", "tiny@v1"], env);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toMatch(/registered cli-a2@v1 .*task generate/);
    expect(done.stdout).toContain(
      "LoRA adapter of tiny@v1 · rank 8 · alpha 16 · down_proj, gate_proj, k_proj, o_proj, q_proj",
    );
    const list = await runCli(["training", "list"], env);
    expect(list.stdout).toMatch(/cli-a2[\s│]+v1[\s│]+llamacpp[\s│]+generate[\s│]+LoRA r8[\s│]+.*tiny@v1/);
    // Served at once as tiny:cli-a2, with a2's answer (same files).
    const answer = await complete("tiny:cli-a2", reference.prompts[0]!);
    expect(answer.text).toBe(detokenize(reference.adapters.a2!.outputs[0]!));
  });

  it("registerAdapter registers a fine-tuning job's output directory with its training summary, served at once", async () => {
    const training = {
      job_id: "ftjob-test",
      method: "lora" as const,
      base: { name: "tiny", version: "v1" },
      dataset_sha256: "0".repeat(64),
      validation_sha256: null,
      hyperparameters: { epochs: 1, learning_rate: 0.001 },
      trained_tokens: 100,
      final_train_loss: 1.5,
      final_validation_loss: null,
    };
    const record = await registerAdapter(
      { ctl, artifacts: openStore(artifactsUrl), scratchDir: join(work, "scratch") },
      { name: "tuned", base: { name: "tiny", version: "v1" }, dir: reference.adapters.a3!.dir, training },
    );
    expect(record).toMatchObject({ name: "tuned", version: "v1", kind: "adapter", training });
    expect(record.adapter!.base).toEqual({ name: "tiny", version: "v1" });
    const answer = await complete("tiny:tuned", reference.prompts[1]!);
    expect(answer.text).toBe(detokenize(reference.adapters.a3!.outputs[1]!));
    // A wrong base is refused the same way as an upload.
    await expect(
      registerAdapter(
        { ctl, artifacts: openStore(artifactsUrl), scratchDir: join(work, "scratch") },
        { name: "tuned", base: { name: "tiny", version: "v7" }, dir: reference.adapters.a3!.dir },
      ),
    ).rejects.toThrow("tiny@v7 is not a registered version");
  });

  it("routes to the newest adapter version on the endpoint's own base; a replica refuses an adapter of another base", async () => {
    // tiny@v2 (the same files) and a1@v2 trained on it: newer, but not for the version tiny serves.
    const base2 = await upload("tiny", CHECKPOINT, ["config.json", "model.safetensors", "tokenizer.json"]);
    expect(base2.status, await base2.clone().text()).toBe(201);
    const a1v2 = await upload("a1", reference.adapters.a2!.dir, ADAPTER_FILES, { base: "tiny@v2" });
    expect(a1v2.status, await a1v2.clone().text()).toBe(201);
    const answer = await complete("tiny:a1", reference.prompts[2]!);
    expect(answer.text).toBe(detokenize(reference.adapters.a1!.outputs[2]!));
    // A producer enqueueing a1@v2 for this replica directly: the replica checks the base itself.
    const endpoint = await getEndpoint(ctl, "tiny");
    const resolver = new ReplicaAdapters({
      ctl,
      store: openStore(artifactsUrl),
      cacheDir: adapterCacheDir(dataDirectory),
      replicaId: "check",
      endpoint,
      model: await resolveModelVersion(ctl, "tiny", "v1"),
      modelPath: () => "",
    });
    await expect(resolver.resolve("a1@v2")).rejects.toMatchObject({
      status: 400,
      code: "adapter_base_mismatch",
      message: "adapter a1@v2 adapts tiny@v2; this replica serves tiny@v1",
    });
    await expect(resolver.resolve("nope@v1")).rejects.toMatchObject({ status: 404, code: "adapter_not_found" });
    await expect(resolver.resolve("tiny@v1")).rejects.toMatchObject({
      status: 400,
      message: "tiny@v1 is a model, not an adapter",
    });
  });
});

describe.skipIf(skip !== undefined)("adapters on the float32 checkpoint helper (a GGUF base)", () => {
  it("serves an adapter registered on serveFloat32Checkpoint's tiny-hf as tiny-hf:<adapter>, as transformers + peft", async () => {
    const served = await serveFloat32Checkpoint(CHECKPOINT, "tiny-hf-adapters-1");
    try {
      const url = served.gateway.url;
      const auth = { authorization: `Bearer ${served.key}` };
      const chunks: Buffer[] = [];
      for await (const c of writeTar(reference.adapters.a2!.dir, ADAPTER_FILES) as AsyncIterable<Buffer>)
        chunks.push(c);
      const registered = await fetch(`${url}/admin/v1/models/a2/upload?source=a2&base=tiny-hf@v1`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/x-tar" },
        body: Buffer.concat(chunks),
      });
      expect(registered.status, await registered.clone().text()).toBe(201);
      const res = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({
          model: "tiny-hf:a2",
          prompt: reference.prompts[0],
          max_tokens: reference.new_tokens,
          temperature: 0,
        }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      const text = ((await res.json()) as { choices: { text: string }[] }).choices[0]!.text;
      expect(text).toBe(detokenize(reference.adapters.a2!.outputs[0]!));
    } finally {
      await served.stop();
    }
  });
});
