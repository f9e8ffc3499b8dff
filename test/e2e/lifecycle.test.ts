/**
 * The model lifecycle of issue 25's "Done when", walked on the shared stack as a new user walks
 * it, with the CLI and the official `openai` client (its names, `tiny`, `tuned`, `resumed`, `a1` and
 * `a2`, are this file's alone there, and the stack's trainer runs the reference venv, test/e2e-stack.ts): the suite's tiny Llama checkpoint registered and
 * deployed (float32, one replica); fine-tuned through the CLI (`training submit --dataset --watch`)
 * and through the openai client's fine-tuning API, the latter's trainer child SIGKILLed once a
 * checkpoint exists and the job resuming from it; the resulting adapter and two more
 * (scripts/reference/make-lora.py) served beside the base from that one replica and one queue, each
 * token for token as transformers + peft; perplexity and multiple-choice accuracy of base and adapter
 * held to transformers and lm-eval's hf backend; tiny@v2, served by no endpoint, evaluated on a temporary
 * one the CLI deploys and removes; an A/B test that requires evaluations, and its status
 * showing them. Skips, saying why, without the reference venv (scripts/reference/setup.sh).
 * LIFECYCLE_OUTPUTS=<file> writes the CLI's outputs there (the README's examples).
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { appendFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { convertedKey } from "../../src/models/converted.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { sayDataset } from "../helpers/fine-tuning-data.ts";
import { runLmEvalHf, writeChoiceTask } from "../helpers/lm-eval.ts";
import { QUESTIONS as EVALUATION_QUESTIONS, TEXTS } from "../helpers/evaluation-data.ts";
import { referencePython } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack } from "../helpers/shared-stack.ts";
import { type CliResult, runCli, type Stack, waitAvailable } from "../helpers/stack.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");
const MAKE_LORA = join(repoRoot, "scripts", "reference", "make-lora.py");
const PERPLEXITY = join(repoRoot, "scripts", "reference", "perplexity.py");
const TASK = "platform_lifecycle_mc";

const python = referencePython();
const skip =
  python === undefined
    ? "the reference venv (.venv-ref, scripts/reference/setup.sh) is absent"
    : spawnSync(python, ["-c", "import torch, transformers, peft, lm_eval.models.huggingface"], { stdio: "ignore" })
          .status !== 0
      ? `${python} cannot import torch, transformers, peft and lm_eval's hf backend (scripts/reference/setup.sh)`
      : undefined;
if (skip) console.warn(`e2e/lifecycle.test.ts skipped: ${skip}`);

/** Six of the evaluation tests' questions: enough for lm-eval to compare with, quick on two cores. */
const QUESTIONS = EVALUATION_QUESTIONS.slice(0, 6);

type Greedy = { prompts: number[][]; new_tokens: number; outputs: number[][]; min_gap: number };
type MadeLora = {
  prompts: number[][];
  new_tokens: number;
  adapters: Record<string, { dir: string; outputs: number[][] }>;
};
type Eval = { metric: string; value: number; n: number; stderr: number | null };

let work: string;
let stack: Stack;
let made: MadeLora;
let client: OpenAI;
/** The openai-client job, killed and resumed: the fine-tuned adapter served and evaluated below. */
let tuned: OpenAI.FineTuning.FineTuningJob;
let tunedDir: string;
/** The one replica `tiny` started with. */
let replicaId: string;
/** tiny@v1's perplexity on texts.jsonl, float32 as `tiny` serves it. */
let v1Perplexity: number;
const outputs = process.env.LIFECYCLE_OUTPUTS;

/** Runs the CLI against the stack; with LIFECYCLE_OUTPUTS set, records the command and its output. */
async function cli(args: string[], show = args): Promise<CliResult> {
  const r = await runCli(args, stack.env, work);
  if (outputs)
    await appendFile(
      outputs,
      `\n\`\`\`\n$ platform ${show.join(" ")}\n${r.stdout}${r.stderr ? `[stderr]\n${r.stderr}` : ""}\`\`\`\n`,
    );
  return r;
}

function python3(args: string[], env: Record<string, string> = {}): Promise<string> {
  const child = spawn(python as string, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) =>
    child.once("close", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${args[0]} failed:\n${err.slice(-4000)}`)),
    ),
  );
}

/** The trainer's Python child of a job: its command line names the job's working directory. */
function trainerChildren(jobId: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", `trainer/${jobId}/`], { encoding: "utf8" })
      .trim()
      .split("\n")
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

async function deploy(endpoint: string, version: string): Promise<void> {
  const file = join(work, `${endpoint}.yaml`);
  await writeFile(
    file,
    [
      `endpoint: ${endpoint}`,
      "model:",
      "  name: tiny",
      `  version: ${version}`,
      "runtime:",
      "  dtype: float32",
      "resources:",
      "  replicas: 1",
      "  parallel: 4",
      "",
    ].join("\n"),
  );
  const r = await cli(
    ["inference", "deploy", "--config", file],
    ["inference", "deploy", "--config", `${endpoint}.yaml`],
  );
  expect(r.code, r.stderr).toBe(0);
  await waitAvailable(stack, endpoint, 180_000);
}

async function evaluate(target: string, dataset: string, metric: string): Promise<Eval> {
  const r = await cli(["training", "evaluate", target, "--dataset", dataset, "--metric", metric, "--json"]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Eval;
}

/** lm-eval's hf backend on the multiple-choice file, the base alone or with a PEFT adapter. */
async function lmEval(data: string, adapter?: string): Promise<{ acc: number; stderr: number }> {
  const taskDir = join(work, "tasks");
  await mkdir(taskDir, { recursive: true });
  await writeChoiceTask(taskDir, TASK, data);
  const { metrics } = await runLmEvalHf(python as string, {
    checkpoint: CHECKPOINT,
    adapter,
    task: TASK,
    taskDir,
    output: join(work, `lm-eval-${adapter ? "adapter" : "base"}`),
  });
  return { acc: metrics["acc,none"] as number, stderr: metrics["acc_stderr,none"] as number };
}

beforeAll(async () => {
  if (skip) return;
  work = await mkdtemp(join(tmpdir(), "platform-lifecycle-"));
  const lora = spawnSync(python as string, [MAKE_LORA, CHECKPOINT, join(work)], { encoding: "utf8", timeout: 300_000 });
  if (lora.status !== 0) throw new Error(`make-lora.py failed: ${lora.stderr}`);
  made = JSON.parse(lora.stdout) as MadeLora;
  stack = await sharedStack();
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
  if (outputs) await writeFile(outputs, "# Real outputs of test/e2e/lifecycle.test.ts\n");
}, 300_000);

afterAll(async () => {
  if (skip) return;
  await undeploy(stack, "tiny");
  if (work) await rm(work, { recursive: true, force: true });
});

describe.skipIf(skip !== undefined)("the model lifecycle on platform up", () => {
  const { train, valid } = sayDataset();

  it("registers the checkpoint as tiny@v1 and deploys it: one float32 replica", async () => {
    const r = await cli(
      ["training", "submit", "--name", "tiny", "--source", CHECKPOINT],
      ["training", "submit", "--name", "tiny", "--source", "test/fixtures/hf/llama"],
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("registered tiny@v1");
    await deploy("tiny", "v1");
    const { body } = await stack.admin<{ replica_list: { id: string }[] }>("GET", "/admin/v1/endpoints/tiny");
    expect(body.replica_list).toHaveLength(1);
    replicaId = body.replica_list[0]!.id;
  }, 240_000);

  it("fine-tunes through the CLI: the local files uploaded, --watch prints the losses, validation loss falls", async () => {
    await writeFile(join(work, "train.jsonl"), train);
    await writeFile(join(work, "valid.jsonl"), valid);
    const r = await cli([
      "training",
      "submit",
      "--name",
      "tuned",
      "--base",
      "tiny@v1",
      "--dataset",
      "train.jsonl",
      "--validation",
      "valid.jsonl",
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
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("uploading train.jsonl");
    expect(r.stdout).toMatch(
      /fine-tuning job ftjob-[0-9a-f]{24} queued: tiny@v1 → adapter tuned \(lora, 2 epochs, seed 3\)/,
    );
    const losses = [...r.stdout.matchAll(/Step (\d+): validation loss=(\d+\.\d+)/g)].map((m) => [
      Number(m[1]),
      Number(m[2]),
    ]);
    expect(losses.map(([step]) => step)).toEqual([0, 20, 40]);
    expect(losses.at(-1)![1]).toBeLessThan(losses[0]![1]!);
    expect(r.stdout).toContain("succeeded: tiny:tuned (tuned@v1)");
  }, 300_000);

  it("fine-tunes through the openai client; its trainer child SIGKILLed after a checkpoint, it resumes and succeeds", async () => {
    const upload = async (name: string, text: string) =>
      (await client.files.create({ file: await toFile(Buffer.from(text), name), purpose: "fine-tune" })).id;
    const created = await client.fineTuning.jobs.create({
      model: "tiny@v1",
      training_file: await upload("train.jsonl", train),
      validation_file: await upload("valid.jsonl", valid),
      seed: 7,
      suffix: "resumed",
      hyperparameters: { n_epochs: 4, batch_size: 1, learning_rate_multiplier: 100 },
      method: { type: "supervised", training: "lora", lora: { rank: 4, alpha: 8 } },
      checkpoint_interval: 3,
    } as unknown as OpenAI.FineTuning.JobCreateParams);
    expect(created.status).toBe("queued");
    // Killed once its first checkpoint is in the store, before the run can end.
    await expect
      .poll(async () => (await client.fineTuning.jobs.checkpoints.list(created.id)).data.length, {
        timeout: 120_000,
        interval: 20,
      })
      .toBeGreaterThan(0);
    const pids = trainerChildren(created.id);
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, "SIGKILL");

    // Bounded by the test's own timeout.
    await expect
      .poll(async () => (await client.fineTuning.jobs.retrieve(created.id)).status, { timeout: 600_000, interval: 200 })
      .toMatch(/^(succeeded|failed|cancelled)$/);
    const job = await client.fineTuning.jobs.retrieve(created.id);
    expect(job.error).toBeNull();
    expect(job.status).toBe("succeeded");
    expect(job.fine_tuned_model).toBe("tiny:resumed");
    const events: OpenAI.FineTuning.FineTuningJobEvent[] = [];
    for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 100 })) events.push(e);
    events.reverse();
    const messages = events.map((e) => e.message);
    expect(
      messages.some((m) =>
        /^The trainer process was killed \(SIGKILL\) after step \d+; resuming from the checkpoint at step \d+/.test(m),
      ),
      messages.join("\n"),
    ).toBe(true);
    expect(messages.some((m) => /^Resumed from the checkpoint at step \d+$/.test(m))).toBe(true);
    const validLosses = events
      .map((e) => e.data as { step?: number; valid_loss?: number } | null)
      .filter((d): d is { step: number; valid_loss: number } => typeof d?.valid_loss === "number");
    expect(validLosses[0]?.step).toBe(0); // the base's
    expect(validLosses.at(-1)!.valid_loss).toBeLessThan(validLosses[0]!.valid_loss);
    const checkpoints = await client.fineTuning.jobs.checkpoints.list(job.id);
    // Every 3 steps and at each epoch's end (20, 40, 60), the newest 10 kept; the last step is the result, not a checkpoint.
    expect(checkpoints.data.map((c) => c.step_number)).toEqual([78, 75, 72, 69, 66, 63, 60, 57, 54, 51]);
    tuned = job;
    // The CLI shows the same story, whole: following an ended job prints every event, oldest first.
    const shown = await cli(["training", "jobs", "events", job.id]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.trimEnd().split("\n")).toHaveLength(events.length);
    const followed = await runCli(["training", "jobs", "events", job.id, "--follow"], stack.env);
    expect(followed.code, followed.stderr).toBe(0);
    expect(followed.stdout.startsWith(shown.stdout), followed.stdout.slice(0, 300)).toBe(true);

    const list = await cli(["training", "list"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/resumed[\s│]+v1[\s│]+llamacpp[\s│]+generate[\s│]+LoRA r4[\s│]+.*tiny@v1/);
    expect(list.stdout).toMatch(/tuned[\s│]+v1[\s│]+llamacpp[\s│]+generate[\s│]+LoRA r4[\s│]+.*tiny@v1/);
    // The adapter's files, where the stack's file:// artifact store keeps them.
    const { body } = await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models");
    const version = body.data.find((m) => m.name === "resumed") as RegisteredVersion;
    expect(version.adapter?.base).toEqual({ name: "tiny", version: "v1" });
    expect(version.training?.job_id).toBe(job.id);
    tunedDir = join(stack.dataDir, "artifacts", version.artifact as string);
    expect(existsSync(join(tunedDir, "adapter_model.safetensors"))).toBe(true);
  }, 300_000);

  it("serves the fine-tuned adapter, two more and the base from one replica and one queue, each as transformers + peft", async () => {
    for (const a of ["a1", "a2"]) {
      const r = await cli(
        ["training", "submit", "--name", a, "--base", "tiny@v1", "--source", made.adapters[a]!.dir],
        ["training", "submit", "--name", a, "--base", "tiny@v1", "--source", `./${a}`],
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain("LoRA adapter of tiny@v1");
    }
    const base = JSON.parse(await python3([MAKE_LORA, "--greedy", CHECKPOINT])) as Greedy;
    const ft = JSON.parse(await python3([MAKE_LORA, "--greedy", CHECKPOINT, tunedDir])) as Greedy;
    // The fine-tune changed the answers (no near ties either: llama.cpp and torch differ by ~1e-5 of a logit).
    expect(ft.outputs, JSON.stringify(ft.outputs)).not.toEqual(base.outputs);
    expect(ft.min_gap).toBeGreaterThan(1e-3);
    expect(base.min_gap).toBeGreaterThan(1e-3);
    expect(made.prompts).toEqual(base.prompts.slice(0, made.prompts.length));

    const cases = base.prompts.flatMap((prompt, i) => [
      { model: "tiny", prompt, want: base.outputs[i]! },
      { model: tuned.fine_tuned_model as string, prompt, want: ft.outputs[i]! },
      ...(i < made.prompts.length
        ? ["a1", "a2"].map((a) => ({ model: `tiny:${a}`, prompt, want: made.adapters[a]!.outputs[i]! }))
        : []),
    ]);
    const answers = await Promise.all(
      cases.map((c) =>
        client.completions.create({ model: c.model, prompt: c.prompt, max_tokens: base.new_tokens, temperature: 0 }),
      ),
    );
    // transformers' ids as text through the platform's own conversion of the base (its vocabulary),
    // kept by its manifest digest (src/models/converted.ts) among the other files' models.
    const models = (await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models")).body.data;
    const tinyV1 = models.find((m) => m.name === "tiny" && m.version === "v1") as RegisteredVersion;
    const gguf = join(stack.dataDir, "artifacts", convertedKey(tinyV1.sha256));
    expect(existsSync(gguf)).toBe(true);
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const vocab = await llama.loadModel({ modelPath: gguf, vocabOnly: true });
    try {
      for (const [i, c] of cases.entries()) {
        // An answer shorter than new_tokens ended at EOS, in transformers and here alike.
        const full = c.want.length === base.new_tokens;
        expect(answers[i]!.choices[0]!.finish_reason, c.model).toBe(full ? "length" : "stop");
        if (full) expect(answers[i]!.usage?.completion_tokens, c.model).toBe(base.new_tokens);
        expect(answers[i]!.choices[0]!.text, `${c.model} on ${JSON.stringify(c.prompt)}`).toBe(
          vocab.detokenize(c.want as Token[]),
        );
      }
      if (outputs)
        await appendFile(
          outputs,
          `\nOne replica, interleaved requests (temperature 0), each equal to transformers + peft:\n\n\`\`\`\n${cases
            .map(
              (c, i) =>
                `${c.model.padEnd(12)} ${JSON.stringify(vocab.detokenize(c.prompt as Token[]))} → ${JSON.stringify(answers[i]!.choices[0]!.text)}`,
            )
            .join("\n")}\n\`\`\`\n`,
        );
    } finally {
      await vocab.dispose();
    }

    // The replica it started with served them all, from the version's one queue: adapters add neither.
    const { body: status } = await stack.admin<{
      replicas: { desired: number; ready: number };
      replica_list: { id: string; queue?: string }[];
    }>("GET", "/admin/v1/endpoints/tiny");
    expect(status.replicas).toMatchObject({ desired: 1, ready: 1 });
    expect(status.replica_list.map((r) => r.id)).toEqual([replicaId]);
    const redis = new Redis(stack.redisUrl);
    try {
      const queues = new Set<string>();
      for (const key of await redis.keys("platform:{*}:meta"))
        queues.add(key.slice("platform:".length, -":meta".length));
      expect([...queues].filter((q) => q.startsWith("{tiny@"))).toEqual([status.replica_list[0]!.queue ?? "{tiny@v1}"]);
      expect([...queues].filter((q) => /^\{(a1|a2|resumed|tuned)[@~]/.test(q))).toEqual([]);
    } finally {
      redis.disconnect();
    }
  }, 300_000);

  it("evaluates base and adapter: perplexity as transformers (+ peft), accuracy as lm-eval's hf backend", async () => {
    await writeFile(join(work, "texts.jsonl"), `${TEXTS.map((text) => JSON.stringify({ text })).join("\n")}\n`);
    const questions = join(work, "questions.jsonl");
    await writeFile(
      questions,
      `${QUESTIONS.map(([context, choices, answer]) => JSON.stringify({ context, choices, answer })).join("\n")}\n`,
    );
    const adapter = (tuned.fine_tuned_model as string).split(":")[1] as string;
    for (const [target, dir] of [
      ["tiny@v1", undefined],
      [`tiny@v1:${adapter}`, tunedDir],
    ] as const) {
      const ppl = await evaluate(target, "texts.jsonl", "perplexity");
      const want = JSON.parse(
        await python3([PERPLEXITY, CHECKPOINT, join(work, "texts.jsonl"), ...(dir ? [dir] : [])]),
      ) as { perplexity: number };
      expect(ppl).toMatchObject({ metric: "perplexity", n: TEXTS.length });
      expect(Math.abs(ppl.value - want.perplexity) / want.perplexity, target).toBeLessThanOrEqual(1e-3);
      if (!dir) v1Perplexity = ppl.value;

      const acc = await evaluate(target, "questions.jsonl", "accuracy");
      const lm = await lmEval(questions, dir);
      expect(acc).toMatchObject({ metric: "accuracy", n: QUESTIONS.length, value: lm.acc });
      expect(Math.abs((acc.stderr as number) - lm.stderr), target).toBeLessThan(1e-12);
    }
    const list = await cli(["training", "list"]);
    expect(list.stdout).toMatch(/tiny\s+│\s+v1\s+│.*accuracy \S+±\S+ \(n 6\);.*perplexity \S+±\S+ \(n 4\)/);
    expect(list.stdout).toMatch(/resumed\s+│\s+v1\s+│.*accuracy \S+±\S+ \(n 6\);.*perplexity \S+±\S+ \(n 4\)/);
  }, 600_000);

  it("A/B: an A/B test requiring perplexity takes evaluated versions only, and its status shows the results", async () => {
    for (const v of ["v2", "v3"]) {
      const r = await cli(
        ["training", "submit", "--name", "tiny", "--source", CHECKPOINT],
        ["training", "submit", "--name", "tiny", "--source", "test/fixtures/hf/llama"],
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`registered tiny@${v}`);
    }
    // tiny@v2 is served by no endpoint: the CLI evaluates it on a temporary one with tiny's settings, then removes it.
    const evaluated = await cli([
      "training",
      "evaluate",
      "tiny@v2",
      "--dataset",
      "texts.jsonl",
      "--metric",
      "perplexity",
      "--json",
    ]);
    expect(evaluated.code, evaluated.stderr).toBe(0);
    expect(evaluated.stderr).toContain(
      "no endpoint serves tiny@v2: deploying the temporary endpoint tiny--eval-v2; it is removed at the end (tiny's settings, 1 replica)",
    );
    expect(evaluated.stderr).toContain("removed tiny--eval-v2");
    expect((await stack.admin("GET", "/admin/v1/endpoints/tiny--eval-v2")).status).toBe(404);
    const v2 = JSON.parse(evaluated.stdout) as Eval;
    expect(v2).toMatchObject({ metric: "perplexity", n: TEXTS.length });
    // The same checkpoint served float32 as tiny is: v1's number (llama.cpp's default float16 KV cache would move it by up to 2e-2).
    expect(Math.abs(v2.value - v1Perplexity) / v1Perplexity).toBeLessThanOrEqual(1e-3);

    const refused = await cli([
      "inference",
      "abtest",
      "create",
      "tiny",
      "--split",
      "v1=50,v3=50",
      "--require-eval",
      "perplexity",
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("tiny@v3 has never been evaluated on perplexity");
    const created = await cli([
      "inference",
      "abtest",
      "create",
      "tiny",
      "--split",
      "v1=50,v2=50",
      "--require-eval",
      "perplexity",
    ]);
    expect(created.code, created.stderr).toBe(0);
    await stack.waitFor(
      async () =>
        (await stack.admin<{ abtest?: { state: string } }>("GET", "/admin/v1/endpoints/tiny/abtest")).body.abtest
          ?.state === "running",
      "the A/B test to run",
      180_000,
    );
    await Promise.all(
      Array.from({ length: 6 }, () =>
        client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 4, temperature: 0 }),
      ),
    );
    // The live numbers: the six requests, split between the variants.
    await stack.waitFor(
      async () =>
        (
          await stack.admin<{ variants: { stats: { requests: number } }[] }>("GET", "/admin/v1/endpoints/tiny/abtest")
        ).body.variants.reduce((sum, v) => sum + v.stats.requests, 0) === 6,
      "the A/B test's request counts",
    );
    const status = await cli(["inference", "abtest", "status", "tiny"]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain("EVALUATIONS");
    expect(status.stdout).toMatch(/v1 .*perplexity \S+±\S+ \(n 4\)/);
    expect(status.stdout).toMatch(/v2 .*perplexity \S+±\S+ \(n 4\)/);
  }, 600_000);
});
