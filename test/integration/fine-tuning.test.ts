/**
 * Fine-tuning end to end (docs/fine-tuning.md): the suite's tiny Llama checkpoint fine-tuned with
 * LoRA through the official `openai` client against a real gateway, a real trainer (in this
 * process) running the real Python trainer (torch + transformers + peft from .venv-ref), and a
 * private Redis. Checked: validation loss falls, the adapter is registered with its training
 * metadata, a SIGKILLed trainer child resumes from its checkpoint and ends with bit-for-bit the
 * adapter of an uninterrupted run with the same seed, cancel stops the child, bad dataset lines
 * are named, a GGUF-only base is refused, another organization sees nothing, admission is bounded.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FineTuningJobs } from "../../src/finetuning/jobs.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { importModel } from "../../src/models/import.ts";
import { listModelVersions } from "../../src/models/versions.ts";
import { loadSettings, type Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { StoragePolicy } from "../../src/storage/policy.ts";
import { startTrainer, type Trainer } from "../../workers/trainer/coordinator.ts";
import { referencePython, tinyModelPath } from "../helpers/models.ts";
import { scrape, total } from "../helpers/metrics-text.ts";
import { runCli } from "../helpers/stack.ts";
import { sayDataset } from "../helpers/fine-tuning-data.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const python = referencePython();
// The official Python client, where it is installed (.ci/run's .venv-py, named by PLATFORM_TEST_PYTHON).
const PYTHON_CLIENT = process.env.PLATFORM_TEST_PYTHON ?? "python3";
const pythonClient = spawnSync(PYTHON_CLIENT, ["-c", "import openai"], { stdio: "ignore" }).status === 0;
if (!pythonClient)
  console.warn(`fine-tuning.test: ${PYTHON_CLIENT} has no openai package; the Python client test skips`);
const PYTHON_FINE_TUNE = new URL("../helpers/openai_fine_tune.py", import.meta.url).pathname;
const FIXTURE = new URL("../fixtures/hf/llama", import.meta.url).pathname;
type Env = {
  redis: PrivateRedis;
  ctl: Control;
  settings: Settings;
  gateway: RunningGateway;
  trainer: Trainer;
  acme: OpenAI;
  rival: OpenAI;
  dir: string;
  trainFile: string;
  validFile: string;
  cliEnv: NodeJS.ProcessEnv;
};

const TRAINER_PROCESS = new URL("../helpers/trainer-process.ts", import.meta.url).pathname;
const PEFT_LOSS = new URL("../helpers/peft_validation_loss.py", import.meta.url).pathname;

/** Processes whose command line names `text` (a job id: its trainer child's paths hold it). */
function processesNaming(text: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", `trainer/${text}/`], { encoding: "utf8" })
      .trim()
      .split("\n")
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/** The trainer's Python children of this process (the trainer runs in it). */
function trainerChildren(): number[] {
  try {
    return execFileSync("pgrep", ["-P", String(process.pid), "-f", "train.py"], { encoding: "utf8" })
      .trim()
      .split("\n")
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

async function waitForEnd(client: OpenAI, id: string): Promise<OpenAI.FineTuning.FineTuningJob> {
  // Bounded by the test's own timeout.
  await expect
    .poll(async () => (await client.fineTuning.jobs.retrieve(id)).status, { timeout: 600_000, interval: 200 })
    .toMatch(/^(succeeded|failed|cancelled)$/);
  return client.fineTuning.jobs.retrieve(id);
}

async function allEvents(client: OpenAI, id: string): Promise<OpenAI.FineTuning.FineTuningJobEvent[]> {
  const out: OpenAI.FineTuning.FineTuningJobEvent[] = [];
  for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) out.push(e);
  return out.reverse(); // oldest first
}

/** The LoRA job both runs of the SIGKILL test make: the same seed, data and hyperparameters. */
function loraJob(env: Env, suffix: string, epochs = 3) {
  return {
    model: "tiny-hf@v1",
    training_file: env.trainFile,
    validation_file: env.validFile,
    seed: 7,
    suffix,
    hyperparameters: { n_epochs: epochs, batch_size: 1, learning_rate_multiplier: 100 },
    method: { type: "supervised", training: "lora", lora: { rank: 4, alpha: 8 } },
    checkpoint_interval: 3,
  } as unknown as OpenAI.FineTuning.JobCreateParams;
}

describe.skipIf(!python)("fine-tuning (needs .venv-ref: torch, transformers, peft)", () => {
  let env: Env;
  const data = sayDataset();

  beforeAll(async () => {
    const redis = await privateRedis();
    const dir = await mkdtemp(join(tmpdir(), "platform-ft-"));
    const settings: Settings = { ...loadSettings({ PLATFORM_DATA_DIR: dir }), redisUrl: redis.url };
    const ctl = connectControl(redis.url, settings.prefix);
    const deps = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
    await importModel(deps, { name: "tiny-hf", framework: "llamacpp", source: FIXTURE });
    await importModel(deps, { name: "tiny-gguf", framework: "llamacpp", source: await tinyModelPath() });
    await createOrg(ctl, "acme");
    await createOrg(ctl, "rival");
    const acmeKey = (await createApiKey(ctl, "acme-user", "user", undefined, "acme")).key;
    const rivalKey = (await createApiKey(ctl, "rival-user", "user", undefined, "rival")).key;
    const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
    const trainer = await startTrainer(ctl, settings, {
      settings: loadSettings({ PLATFORM_TRAINER_PYTHON: python }).fineTuning,
    });
    const acme = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: acmeKey, maxRetries: 0 });
    const rival = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: rivalKey, maxRetries: 0 });
    const upload = async (name: string, text: string) =>
      (await acme.files.create({ file: await toFile(Buffer.from(text), name), purpose: "fine-tune" })).id;
    env = {
      redis,
      ctl,
      settings,
      gateway,
      trainer,
      acme,
      rival,
      dir,
      trainFile: await upload("train.jsonl", data.train),
      validFile: await upload("valid.jsonl", data.valid),
      cliEnv: {
        ...process.env,
        PLATFORM_BASE_URL: gateway.url,
        PLATFORM_API_KEY: acmeKey,
        PLATFORM_CONFIG_DIR: join(dir, "cli-config"),
      },
    };
  });

  afterAll(async () => {
    if (!env) return;
    await env.trainer.stop();
    await env.gateway.close();
    await env.ctl.redis.quit().catch(() => undefined);
    await env.redis.stop();
    await rm(env.dir, { recursive: true, force: true });
  });

  let uninterrupted: OpenAI.FineTuning.FineTuningJob;

  it("trains a LoRA adapter through the openai client: validation loss falls, the adapter is registered with its training", async () => {
    const created = await env.acme.fineTuning.jobs.create(loraJob(env, "tiny-words"));
    expect(created).toMatchObject({ object: "fine_tuning.job", model: "tiny-hf@v1", status: "queued", seed: 7 });
    expect(created.id).toMatch(/^ftjob-/);
    const job = await waitForEnd(env.acme, created.id);
    expect(job.error).toBeNull();
    expect(job.status).toBe("succeeded");
    expect(job.fine_tuned_model).toBe("tiny-hf:acme.tiny-words");
    expect(job.trained_tokens).toBeGreaterThan(0);
    uninterrupted = job;

    const events = await allEvents(env.acme, job.id);
    const valid = events.filter((e) => typeof (e.data as { valid_loss?: number } | null)?.valid_loss === "number");
    const losses = valid.map((e) => (e.data as { step: number; valid_loss: number }).valid_loss);
    expect((valid[0]?.data as { step: number } | undefined)?.step).toBe(0);
    expect(losses.length).toBe(4); // before training and after each of 3 epochs
    expect(losses.at(-1)).toBeLessThan(losses[0] as number);
    expect(events.some((e) => e.message.startsWith("Step 1/60: training loss="))).toBe(true);
    expect(events.at(-1)?.message).toBe("The job has successfully completed");

    const checkpoints = await env.acme.fineTuning.jobs.checkpoints.list(job.id);
    expect(checkpoints.data.length).toBeGreaterThan(0);
    expect(checkpoints.data[0]).toMatchObject({ object: "fine_tuning.job.checkpoint", fine_tuning_job_id: job.id });
    expect(checkpoints.data[0]?.id).toMatch(/^ftckpt-/);
    expect(checkpoints.data.map((c) => c.step_number)).toContain(40); // an epoch's end

    const [version] = await listModelVersions(env.ctl, "acme.tiny-words");
    expect(version).toMatchObject({ kind: "adapter", version: "v1", framework: "llamacpp" });
    expect(version?.adapter).toMatchObject({
      base: { name: "tiny-hf", version: "v1" },
      peft_type: "LORA",
      rank: 4,
      alpha: 8,
      target_modules: ["q_proj", "v_proj"],
    });
    expect(version?.training).toMatchObject({
      job_id: job.id,
      method: "lora",
      base: { name: "tiny-hf", version: "v1" },
      dataset_sha256: createHash("sha256").update(data.train).digest("hex"),
      validation_sha256: createHash("sha256").update(data.valid).digest("hex"),
      trained_tokens: job.trained_tokens,
      final_validation_loss: losses.at(-1),
    });
    expect(version?.manifest?.map((f) => f.path)).toEqual(["adapter_config.json", "adapter_model.safetensors"]);
    // The adapter names its base by the platform's name, never by a server path.
    const config = JSON.parse(
      await readFile(
        join(env.settings.dataDir, "artifacts", version?.artifact as string, "adapter_config.json"),
        "utf8",
      ),
    ) as { base_model_name_or_path: string; r: number };
    expect(config).toMatchObject({ base_model_name_or_path: "tiny-hf@v1", r: 4 });
    // The registered files are a real PEFT adapter: loaded by transformers + PEFT they score the
    // validation set as the trainer reported.
    const validPath = join(env.dir, "valid-check.jsonl");
    await writeFile(validPath, data.valid);
    const scored = JSON.parse(
      execFileSync(
        python as string,
        [PEFT_LOSS, FIXTURE, join(env.settings.dataDir, "artifacts", version?.artifact as string), validPath],
        { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] },
      ),
    ) as { valid_loss: number };
    expect(Math.abs(scored.valid_loss - (losses.at(-1) as number)) / (losses.at(-1) as number)).toBeLessThan(1e-5);
  });

  it.skipIf(!pythonClient)(
    "works with the official Python client too (OpenAI's fields only: the defaults fill the rest)",
    async () => {
      const train = join(env.dir, "py-train.jsonl");
      const valid = join(env.dir, "py-valid.jsonl");
      await writeFile(train, data.train);
      await writeFile(valid, data.valid);
      // Asynchronously: the gateway and the trainer it talks to run in this process.
      const child = spawn(PYTHON_CLIENT, [PYTHON_FINE_TUNE, `${env.gateway.url}/v1`, "tiny-hf@v1", train, valid], {
        env: { ...process.env, OPENAI_API_KEY: env.cliEnv.PLATFORM_API_KEY },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      child.stdout.on("data", (d) => (out += d));
      child.stderr.on("data", (d) => (err += d));
      const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
      expect(code, err.slice(-3000)).toBe(0);
      const run = JSON.parse(out) as {
        job: OpenAI.FineTuning.FineTuningJob;
        events: { message: string; data: { valid_loss?: number } | null }[];
        checkpoints: { step_number: number }[];
        listed: boolean;
      };
      expect(run.job).toMatchObject({
        object: "fine_tuning.job",
        status: "succeeded",
        model: "tiny-hf@v1",
        fine_tuned_model: "tiny-hf:acme.py-words",
        seed: 11,
        error: null,
      });
      expect(run.job.hyperparameters).toMatchObject({ n_epochs: 2, batch_size: 1 });
      const losses = run.events.flatMap((e) => (typeof e.data?.valid_loss === "number" ? [e.data.valid_loss] : []));
      expect(losses.length).toBe(3); // before training and after each epoch
      expect(losses.at(-1)).toBeLessThan(losses[0] as number);
      expect(run.events.at(-1)?.message).toBe("The job has successfully completed");
      expect(run.checkpoints.map((c) => c.step_number)).toContain(20); // the first epoch's end
      expect(run.listed).toBe(true);
      expect((await listModelVersions(env.ctl, "acme.py-words"))[0]?.adapter?.base).toEqual({
        name: "tiny-hf",
        version: "v1",
      });
    },
    300_000,
  );

  it("resumes from its checkpoint after the trainer's child is SIGKILLed, ending with the same adapter as the uninterrupted run", async () => {
    expect(uninterrupted?.status).toBe("succeeded");
    const created = await env.acme.fineTuning.jobs.create(loraJob(env, "tiny-words-killed"));
    // Killed once its first checkpoint is in the store, before the run can end.
    await expect
      .poll(async () => (await env.acme.fineTuning.jobs.checkpoints.list(created.id)).data.length, {
        timeout: 60_000,
        interval: 20,
      })
      .toBeGreaterThan(0);
    const [pid] = trainerChildren();
    expect(pid).toBeDefined();
    process.kill(pid as number, "SIGKILL");
    const job = await waitForEnd(env.acme, created.id);
    expect(job.status).toBe("succeeded");
    const messages = (await allEvents(env.acme, job.id)).map((e) => e.message);
    expect(
      messages.some((m) =>
        /^The trainer process was killed \(SIGKILL\) after step \d+; resuming from the checkpoint at step \d+/.test(m),
      ),
    ).toBe(true);
    expect(messages.some((m) => /^Resumed from the checkpoint at step \d+$/.test(m))).toBe(true);
    expect(job.trained_tokens).toBe(uninterrupted.trained_tokens);
    const [killed] = await listModelVersions(env.ctl, "acme.tiny-words-killed");
    const [straight] = await listModelVersions(env.ctl, "acme.tiny-words");
    // Same seed, data order, optimizer and scheduler state: the same bytes.
    expect(killed?.manifest).toEqual(straight?.manifest);
    expect(killed?.training?.final_validation_loss).toBe(straight?.training?.final_validation_loss);
  });

  it("survives a SIGKILL of the trainer process itself: another trainer takes the job over from its checkpoint", async () => {
    // This suite's trainer steps aside; one in a process of its own takes the job, then dies.
    await env.trainer.stop();
    const lone = spawn(process.execPath, [TRAINER_PROCESS], {
      env: {
        ...process.env,
        REDIS_URL: env.redis.url,
        PLATFORM_DATA_DIR: env.dir,
        PLATFORM_TRAINER_PYTHON: python,
        TRAINER_LOCK_MS: "2000",
        TRAINER_STALLED_MS: "1000",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    lone.stdout.on("data", (d) => (out += d));
    lone.stderr.on("data", (d) => (out += d));
    const exited = new Promise((resolve) => lone.once("exit", resolve));
    await expect.poll(() => out, { timeout: 30_000 }).toContain("trainer ready");
    const created = await env.acme.fineTuning.jobs.create(loraJob(env, "tiny-words-moved"));
    await expect
      .poll(async () => (await env.acme.fineTuning.jobs.checkpoints.list(created.id)).data.length, {
        timeout: 60_000,
        interval: 20,
      })
      .toBeGreaterThan(0);
    lone.kill("SIGKILL");
    await exited;
    // Its Python child sees its parent gone and ends itself.
    await expect.poll(() => processesNaming(created.id)).toEqual([]);
    env.trainer = await startTrainer(env.ctl, env.settings, {
      settings: loadSettings({ PLATFORM_TRAINER_PYTHON: python }).fineTuning,
      stalledIntervalMs: 1000,
    });
    const job = await waitForEnd(env.acme, created.id);
    expect(job.status, out).toBe("succeeded");
    const messages = (await allEvents(env.acme, job.id)).map((e) => e.message);
    expect(messages.some((m) => /^Trainer took over the job; resuming from the checkpoint at step \d+$/.test(m))).toBe(
      true,
    );
    const [moved] = await listModelVersions(env.ctl, "acme.tiny-words-moved");
    const [straight] = await listModelVersions(env.ctl, "acme.tiny-words");
    expect(moved?.manifest).toEqual(straight?.manifest);
  });

  it("cancels a running job: the child stops and nothing is registered", async () => {
    const created = await env.acme.fineTuning.jobs.create(loraJob(env, "tiny-cancelled", 50));
    await expect
      .poll(async () => (await allEvents(env.acme, created.id)).some((e) => e.message.startsWith("Step ")), {
        timeout: 60_000,
      })
      .toBe(true);
    expect(total(await scrape(env.gateway.metricsUrl), "platform_fine_tuning_jobs", { status: "running" })).toBe(1);
    const cancelled = await env.acme.fineTuning.jobs.cancel(created.id);
    expect(cancelled.status).toBe("cancelled");
    await expect.poll(() => trainerChildren().length).toBe(0);
    expect((await env.acme.fineTuning.jobs.retrieve(created.id)).status).toBe("cancelled");
    expect(await listModelVersions(env.ctl, "acme.tiny-cancelled")).toEqual([]);
    await expect
      .poll(async () => total(await scrape(env.gateway.metricsUrl), "platform_fine_tuning_jobs", { status: "running" }))
      .toBe(0);
  });

  it("fine-tunes through the CLI: uploads the local dataset, --watch prints the losses, `training jobs` lists it", async () => {
    const train = join(env.dir, "cli-train.jsonl");
    const valid = join(env.dir, "cli-valid.jsonl");
    await writeFile(train, data.train);
    await writeFile(valid, data.valid);
    const run = await runCli(
      [
        "training",
        "submit",
        "--name",
        "tiny-cli",
        "--base",
        "tiny-hf@v1",
        "--dataset",
        train,
        "--validation",
        valid,
        "--epochs",
        "2",
        "--learning-rate",
        "0.01",
        "--lora-rank",
        "4",
        "--lora-alpha",
        "8",
        "--seed",
        "3",
        "--watch",
      ],
      env.cliEnv,
    );
    expect(run.stderr).toContain("uploading");
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /fine-tuning job ftjob-[0-9a-f]{24} queued: tiny-hf@v1 → adapter acme.tiny-cli \(lora, 2 epochs, seed 3\)/,
    );
    expect(run.stdout).toMatch(/Step 1\/40: training loss=\d+\.\d{4}/);
    expect(run.stdout).toMatch(/Step 40: validation loss=\d+\.\d{4}/);
    expect(run.stdout).toContain("succeeded: tiny-hf:acme.tiny-cli (acme.tiny-cli@v1)");
    const [version] = await listModelVersions(env.ctl, "acme.tiny-cli");
    expect(version?.training?.hyperparameters).toMatchObject({
      n_epochs: 2,
      learning_rate: 0.01,
      seed: 3,
      lora_rank: 4,
    });

    const list = await runCli(["training", "jobs", "list", "--json"], env.cliEnv);
    expect(list.code, list.stderr).toBe(0);
    const listed = JSON.parse(list.stdout) as { id: string; fine_tuned_model: string }[];
    expect(listed[0]?.fine_tuned_model).toBe("tiny-hf:acme.tiny-cli");
    const events = await runCli(["training", "jobs", "events", listed[0]?.id as string], env.cliEnv);
    expect(events.stdout).toContain("Registered adapter acme.tiny-cli@v1");

    // Bad flags: exit 2, naming the flag; a bad dataset: exit 1, naming the line.
    const flag = await runCli(
      ["training", "submit", "--name", "x", "--base", "tiny-hf@v1", "--dataset", train, "--epochs", "0"],
      env.cliEnv,
    );
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("--epochs");
    const noBase = await runCli(["training", "submit", "--name", "x", "--dataset", train], env.cliEnv);
    expect(noBase.code).toBe(2);
    expect(noBase.stderr).toContain("--base");
    const broken = join(env.dir, "broken.jsonl");
    await writeFile(broken, `${data.train}{"messages": [{"role": "user", "content": 3}]}\n`);
    const bad = await runCli(
      ["training", "submit", "--name", "x", "--base", "tiny-hf@v1", "--dataset", broken],
      env.cliEnv,
    );
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("line 21: messages[0].content: expected a string");
  });

  it("trains every weight with method full and registers a new checkpoint version", async () => {
    const created = await env.acme.fineTuning.jobs.create({
      model: "tiny-hf@v1",
      training_file: env.trainFile,
      validation_file: env.validFile,
      seed: 1,
      suffix: "tiny-full",
      hyperparameters: { n_epochs: 1, batch_size: 4, learning_rate_multiplier: 100 },
      method: { type: "supervised", training: "full" },
    } as unknown as OpenAI.FineTuning.JobCreateParams);
    const job = await waitForEnd(env.acme, created.id);
    expect(job.error).toBeNull();
    expect(job.fine_tuned_model).toBe("acme.tiny-full@v1");
    const [version] = await listModelVersions(env.ctl, "acme.tiny-full");
    expect(version).toMatchObject({ kind: "hf", checkpoint: { architecture: "LlamaForCausalLM" } });
    expect(version?.training).toMatchObject({ method: "full", job_id: job.id });
    expect(version?.manifest?.map((f) => f.path)).toContain("tokenizer.json");
  });

  it("fails a job whose trainer's Python lacks the stack, saying how to fix it", async () => {
    await env.trainer.stop();
    // The machine's own python3 has no torch here (doctor says so too).
    env.trainer = await startTrainer(env.ctl, env.settings, {
      settings: loadSettings({ PLATFORM_TRAINER_PYTHON: "python3" }).fineTuning,
    });
    try {
      const created = await env.acme.fineTuning.jobs.create(loraJob(env, "tiny-no-python"));
      const job = await waitForEnd(env.acme, created.id);
      expect(job.status).toBe("failed");
      expect(job.error?.code).toBe("trainer_unavailable");
      expect(job.error?.message).toContain("PLATFORM_TRAINER_PYTHON");
      expect(job.error?.message).toContain("`npm run setup:python`");
      expect(job.error?.message).not.toMatch(/\/tmp|\/work|Traceback/);
    } finally {
      await env.trainer.stop();
      env.trainer = await startTrainer(env.ctl, env.settings, {
        settings: loadSettings({ PLATFORM_TRAINER_PYTHON: python }).fineTuning,
      });
    }
  });

  it("names every bad line of a dataset before anything trains", async () => {
    const bad = [
      JSON.stringify({
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "yo" },
        ],
      }),
      JSON.stringify({
        messages: [
          { role: "user", content: "hi" },
          { role: "robot", content: "yo" },
        ],
      }),
      "{not json",
      JSON.stringify({ messages: [{ role: "user", content: "only a question" }] }),
      JSON.stringify({ prompt: "p", completion: "c" }),
    ].join("\n");
    const file = await env.acme.files.create({
      file: await toFile(Buffer.from(bad), "bad.jsonl"),
      purpose: "fine-tune",
    });
    const error = await env.acme.fineTuning.jobs
      .create({ model: "tiny-hf@v1", training_file: file.id })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    const e = error as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.code).toBe("invalid_training_file");
    expect(e.param).toBe("training_file");
    expect(e.message).toContain("line 2: messages[1].role: expected one of system, user, assistant");
    expect(e.message).toContain("line 3: not valid JSON");
    expect(e.message).toContain("line 4: messages: expected at least one assistant message");
    expect(e.message).toContain("line 5: a prompt/completion line in a chat dataset; use one format per file");
    expect(e.message).not.toContain("only a question");
    // A storage URI is confined as batch inputs are: this gateway gives keys no storage area.
    const outside = await env.acme.fineTuning.jobs
      .create({ model: "tiny-hf@v1", training_file: "/etc/passwd" })
      .catch((e: unknown) => e);
    expect(outside).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((outside as InstanceType<typeof OpenAI.PermissionDeniedError>).code).toBe("storage_forbidden");
    expect((outside as Error).message).not.toContain("root:");
  });

  it("refuses a GGUF-only base with a 400 saying fine-tuning needs the Hugging Face checkpoint", async () => {
    const error = await env.acme.fineTuning.jobs
      .create({ model: "tiny-gguf@v1", training_file: env.trainFile })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as Error).message).toContain("fine-tuning needs the Hugging Face checkpoint");
  });

  it("keeps organizations apart: another organization's job, events, checkpoints and cancel are 404s", async () => {
    const id = uninterrupted.id;
    for (const call of [
      () => env.rival.fineTuning.jobs.retrieve(id),
      () => env.rival.fineTuning.jobs.cancel(id),
      () => env.rival.fineTuning.jobs.listEvents(id),
      () => env.rival.fineTuning.jobs.checkpoints.list(id),
    ]) {
      expect(await Promise.resolve(call()).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
    }
    expect((await env.rival.fineTuning.jobs.list()).data).toEqual([]);
    const mine = await env.acme.fineTuning.jobs.list({ limit: 2 });
    expect(mine.data.length).toBe(2);
    expect(mine.has_more).toBe(true);
    // Nor may it train on acme's files.
    const error = await env.rival.fineTuning.jobs
      .create({ model: "tiny-hf@v1", training_file: env.trainFile })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("bounds the queued and running jobs of an organization (429 naming the bound)", async () => {
    // No trainer takes this queue's jobs: they stay queued. An operator names a file under a storage root.
    const jobs = new FineTuningJobs(env.ctl, {
      queue: "{ft-admission-test}",
      storage: new StoragePolicy({ roots: [{ scheme: "file", path: env.dir }] }),
      settings: { ...loadSettings({}).fineTuning, maxActivePerOrg: 1, maxJobsPerOrg: 1 },
    });
    const path = join(env.dir, "train.jsonl");
    await writeFile(path, data.train);
    const who = { id: "key_operator", org: "default", role: "admin" as const };
    const first = await jobs.create({ model: "tiny-hf@v1", training_file: path }, who);
    const error = await jobs.create({ model: "tiny-hf@v1", training_file: path }, who).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 429, code: "too_many_fine_tuning_jobs" });
    expect((error as Error).message).toContain("PLATFORM_FINETUNE_MAX_ACTIVE");
    // An ended job frees its place; the records kept are bounded too (the oldest ended one goes).
    expect((await jobs.cancel(first.id, who)).status).toBe("cancelled");
    const second = await jobs.create({ model: "tiny-hf@v1", training_file: path }, who);
    expect(second.status).toBe("queued");
    await expect(jobs.get(first.id, who)).rejects.toMatchObject({ status: 404, code: "fine_tuning_job_not_found" });
    expect((await jobs.list(who)).data.map((j) => j.id)).toEqual([second.id]);
    await jobs.cancel(second.id, who);
    await jobs.close();
  });
});
