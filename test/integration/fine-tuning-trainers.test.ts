/**
 * Which trainer takes which fine-tuning job (docs/fine-tuning.md, "GPU jobs"), with real Redis, a
 * real gateway and the real Python trainer: a job asking for a GPU waits, saying so, while only
 * CPU trainers run (they train CPU jobs meanwhile), and a trainer offering a GPU takes it.
 * This machine has no CUDA: the GPU-offering trainer's Python is a stand-in that answers the
 * trainer's GPU probe with "cuda: true" and runs train.py with the real reference Python (which then
 * trains on the CPU, and says so). Also: `--gpu` refuses a trainer whose torch sees no GPU,
 * `fine_tuned_model` names the endpoint serving the base (or the base's name when none does), and a
 * GPU trainer SIGKILLed mid-job (`platform trainer --gpu --health-port 0`, its probes and metrics
 * read first) leaves its job queued again, waiting for a GPU trainer, within the heartbeat window.
 */
import { spawn } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { FINE_TUNING_QUEUE, gpuQueueOf } from "../../src/contracts/naming.ts";
import { deleteEndpoint, deployEndpoint } from "../../src/endpoints/store.ts";
import { servingEndpointName } from "../../src/finetuning/served.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings, type Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { probeGpu } from "../../workers/trainer/gpu.ts";
import { NoGpuError, startTrainer, type Trainer } from "../../workers/trainer/coordinator.ts";
import { referencePython } from "../helpers/models.ts";
import { sayDataset } from "../helpers/fine-tuning-data.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { scrape, total } from "../helpers/metrics-text.ts";
import { BIN, runCli } from "../helpers/stack.ts";

const python = referencePython();
/** The heartbeat window here (PLATFORM_TRAINER_HEARTBEAT_MS; 30 s by default): short, so a dead trainer is noticed fast. */
const HEARTBEAT_MS = 2000;
const FIXTURE = new URL("../fixtures/hf/llama", import.meta.url).pathname;

type Job = OpenAI.FineTuning.FineTuningJob & { waiting_for: string | null; resources: { gpu: number } };

describe.skipIf(!python)(
  "fine-tuning trainers: GPU jobs go only to trainers that offer a GPU (needs .venv-ref)",
  () => {
    let redis: PrivateRedis;
    let ctl: Control;
    let settings: Settings;
    let gateway: RunningGateway;
    let client: OpenAI;
    let dir: string;
    let trainFile: string;
    let validFile: string;
    let standIn: string;
    let standInLog: string;
    let cliEnv: NodeJS.ProcessEnv;
    const trainers: Trainer[] = [];

    const retrieve = async (id: string) => (await client.fineTuning.jobs.retrieve(id)) as Job;
    // Bounded by the test's own timeout.
    const waitForEnd = async (id: string): Promise<Job> => {
      await expect
        .poll(async () => (await retrieve(id)).status, { timeout: 600_000, interval: 200 })
        .toMatch(/^(succeeded|failed|cancelled)$/);
      return retrieve(id);
    };
    const messages = async (id: string) => {
      const out: { level: string; message: string }[] = [];
      for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) out.push(e);
      return out.reverse();
    };
    const create = async (suffix: string, gpu: number) =>
      (await client.fineTuning.jobs.create({
        model: "tiny-hf@v1",
        training_file: trainFile,
        validation_file: validFile,
        seed: 3,
        suffix,
        hyperparameters: { n_epochs: 1, batch_size: 1, learning_rate_multiplier: 100 },
        method: { type: "supervised", training: "lora", lora: { rank: 2, alpha: 4 } },
        ...(gpu > 0 ? { resources: { gpu } } : {}),
      } as unknown as OpenAI.FineTuning.JobCreateParams)) as Job;

    beforeAll(async () => {
      redis = await privateRedis();
      dir = await mkdtemp(join(tmpdir(), "platform-ft-trainers-"));
      settings = {
        ...loadSettings({ PLATFORM_DATA_DIR: dir, PLATFORM_TRAINER_HEARTBEAT_MS: String(HEARTBEAT_MS) }),
        redisUrl: redis.url,
      };
      ctl = connectControl(redis.url, settings.prefix);
      const deps = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
      await importModel(deps, { name: "tiny-hf", framework: "llamacpp", source: FIXTURE });
      await importModel(deps, { name: "tiny-hf", framework: "llamacpp", source: FIXTURE }); // v2
      await createOrg(ctl, "acme");
      const key = (await createApiKey(ctl, "acme-user", "user", undefined, "acme")).key;
      gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
      client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 });
      cliEnv = {
        ...process.env,
        PLATFORM_BASE_URL: gateway.url,
        PLATFORM_API_KEY: key,
        PLATFORM_CONFIG_DIR: join(dir, "cli-config"),
      };
      const data = sayDataset(10); // 8 to train, 2 to validate
      const upload = async (name: string, text: string) =>
        (await client.files.create({ file: await toFile(Buffer.from(text), name), purpose: "fine-tune" })).id;
      trainFile = await upload("train.jsonl", data.train);
      validFile = await upload("valid.jsonl", data.valid);
      // The stand-in GPU machine's Python: its torch "sees" a GPU; training runs on the real Python.
      standIn = join(dir, "gpu-python");
      standInLog = join(dir, "gpu-python.log");
      await writeFile(
        standIn,
        `#!/bin/sh\ncase "$1" in\n  */probe.py) echo '{"torch":"2.9.0+cu128","cuda":true,"devices":1,"name":"Stand-in GPU"}'; exit 0;;\nesac\necho "$*" >> '${standInLog}'\nexec '${python}' "$@"\n`,
      );
      await chmod(standIn, 0o755);
    });

    afterAll(async () => {
      for (const t of trainers) await t.stop();
      await gateway?.close();
      await ctl?.redis.quit().catch(() => undefined);
      await redis?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("fine_tuned_model: the endpoint serving the base version, the one named after the model among several, else the model's name", async () => {
      const v1 = { name: "tiny-hf", version: "v1" };
      expect(await servingEndpointName(ctl, v1)).toBe("tiny-hf");
      await deployEndpoint(
        ctl,
        DeploymentConfig.parse({ endpoint: "zz-chat", model: { name: "tiny-hf", version: "v1" } }),
      );
      await deployEndpoint(
        ctl,
        DeploymentConfig.parse({ endpoint: "aa-new", model: { name: "tiny-hf", version: "v2" } }),
      );
      expect(await servingEndpointName(ctl, v1)).toBe("zz-chat");
      expect(await servingEndpointName(ctl, { name: "tiny-hf", version: "v2" })).toBe("aa-new");
      await deployEndpoint(
        ctl,
        DeploymentConfig.parse({ endpoint: "mm-chat", model: { name: "tiny-hf", version: "v1" } }),
      );
      expect(await servingEndpointName(ctl, v1)).toBe("mm-chat"); // the first by name
      await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny-hf", version: "v1" } }));
      expect(await servingEndpointName(ctl, v1)).toBe("tiny-hf"); // the one named after the model
      await deleteEndpoint(ctl, "tiny-hf");
      expect(await servingEndpointName(ctl, v1)).toBe("mm-chat");
    });

    it("a GPU job waits, saying so, while only CPU trainers run; they train CPU jobs meanwhile", async () => {
      // mm-chat serves the base (the first test deployed it too, beside zz-chat): the name clients use.
      await deployEndpoint(
        ctl,
        DeploymentConfig.parse({ endpoint: "mm-chat", model: { name: "tiny-hf", version: "v1" } }),
      );
      const cpu = await startTrainer(ctl, settings, {
        settings: loadSettings({ PLATFORM_TRAINER_PYTHON: python }).fineTuning,
      });
      trainers.push(cpu);
      expect(await cpu.offersGpu).toBe(false);

      const gpuJob = await create("tiny-gpu", 1);
      expect(gpuJob).toMatchObject({ status: "queued", waiting_for: "gpu_trainer", resources: { gpu: 1 } });
      expect((await messages(gpuJob.id)).at(-1)).toMatchObject({
        level: "warn",
        message: expect.stringContaining("Waiting for a GPU trainer"),
      });

      const cpuJob = await create("tiny-cpu", 0);
      expect(cpuJob).toMatchObject({ waiting_for: null, resources: { gpu: 0 } });
      const done = await waitForEnd(cpuJob.id);
      expect(done.status).toBe("succeeded");
      // Endpoints mm-chat and zz-chat serve tiny-hf@v1 (the first test deployed them): the first by
      // name, as GET /v1/models lists it for clients.
      expect(done.fine_tuned_model).toBe("mm-chat:acme.tiny-cpu");
      expect((await client.models.list()).data.map((m) => m.id)).toContain("mm-chat:acme.tiny-cpu");

      // The CPU trainer finished a job submitted after the GPU job and never took the GPU job.
      const queues = new QueueBase(ctl);
      try {
        const waiting = await queues.queueNamed(gpuQueueOf(FINE_TUNING_QUEUE)).getJob(gpuJob.id);
        expect(await waiting?.getState()).toBe("waiting");
      } finally {
        await queues.close();
      }
      expect(await retrieve(gpuJob.id)).toMatchObject({ status: "queued", waiting_for: "gpu_trainer" });
      expect(existsSync(standInLog)).toBe(false);
      const listed = (await client.fineTuning.jobs.list()).data as Job[];
      expect(listed.find((j) => j.id === gpuJob.id)?.waiting_for).toBe("gpu_trainer");
      const table = await runCli(["training", "jobs", "list"], cliEnv);
      expect(table.code).toBe(0);
      expect(table.stdout.split("\n").find((l) => l.includes(gpuJob.id))).toContain("queued (waits for a GPU trainer)");
      expect(table.stdout.split("\n").find((l) => l.includes(cpuJob.id))).toContain("succeeded");

      // A trainer offering a GPU starts: it takes the job.
      const gpu = await startTrainer(ctl, settings, {
        settings: loadSettings({ PLATFORM_TRAINER_PYTHON: standIn }).fineTuning,
        gpu: true,
        log: () => undefined,
      });
      trainers.push(gpu);
      expect(await gpu.offersGpu).toBe(true);
      expect((await retrieve(gpuJob.id)).waiting_for).toBeNull();
      const trained = await waitForEnd(gpuJob.id);
      expect(trained.error).toBeNull();
      expect(trained.status).toBe("succeeded");
      expect(trained.fine_tuned_model).toBe("mm-chat:acme.tiny-gpu");
      // Its train.py ran through the GPU machine's Python, asked for CUDA; the stand-in has none, and the job says so.
      const ran = await readFile(standInLog, "utf8");
      expect(ran).toContain(`/trainer/${gpuJob.id}/`);
      expect(ran).toContain("--device cuda");
      expect(ran).not.toContain(`/trainer/${cpuJob.id}/`);
      const said = await messages(gpuJob.id);
      expect(
        said.some(
          (e) => e.level === "warn" && e.message.includes("a GPU was asked for, but the trainer's torch sees none"),
        ),
      ).toBe(true);
    });

    it("a queued GPU job cancels out of the GPU queue", async () => {
      for (const t of trainers.splice(0)) await t.stop();
      const job = await create("tiny-gpu-cancelled", 1);
      expect(job.waiting_for).toBe("gpu_trainer");
      expect((await client.fineTuning.jobs.cancel(job.id)).status).toBe("cancelled");
      const queues = new QueueBase(ctl);
      try {
        expect(await queues.queueNamed(gpuQueueOf(FINE_TUNING_QUEUE)).getJob(job.id)).toBeUndefined();
      } finally {
        await queues.close();
      }
      expect((await retrieve(job.id)).waiting_for).toBeNull();
    });

    it("--gpu refuses a trainer whose torch sees no GPU; `auto` (platform up) says it sees none and takes CPU jobs only", async () => {
      const probe = await probeGpu(python as string);
      expect(probe.torch).toMatch(/^\d+\.\d+/);
      if (probe.cuda) return; // this machine has a GPU: nothing to refuse
      const tuning = loadSettings({ PLATFORM_TRAINER_PYTHON: python }).fineTuning;
      await expect(startTrainer(ctl, settings, { settings: tuning, gpu: true })).rejects.toThrow(NoGpuError);
      await expect(startTrainer(ctl, settings, { settings: tuning, gpu: true })).rejects.toThrow(
        /--gpu: this trainer's torch \(.+\) sees no GPU/,
      );
      const lines: string[] = [];
      const auto = await startTrainer(ctl, settings, { settings: tuning, gpu: "auto", log: (l) => lines.push(l) });
      try {
        expect(await auto.offersGpu).toBe(false);
        expect(lines.join("\n")).toMatch(
          /sees no GPU: CPU jobs only; jobs with resources.gpu wait for a trainer that offers one/,
        );
      } finally {
        await auto.stop();
      }

      const cli = await runCli(["trainer", "--gpu"], {
        ...process.env,
        REDIS_URL: redis.url,
        PLATFORM_DATA_DIR: dir,
        PLATFORM_TRAINER_PYTHON: python,
      });
      expect(cli.code).toBe(1);
      expect(cli.stderr).toMatch(/--gpu: this trainer's torch \(.+\) sees no GPU/);
    });

    it("a GPU job whose trainer is SIGKILLed is queued again, waiting for a GPU trainer, within the heartbeat window", async () => {
      for (const t of trainers.splice(0)) await t.stop();
      const child = spawn(process.execPath, [BIN, "trainer", "--gpu", "--health-port", "0"], {
        env: {
          ...process.env,
          REDIS_URL: redis.url,
          PLATFORM_DATA_DIR: dir,
          PLATFORM_TRAINER_PYTHON: standIn,
          PLATFORM_TRAINER_HEARTBEAT_MS: String(HEARTBEAT_MS),
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      child.stderr.on("data", (d) => (out += d));
      const exited = new Promise((resolve) => child.once("exit", resolve));
      try {
        await expect.poll(() => out, { timeout: 60_000 }).toContain("waiting for fine-tuning jobs (CPU and GPU)");
        const port = /\/livez, \/readyz and \/metrics on port (\d+)/.exec(out)?.[1];
        expect(port, out).toBeDefined();
        const health = `http://127.0.0.1:${port}`;
        expect((await fetch(`${health}/livez`)).status).toBe(200);
        const ready = await fetch(`${health}/readyz`);
        expect(ready.status).toBe(200);
        expect(await ready.json()).toMatchObject({ state: "ready", offers_gpu: true, running: 0 });
        expect(total(await scrape(`${health}/metrics`), "platform_trainer_offers_gpu")).toBe(1);

        const job = await create("tiny-gpu-lost", 1);
        await expect
          .poll(async () => (await retrieve(job.id)).status, { timeout: 60_000, interval: 50 })
          .toBe("running");
        const metrics = await scrape(`${health}/metrics`);
        expect(total(metrics, "platform_trainer_jobs_running", { queue: "gpu" })).toBe(1);
        expect(total(metrics, "platform_trainer_jobs_running", { queue: "cpu" })).toBe(0);

        child.kill("SIGKILL");
        await exited;
        // Within the window and the stall check's period (a third of it here), plus this machine's slack.
        await expect
          .poll(async () => retrieve(job.id), { timeout: 2 * HEARTBEAT_MS, interval: 50 })
          .toMatchObject({ status: "queued", waiting_for: "gpu_trainer" });
        const said = await messages(job.id);
        expect(said.at(-2)).toMatchObject({
          level: "warn",
          message: expect.stringMatching(/^The trainer running this job stopped \(no heartbeat for 2 s/),
        });
        expect(said.at(-1)).toMatchObject({
          level: "warn",
          message: expect.stringContaining("Waiting for a GPU trainer"),
        });
        const queues = new QueueBase(ctl);
        try {
          expect(await (await queues.queueNamed(gpuQueueOf(FINE_TUNING_QUEUE)).getJob(job.id))?.getState()).toBe(
            "waiting",
          );
        } finally {
          await queues.close();
        }
        expect((await client.fineTuning.jobs.cancel(job.id)).status).toBe("cancelled");
      } finally {
        child.kill("SIGKILL");
      }
    });
  },
);
