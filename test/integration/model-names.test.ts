/**
 * Names an organization owns (docs/security.md): a tenant cannot take the operator's or another
 * organization's model names through fine-tuning, and what an organization made (an adapter, a
 * full fine-tuned model) is listed and served only to it and the operator; anyone else gets the
 * 404 a name that does not exist gets, on every route that names a model. A real gateway and
 * Redis, and a worker serving the operator's `vl` on the fake `vllm serve` (its adapters answer
 * "[<name>@<version>]" first, so an answer says whose adapter produced it).
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchCoordinator, startBatchCoordinator } from "../../src/batch/coordinator.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { registerTrainedModel } from "../../src/finetuning/register.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { registerAdapter } from "../../src/models/import.ts";
import { importModel } from "../../src/models/import.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { listModelVersions } from "../../src/models/versions.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { adapterCacheDir, ReplicaAdapters } from "../../workers/adapters.ts";
import { loadVllm } from "../../workers/engines/vllm.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { sayDataset } from "../helpers/fine-tuning-data.ts";
import { fakeVllmPath, writeFakeVllmBin } from "../helpers/fake-vllm.ts";
import { privateRedis } from "../helpers/redis.ts";
import { writeSafetensors } from "../helpers/safetensors.ts";

const CHECKPOINT = fileURLToPath(new URL("../fixtures/hf/llama", import.meta.url));

let redis: Awaited<ReturnType<typeof privateRedis>>;
let dir: string;
let ctl: Control;
let gateway: RunningGateway;
let worker: RunningWorker;
let coordinator: BatchCoordinator;
let deps: { ctl: Control; artifacts: ReturnType<typeof openStore>; scratchDir: string };
let base: RegisteredVersion;
const keys: Record<"operator" | "alpha" | "beta" | "install", string> = {
  operator: "",
  alpha: "",
  beta: "",
  install: "",
};

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

type ErrorBody = { error: { code: string; message: string; param: string | null } };

async function api<T = ErrorBody>(
  who: keyof typeof keys,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${keys[who]}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

const client = (who: keyof typeof keys) =>
  new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: keys[who], maxRetries: 0 });

/** An answer as a client sees it, the name it asked for replaced, so two answers compare. */
async function seen(who: keyof typeof keys, method: string, path: string, name: string, body?: unknown) {
  const res = await api(who, method, path, body === undefined ? undefined : JSON.parse(JSON.stringify(body)));
  // The model as asked for, its endpoint and adapter or version parts too (messages name them alone).
  const parts = [name, ...name.split(/[:@]/)].filter((p) => p !== "vl" && p !== "v1");
  let text = JSON.stringify(res.body);
  for (const part of parts) text = text.replaceAll(part, "<name>");
  return { status: res.status, body: JSON.parse(text) as unknown };
}

/**
 * Asks as `who` for `hidden` (another organization's) and for `missing` (a name nothing has):
 * the two answers are the same 404 once each name is replaced.
 */
async function sameAsMissing(
  who: keyof typeof keys,
  method: string,
  path: (name: string) => string,
  body: (name: string) => unknown,
  hidden: string,
  missing: string,
): Promise<void> {
  const a = await seen(who, method, path(hidden), hidden, body(hidden));
  const b = await seen(who, method, path(missing), missing, body(missing));
  expect(a.status, JSON.stringify(a.body)).toBe(404);
  expect(a).toEqual(b);
}

beforeAll(async () => {
  redis = await privateRedis();
  dir = await mkdtemp(join(tmpdir(), "model-names-"));
  const bin = await writeFakeVllmBin(dir);
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: join(dir, "data") }), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  await createOrg(ctl, "alpha");
  await createOrg(ctl, "beta");
  keys.operator = (await createApiKey(ctl, "operator", "admin")).key;
  keys.install = (await createApiKey(ctl, "install-user", "user")).key;
  keys.alpha = (await createApiKey(ctl, "alpha-user", "user", undefined, "alpha")).key;
  keys.beta = (await createApiKey(ctl, "beta-admin", "admin", undefined, "beta")).key;
  const store = openStore(settings.artifactsUrl);
  deps = { ctl, artifacts: store, scratchDir: join(dir, "tmp") };
  base = await importModel(deps, { name: "vl", framework: "vllm", source: CHECKPOINT });
  // What alpha made: an adapter of the operator's vl and a full fine-tune, as its trainer registers them.
  const adapterDir = join(dir, "sql-adapter");
  await writeAdapter(adapterDir);
  await registerAdapter(deps, {
    name: "alpha.sql",
    base: { name: "vl", version: "v1" },
    dir: adapterDir,
    owner: "alpha",
  });
  await importModel(deps, { name: "alpha.full", framework: "vllm", source: CHECKPOINT, owner: "alpha" });
  // A name the operator chose in beta's namespace.
  await importModel(deps, { name: "beta.reserved", framework: "vllm", source: CHECKPOINT });
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "vl" }, resources: { parallel: 4 } }));
  // The operator deploys alpha's full model (no replica: routing and listing are what is checked).
  await deployEndpoint(ctl, DeploymentConfig.parse({ endpoint: "alpha-full", model: { name: "alpha.full" } }));
  const endpoint = await getEndpoint(ctl, "vl");
  const adapters = new ReplicaAdapters({
    ctl,
    store,
    cacheDir: adapterCacheDir(join(dir, "data")),
    replicaId: "vl-names-1",
    endpoint,
    model: base,
    modelPath: () => CHECKPOINT,
  });
  worker = startWorker({
    ctl,
    endpoint,
    replicaId: "vl-names-1",
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

async function uploadDataset(who: keyof typeof keys): Promise<string> {
  const file = await client(who).files.create({
    file: await toFile(Buffer.from(sayDataset().train), "train.jsonl"),
    purpose: "fine-tune",
  });
  return file.id;
}

describe("names an organization owns", () => {
  it("a fine-tuning job's result lives in its organization's namespace, never under the operator's name", async () => {
    const training = await uploadDataset("beta");
    // The attack of issue 38: beta names the operator's model as its suffix.
    const job = await client("beta").fineTuning.jobs.create({
      model: "vl@v1",
      training_file: training,
      suffix: "vl",
      method: { training: "full" },
    } as unknown as OpenAI.FineTuning.JobCreateParams);
    expect((job as unknown as { user_provided_suffix: string }).user_provided_suffix).toBe("beta.vl");
    // A suffix naming another organization's namespace stays in beta's.
    const other = await client("beta").fineTuning.jobs.create({
      model: "vl@v1",
      training_file: training,
      suffix: "alpha.sql",
    } as unknown as OpenAI.FineTuning.JobCreateParams);
    expect((other as unknown as { user_provided_suffix: string }).user_provided_suffix).toBe("beta.alpha.sql");
    for (const id of [job.id, other.id]) await client("beta").fineTuning.jobs.cancel(id);

    // Whatever the job says, registration never adds a version to a model its organization did not create.
    for (const name of ["vl", "alpha.sql", "alpha.full"]) {
      const refused = await registerTrainedModel(deps, {
        name,
        base,
        dir: CHECKPOINT,
        source: "fine-tuning://ftjob-test",
        training: {
          job_id: "ftjob-test",
          method: "full",
          base: { name: "vl", version: "v1" },
          dataset_sha256: "0".repeat(64),
          validation_sha256: null,
          hyperparameters: {},
          trained_tokens: 0,
          final_train_loss: null,
          final_validation_loss: null,
        },
        owner: "beta",
      }).catch((e: unknown) => e);
      expect(refused, name).toMatchObject({ status: 409, code: "name_taken" });
      expect((refused as Error).message).not.toContain('alpha"');
    }
    expect((await listModelVersions(ctl, "vl")).map((v) => v.version)).toEqual(["v1"]);
    expect((await listModelVersions(ctl, "alpha.full")).map((v) => v.version)).toEqual(["v1"]);
  });

  it("refuses with a 409 a name the operator registered, naming no owner", async () => {
    const training = await uploadDataset("beta");
    const reserved = await api("beta", "POST", "/v1/fine_tuning/jobs", {
      model: "vl@v1",
      training_file: training,
      suffix: "reserved",
    });
    expect(reserved.status).toBe(409);
    expect(reserved.body.error).toMatchObject({ code: "name_taken", param: "suffix" });
    expect(reserved.body.error.message).toContain("another organization or the operator");
    // The install's own organization keeps bare names: the operator's `vl` is refused to it too.
    const own = await api("install", "POST", "/v1/fine_tuning/jobs", {
      model: "vl@v1",
      training_file: await uploadDataset("install"),
      suffix: "vl",
    });
    expect(own.status).toBe(409);
    // And the operator cannot put a version into an organization's model.
    const operator = await importModel(deps, { name: "alpha.sql", framework: "vllm", source: CHECKPOINT }).catch(
      (e: unknown) => e,
    );
    expect(operator).toMatchObject({ status: 409, code: "name_taken" });
  });

  it("serves and lists an organization's adapter and model to it and the operator only", async () => {
    for (const who of ["alpha", "operator"] as const) {
      const answer = await client(who).completions.create({ model: "vl:alpha.sql", prompt: "Once", max_tokens: 2 });
      expect(answer.choices[0]?.text.startsWith("[alpha.sql@v1]")).toBe(true);
      const ids = (await client(who).models.list()).data.map((m) => m.id);
      expect(ids).toEqual(expect.arrayContaining(["vl", "vl:alpha.sql", "alpha-full"]));
      expect((await api(who, "GET", "/v1/models/vl:alpha.sql")).status).toBe(200);
      expect((await api(who, "GET", "/v1/models/alpha-full")).status).toBe(200);
    }
    for (const who of ["beta", "install"] as const) {
      const ids = (await client(who).models.list()).data.map((m) => m.id);
      expect(ids).toContain("vl");
      expect(ids).not.toContain("vl:alpha.sql");
      expect(ids).not.toContain("alpha-full");
    }
  });

  it("answers another organization's adapter or model as a name that does not exist, on every route", async () => {
    const batchInput = (
      await client("beta").files.create({
        file: await toFile(Buffer.from(`${JSON.stringify({ prompt: "hi", max_tokens: 2 })}\n`), "in.jsonl"),
        purpose: "batch",
      })
    ).id;
    const chat = (model: string) => ({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    const completion = (model: string) => ({ model, prompt: "hi", max_tokens: 2 });
    for (const who of ["beta", "install"] as const) {
      for (const [hidden, missing] of [
        ["vl:alpha.sql", "vl:nope.sql"],
        ["alpha-full", "nope-full"],
      ] as const) {
        await sameAsMissing(who, "POST", () => "/v1/chat/completions", chat, hidden, missing);
        await sameAsMissing(who, "POST", () => "/v1/completions", completion, hidden, missing);
        await sameAsMissing(
          who,
          "POST",
          () => "/v1/embeddings",
          (m) => ({ model: m, input: "hi" }),
          hidden,
          missing,
        );
        await sameAsMissing(
          who,
          "GET",
          (m) => `/v1/models/${m}`,
          () => undefined,
          hidden,
          missing,
        );
      }
      await sameAsMissing(
        who,
        "POST",
        () => "/v1/batch-jobs",
        (m) => ({ model: m, input_file_id: batchInput }),
        "vl:alpha.sql",
        "vl:nope.sql",
      );
      // Evaluations and fine-tuning name registry versions.
      await sameAsMissing(
        who,
        "POST",
        () => "/admin/v1/evaluations",
        (m) => ({ model: m, dataset: "eval.jsonl" }),
        "vl@v1:alpha.sql",
        "vl@v1:nope.sql",
      );
      await sameAsMissing(
        who,
        "POST",
        () => "/admin/v1/evaluations",
        (m) => ({ model: m, dataset: "eval.jsonl" }),
        "alpha.full@v1",
        "nope.full@v1",
      );
      await sameAsMissing(
        who,
        "POST",
        () => "/v1/fine_tuning/jobs",
        (m) => ({ model: m, training_file: "train.jsonl" }),
        "alpha.full@v1",
        "nope.full@v1",
      );
    }
    // A platform batch job naming alpha's model fails as one naming a model never registered.
    const failure = async (model: string) => {
      const created = await api<{ id: string }>("beta", "POST", "/v1/batch-jobs", { model, input_file_id: batchInput });
      expect(created.status).toBe(201);
      const job = async () =>
        (await api<{ state: string; error: unknown }>("beta", "GET", `/v1/batch-jobs/${created.body.id}`)).body;
      await expect.poll(async () => (await job()).state, { timeout: 30_000 }).toBe("failed");
      return JSON.parse(JSON.stringify((await job()).error).replaceAll(model, "<name>")) as unknown;
    };
    expect(await failure("alpha.full")).toEqual(await failure("nope.full"));
    // An OpenAI batch whose lines name alpha's adapter.
    const line = (model: string) =>
      `${JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/completions", body: { model, prompt: "hi" } })}\n`;
    const upload = async (model: string) =>
      (await client("beta").files.create({ file: await toFile(Buffer.from(line(model)), "b.jsonl"), purpose: "batch" }))
        .id;
    const batch = async (model: string) =>
      seen("beta", "POST", "/v1/batches", model, {
        input_file_id: await upload(model),
        endpoint: "/v1/completions",
        completion_window: "24h",
      });
    const hidden = await batch("vl:alpha.sql");
    expect(hidden.status).toBe(404);
    expect(hidden).toEqual(await batch("vl:nope.sql"));
  });
});
