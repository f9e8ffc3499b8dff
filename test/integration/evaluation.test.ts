/**
 * Evaluation jobs end to end, held to the references: the tiny Llama checkpoint under
 * test/fixtures/hf/llama is converted by the platform and served by a real gateway and llama.cpp
 * worker (runtime.dtype float32, test/helpers/float32-checkpoint.ts) with an evaluation coordinator
 * beside it. Perplexity must be what transformers computes (scripts/reference/perplexity.py,
 * relative difference ≤ 1e-3); multiple-choice accuracy what lm-evaluation-harness's hf backend
 * finds on the same checkpoint and data (the same accuracy, each choice's log-likelihood within
 * 1e-3 relative). Then the edges: exact match, bad lines named, an undeployed version refused, A/B
 * tests' --require-eval and status, the CLI's --compare, another organization's 404. Skips, saying
 * why, without the reference venv (scripts/reference/setup.sh).
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type EvaluationCoordinator, startEvaluationCoordinator } from "../../src/evaluation/index.ts";
import { readScores } from "../../src/evaluation/store.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { importModel } from "../../src/models/import.ts";
import { openStore } from "../../src/storage/index.ts";
import { loadEngine } from "../../workers/engines/index.ts";
import { startWorker } from "../../workers/worker.ts";
import { type ServedCheckpoint, serveFloat32Checkpoint } from "../helpers/float32-checkpoint.ts";
import { runLmEvalHf, writeChoiceTask } from "../helpers/lm-eval.ts";
import { QUESTIONS, TEXTS } from "../helpers/evaluation-data.ts";
import { referencePython } from "../helpers/models.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");
const PERPLEXITY = join(repoRoot, "scripts", "reference", "perplexity.py");
const CLI = fileURLToPath(new URL("../helpers/evaluation-cli.ts", import.meta.url));
const TASK = "platform_eval_mc";

const python = referencePython();
const skip =
  python === undefined
    ? "no reference venv (.venv-ref, made by scripts/reference/setup.sh, or PLATFORM_TEST_PYTHON_REF)"
    : spawnSync(python, ["-c", "import torch, transformers, lm_eval.models.huggingface"], { stdio: "ignore" })
          .status !== 0
      ? `${python} cannot import torch, transformers and lm_eval's hf backend (scripts/reference/setup.sh installs them)`
      : undefined;
if (skip !== undefined) console.warn(`evaluation.test: ${skip}; skipping`);

let served: ServedCheckpoint;
let coordinator: EvaluationCoordinator;
let storage: string;
let stopSecond: (() => Promise<void>) | undefined;

beforeAll(async () => {
  if (skip !== undefined) return;
  served = await serveFloat32Checkpoint(CHECKPOINT, "tiny-hf-eval-1", { PLATFORM_STORAGE_ROOTS: "<data dir>/storage" });
  storage = join(served.dataDir, "storage");
  await mkdir(storage);
  coordinator = await startEvaluationCoordinator(served.ctl, served.settings);
}, 180_000);

afterAll(async () => {
  await coordinator?.stop();
  await stopSecond?.();
  await served?.stop();
});

async function api<T = Record<string, unknown>>(
  method: string,
  path: string,
  body?: unknown,
  key = served.key,
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${served.gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

type Evaluation = {
  id: string;
  state: string;
  metric: string;
  items: number;
  dataset_sha256: string;
  result: { value: number; n: number; stderr: number | null; tokens?: number; boundary_merges?: number } | null;
  error: { code: string; message: string } | null;
};

async function evaluate(body: Record<string, unknown>): Promise<Evaluation> {
  const created = await api<Evaluation>("POST", "/admin/v1/evaluations", body);
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const evaluation = async () => (await api<Evaluation>("GET", `/admin/v1/evaluations/${created.body.id}`)).body;
  await expect
    .poll(async () => (await evaluation()).state, { timeout: 120_000, message: `evaluation ${created.body.id}` })
    .toMatch(/^(succeeded|failed|cancelled)$/);
  return evaluation();
}

async function dataset(name: string, lines: unknown[]): Promise<string> {
  const path = join(storage, name);
  await writeFile(path, `${lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n")}\n`);
  return path;
}

function cli(args: string[], key = served.key): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: {
      ...process.env,
      PLATFORM_BASE_URL: served.gateway.url,
      PLATFORM_API_KEY: key,
      PLATFORM_CONFIG_DIR: join(served.dataDir, "cli-config"),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

function run(command: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) =>
    child.once("close", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${command} ${args[0]} failed:\n${err.slice(-4000)}`)),
    ),
  );
}

describe.skipIf(skip !== undefined)("evaluation jobs", () => {
  let perplexityDataset: string;
  let firstPerplexity: Evaluation;

  it("computes perplexity as transformers does (pooled over the lines, BOS first)", async () => {
    perplexityDataset = await dataset(
      "texts.jsonl",
      TEXTS.map((text) => ({ text })),
    );
    const reference = JSON.parse(await run(python as string, [PERPLEXITY, CHECKPOINT, perplexityDataset])) as {
      perplexity: number;
      tokens: number;
      lines: { nll: number; tokens: number }[];
    };
    const e = await evaluate({ model: "tiny-hf@v1", dataset: perplexityDataset });
    expect(e.state, JSON.stringify(e.error)).toBe("succeeded");
    expect(e.metric).toBe("perplexity");
    const r = e.result as NonNullable<Evaluation["result"]>;
    expect(r.n).toBe(TEXTS.length);
    expect(r.tokens).toBe(reference.tokens);
    expect(Math.abs(r.value - reference.perplexity) / reference.perplexity).toBeLessThanOrEqual(1e-3);
    // The delta method's standard error, from transformers' own per-line numbers.
    const rate = Math.log(reference.perplexity);
    const meanTokens = reference.tokens / reference.lines.length;
    const psi = reference.lines.map((l) => (reference.perplexity * (l.nll - rate * l.tokens)) / meanTokens);
    const mu = psi.reduce((s, x) => s + x, 0) / psi.length;
    const sd = Math.sqrt(psi.reduce((s, x) => s + (x - mu) ** 2, 0) / (psi.length - 1));
    expect(Math.abs((r.stderr as number) - sd / Math.sqrt(psi.length)) / (sd / Math.sqrt(psi.length))).toBeLessThan(
      1e-2,
    );
    firstPerplexity = e;
  }, 120_000);

  it("scores a multiple-choice task as lm-evaluation-harness's hf backend does", async () => {
    const data = await dataset(
      "questions.jsonl",
      QUESTIONS.map(([context, choices, answer]) => ({ context, choices, answer })),
    );
    const taskDir = join(served.dataDir, "tasks");
    await mkdir(taskDir, { recursive: true });
    // The platform appends each choice exactly as written: lm-eval's target_delimiter is "" to match.
    const yaml = await writeChoiceTask(taskDir, TASK, data);
    const { metrics, samples: samplesFile } = await runLmEvalHf(python as string, {
      checkpoint: CHECKPOINT,
      task: TASK,
      taskDir,
      output: join(served.dataDir, "lm-eval-out"),
      logSamples: true,
    });
    const samples = (await readFile(samplesFile as string, "utf8"))
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as { doc_id: number; acc: number; filtered_resps: [string, string][] });

    const e = await evaluate({ model: "tiny-hf@v1", dataset: data });
    expect(e.state, JSON.stringify(e.error)).toBe("succeeded");
    expect(e.metric).toBe("accuracy");
    // The same task YAML through the CLI's --task: the platform reads lm-eval's own task file.
    const viaTask = await cli(["training", "evaluate", "tiny-hf@v1", "--task", yaml, "--json"]);
    expect(viaTask.code, viaTask.stderr).toBe(0);
    expect(JSON.parse(viaTask.stdout)).toEqual({
      metric: "accuracy",
      value: metrics["acc,none"],
      n: QUESTIONS.length,
      stderr: e.result?.stderr,
    });
    const r = e.result as NonNullable<Evaluation["result"]>;
    expect(r.n).toBe(QUESTIONS.length);
    expect(r.value).toBe(metrics["acc,none"]);
    expect(Math.abs((r.stderr as number) - (metrics["acc_stderr,none"] as number))).toBeLessThan(1e-12);
    // No choice's first token merged with the context's last: the sequences scored are lm-eval's own.
    expect(r.boundary_merges).toBe(0);
    const scores = await readScores(served.ctl, e.id);
    for (const sample of samples) {
      const mine = scores.get(sample.doc_id);
      expect(mine?.x, `doc ${sample.doc_id} acc`).toBe(sample.acc);
      sample.filtered_resps.forEach(([ll], j) => {
        const got = mine?.lls?.[j] as number;
        expect(
          Math.abs(got - Number(ll)) / Math.abs(Number(ll)),
          `doc ${sample.doc_id} choice ${j}`,
        ).toBeLessThanOrEqual(1e-3);
      });
    }
  }, 300_000);

  it("scores exact match on the greedy answer, compared as written", async () => {
    const prompts = ["Once upon a time, there was a", "The little dog ran to the", "Lily and Tom"];
    const greedy: string[] = [];
    for (const prompt of prompts) {
      const { body } = await api<{ choices: { text: string }[] }>("POST", "/v1/completions", {
        model: "tiny-hf",
        prompt,
        max_tokens: 6,
        temperature: 0,
        stop: ["\n\n"],
      });
      greedy.push(body.choices[0]?.text as string);
    }
    const data = await dataset("qa.jsonl", [
      { prompt: prompts[0], answer: greedy[0] },
      { prompt: prompts[1], answer: greedy[1] },
      // The right words with a trailing space: lm-eval's exact_match does not strip, so this is wrong.
      { prompt: prompts[2], answer: `${greedy[2]} ` },
    ]);
    const e = await evaluate({ model: "tiny-hf@v1", dataset: data, max_tokens: 6 });
    expect(e.state, JSON.stringify(e.error)).toBe("succeeded");
    const r = e.result as NonNullable<Evaluation["result"]>;
    expect(r.value).toBeCloseTo(2 / 3, 12);
    expect(r.stderr).toBeCloseTo(Math.sqrt(1 / 3) / Math.sqrt(3), 12);
  }, 60_000);

  it("names the bad lines, and refuses what no endpoint serves", async () => {
    const bad = await dataset("bad.jsonl", [
      { context: "The cat", choices: [" sat", " ran"], answer: 0 },
      { context: "The dog", choices: " ran", answer: 0 },
      "{not json",
      { context: "A bird", choices: [" flew", " sang"], answer: 2 },
    ]);
    const refused = await api<{ error: { message: string; param: string } }>("POST", "/admin/v1/evaluations", {
      model: "tiny-hf@v1",
      dataset: bad,
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error.param).toBe("dataset");
    expect(refused.body.error.message).toContain("line 2: choices: expected an array of 2 to 64 non-empty strings");
    expect(refused.body.error.message).toContain("line 3: not valid JSON");
    expect(refused.body.error.message).toContain("line 4: answer: expected the index of the right choice, 0 to 1");

    const outside = await api<{ error: { code: string } }>("POST", "/admin/v1/evaluations", {
      model: "tiny-hf@v1",
      dataset: join(served.dataDir, "model.gguf"),
    });
    expect(outside.status).toBe(403);

    const noAdapter = await api<{ error: { code: string; message: string } }>("POST", "/admin/v1/evaluations", {
      model: "tiny-hf@v1:no-such-adapter",
      dataset: perplexityDataset,
    });
    expect(noAdapter.status).toBe(404);
    expect(noAdapter.body.error.code).toBe("adapter_not_found");

    const gguf = join(served.dataDir, "model.gguf");
    await importModel(
      { ctl: served.ctl, artifacts: openStore(served.settings.artifactsUrl), scratchDir: join(served.dataDir, "tmp") },
      { name: "tiny-hf", framework: "llamacpp", source: gguf },
    );
    const undeployed = await api<{ error: { code: string; message: string } }>("POST", "/admin/v1/evaluations", {
      model: "tiny-hf@v2",
      dataset: perplexityDataset,
    });
    expect(undeployed.status).toBe(409);
    expect(undeployed.body.error.code).toBe("model_not_deployed");
    expect(undeployed.body.error.message).toContain("platform inference deploy --model tiny-hf --version v2");
  }, 120_000);

  it("lets an A/B test require evaluations, and shows them beside the live numbers", async () => {
    const refused = await api<{ error: { message: string; param: string } }>(
      "PUT",
      "/admin/v1/endpoints/tiny-hf/abtest",
      {
        split: "v1=50,v2=50",
        require_eval: "perplexity",
      },
    );
    expect(refused.status).toBe(400);
    expect(refused.body.error.param).toBe("require_eval");
    expect(refused.body.error.message).toContain("tiny-hf@v2 has never been evaluated on perplexity");
    expect(refused.body.error.message).toContain(
      "platform training evaluate tiny-hf@v2 --dataset <file> --metric perplexity",
    );

    // v2 served by an endpoint of its own, evaluated through the CLI with --compare against v1.
    await deployEndpoint(
      served.ctl,
      DeploymentConfig.parse({
        endpoint: "tiny-hf-next",
        model: { name: "tiny-hf", version: "v2" },
        runtime: { dtype: "float32" },
        resources: { parallel: 1, cpu: 1 },
      }),
    );
    const endpoint = await getEndpoint(served.ctl, "tiny-hf-next");
    const worker = startWorker({
      ctl: served.ctl,
      endpoint,
      replicaId: "tiny-hf-eval-2",
      loadEngine: () => loadEngine(endpoint, join(served.dataDir, "model.gguf")),
    });
    await worker.ready;
    stopSecond = () => worker.drain({ deadlineMs: 0 });
    const compared = await cli([
      "training",
      "evaluate",
      "tiny-hf",
      "--dataset",
      perplexityDataset,
      "--compare",
      "v1,v2",
      "--json",
    ]);
    expect(compared.code, compared.stderr).toBe(0);
    const out = JSON.parse(compared.stdout) as {
      metric: string;
      a: { value: number };
      b: { value: number };
      difference: number;
      ci95: [number, number];
      method: string;
    };
    expect(out.metric).toBe("perplexity");
    // The same weights and dataset: the same number, a paired difference of 0.
    expect(out.a.value).toBeCloseTo(firstPerplexity.result?.value as number, 6);
    expect(out.method).toBe("paired");
    expect(Math.abs(out.difference)).toBeLessThan(1e-6 * out.a.value);
    expect(out.ci95[0]).toBeLessThanOrEqual(out.difference);
    expect(out.ci95[1]).toBeGreaterThanOrEqual(out.difference);
    const table = await cli(["training", "evaluate", "tiny-hf", "--dataset", perplexityDataset, "--compare", "v1,v2"]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(
      /difference \(tiny-hf@v2 − tiny-hf@v1\): .*95% CI \[.*\] \(paired per item: same dataset\)/,
    );

    const accepted = await api("PUT", "/admin/v1/endpoints/tiny-hf/abtest", {
      split: "v1=50,v2=50",
      require_eval: "perplexity",
    });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(201);
    const status = await cli(["inference", "abtest", "status", "tiny-hf"]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain("EVALUATIONS");
    expect(status.stdout).toMatch(/v1 .*perplexity \S+±\S+ \(n 4\)/);
    expect(status.stdout).toMatch(/v2 .*perplexity \S+±\S+ \(n 4\)/);
    const list = await cli(["training", "list"]);
    expect(list.stdout).toMatch(/tiny-hf\s+│\s+v1\s+│.*accuracy \S+±\S+ \(n 10\);.*perplexity \S+±\S+ \(n 4\)/);
    expect(list.stdout).toMatch(/tiny-hf\s+│\s+v2\s+│.*perplexity \S+±\S+ \(n 4\)/);
  }, 180_000);

  it("fails naming the line the model refused", async () => {
    // Longer than the fixture's 256-token context: the engine refuses that line, and the run stops there.
    const data = await dataset("too-long.jsonl", [{ text: TEXTS[0] }, { text: TEXTS.join(" ").repeat(20) }]);
    const e = await evaluate({ model: "tiny-hf@v1", dataset: data });
    expect(e.state).toBe("failed");
    expect(e.error?.message).toMatch(/^line 2: /);
    expect(e.result).toBeNull();
  }, 60_000);

  it("cancels a running evaluation", async () => {
    const long = await dataset(
      "long.jsonl",
      Array.from({ length: 400 }, (_, i) => ({ text: `${TEXTS[i % TEXTS.length]} ${i}` })),
    );
    const created = await api<Evaluation>("POST", "/admin/v1/evaluations", {
      model: "tiny-hf@v1",
      dataset: long,
      concurrency: 1,
    });
    expect(created.status).toBe(201);
    // Running, with items scored: the cancel stops a coordinator at work, not a queued job.
    for (let i = 0; i < 300; i++) {
      const now = (await api<Evaluation & { done: number }>("GET", `/admin/v1/evaluations/${created.body.id}`)).body;
      if (now.state === "running" && now.done > 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const cancelled = await api<Evaluation>("POST", `/admin/v1/evaluations/${created.body.id}/cancel`);
    expect(cancelled.status).toBe(200);
    const evaluation = async () => (await api<Evaluation>("GET", `/admin/v1/evaluations/${created.body.id}`)).body;
    await expect.poll(async () => (await evaluation()).state, { timeout: 30_000 }).toBe("cancelled");
    const e = await evaluation();
    expect(e.result).toBeNull();
    expect((e as Evaluation & { done: number }).done).toBeLessThan(400);
  }, 60_000);

  it("keeps evaluations to their organization", async () => {
    await createOrg(served.ctl, "other");
    const other = (await createApiKey(served.ctl, "other-admin", "admin", undefined, "other")).key;
    const { body: mine } = await api<{ data: Evaluation[] }>("GET", "/admin/v1/evaluations");
    const id = (mine.data[0] as Evaluation).id;
    expect((await api("GET", `/admin/v1/evaluations/${id}`, undefined, other)).status).toBe(404);
    expect((await api("POST", `/admin/v1/evaluations/${id}/cancel`, undefined, other)).status).toBe(404);
    const listed = await api<{ data: Evaluation[] }>("GET", "/admin/v1/evaluations", undefined, other);
    expect(listed.body.data).toEqual([]);
    const results = await api<{ data: unknown[] }>("GET", "/admin/v1/evaluations/results", undefined, other);
    expect(results.body.data).toEqual([]);
  }, 30_000);
});
