/**
 * The platform as an lm-evaluation-harness backend: a small multiple-choice task is scored twice by
 * lm-eval, once with its `hf` backend (transformers, float32) on test/fixtures/hf/llama and once with
 * `local-completions` against a real gateway and llama.cpp worker serving the platform's conversion
 * of the same checkpoint (runtime.dtype float32). Both must give the same accuracy and, per choice,
 * the same log-likelihood within 1e-3 relative. Skips, saying why, without the reference venv or
 * lm-eval in it (scripts/reference/setup.sh installs both).
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningGateway } from "../../src/gateway/server/app.ts";
import { referencePython } from "../helpers/models.ts";
import { type ServedCheckpoint, serveFloat32Checkpoint } from "../helpers/float32-checkpoint.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");
const LM_EVAL = join(repoRoot, "scripts", "reference", "lm-eval.py");
const TASK = "platform_tiny_mc";

const python = referencePython();
const skip =
  python === undefined
    ? "no reference venv (.venv-ref, made by scripts/reference/setup.sh, or PLATFORM_TEST_PYTHON_REF)"
    : spawnSync(
          python,
          ["-c", "import torch, transformers, lm_eval.models.huggingface, lm_eval.models.openai_completions"],
          {
            stdio: "ignore",
          },
        ).status !== 0
      ? `${python} cannot import lm_eval's hf and local-completions backends (scripts/reference/setup.sh installs them)`
      : undefined;
if (skip !== undefined) console.warn(`lm-eval-platform.test: ${skip}; skipping`);

/**
 * Contexts and choices in the fixture tokenizer's words; the choices differ in length so their
 * log-likelihoods differ widely and acc_norm (by length) can rank them otherwise than acc.
 */
const QUESTIONS: [string, string[], number][] = [
  ["Once upon a time, there was a little", ["girl", "dog named Max", "tree"], 0],
  ["The little dog ran to the", ["park", "big red ball", "house with a red door"], 0],
  ["Lily and Tom played with a", ["ball", "little cat in the garden", "toy"], 0],
  ["One day, a boy went to the", ["store", "big blue sea", "park with his mom"], 2],
  ["She was very happy because she had a new", ["toy", "friend", "red hat with a flower"], 1],
  ["The cat sat on the", ["mat", "big soft bed", "tree"], 0],
  ["Tim wanted to play outside, but it was", ["raining", "very cold and dark", "late"], 0],
  ["Mom said, \"Let's go to the", ["park", "store to buy food", 'beach"'], 1],
  ["The bird flew up into the", ["sky", "tall green tree", "sun"], 1],
  ["Ben found a shiny", ["rock", "coin in the sand", "key"], 2],
  ["The girl smiled and said,", ['"Thank you!"', '"I love you, Mom."', '"Yes."'], 0],
  ["They played all day and were very", ["tired", "happy together", "hungry"], 1],
  ["Sue liked to draw pictures of", ["flowers", "her family and her dog", "cats"], 1],
  ["The big bear was", ["sad", "looking for honey in the woods", "hungry"], 2],
  ["Max the dog liked to", ["run", "dig in the garden", "bark at the cat"], 0],
  ["It was a sunny day, so they went to the", ["beach", "park to play", "lake"], 0],
  ["The little fish swam in the", ["water", "big blue sea", "pond"], 1],
  ["Amy gave her friend a", ["hug", "big red apple", "gift"], 0],
  ["At night, the moon was", ["bright", "big and round in the sky", "high"], 2],
  ["The end. They lived happily", ["ever after", "in a little house", "together"], 0],
];

type Sample = {
  doc_id: number;
  filtered_resps: [string, string][];
  acc: number;
  acc_norm?: number;
};
type Run = { metrics: Record<string, number>; samples: Map<number, Sample> };

let served: ServedCheckpoint;
let gateway: RunningGateway;
let key: string;
let dataDir: string;
let taskDir: string;

beforeAll(async () => {
  if (skip !== undefined) return;
  served = await serveFloat32Checkpoint(CHECKPOINT, "tiny-hf-lmeval-1");
  ({ gateway, key, dataDir } = served);
  taskDir = join(dataDir, "tasks");
  await mkdir(taskDir);
  const data = join(taskDir, "questions.jsonl");
  await writeFile(
    data,
    QUESTIONS.map(([question, choices, answer]) => JSON.stringify({ question, choices, answer })).join("\n"),
  );
  // A local JSON dataset, so lm-eval needs no hub; the path is absolute, lm-eval resolves it as given.
  await writeFile(
    join(taskDir, `${TASK}.yaml`),
    [
      `task: ${TASK}`,
      "dataset_path: json",
      "dataset_kwargs:",
      "  data_files:",
      `    test: ${JSON.stringify(data)}`,
      "test_split: test",
      "output_type: multiple_choice",
      'doc_to_text: "{{question}}"',
      'doc_to_choice: "{{choices}}"',
      'doc_to_target: "{{answer}}"',
      "metric_list:",
      "  - metric: acc",
      "  - metric: acc_norm",
      "",
    ].join("\n"),
  );
}, 180_000);

afterAll(async () => {
  await served?.stop();
});

/** Runs lm-eval on the task (asynchronously: the gateway it may call runs in this process). */
async function lmEval(name: string, args: string[]): Promise<Run> {
  const output = join(dataDir, `out-${name}`);
  const child = spawn(
    python as string,
    [LM_EVAL, ...args, "--tasks", TASK, "--include_path", taskDir, "--log_samples", "--output_path", output],
    {
      env: {
        ...process.env,
        // Everything is local: no hub look-ups, and datasets' cache inside the temp dir.
        HF_HUB_OFFLINE: "1",
        HF_DATASETS_OFFLINE: "1",
        HF_HOME: join(dataDir, "hf-home"),
        OPENAI_API_KEY: key,
        TOKENIZERS_PARALLELISM: "false",
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let log = "";
  child.stdout.on("data", (d) => {
    log += d;
  });
  child.stderr.on("data", (d) => {
    log += d;
  });
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  expect(code, `lm-eval ${name} failed:\n${log.slice(-4000)}`).toBe(0);
  // --output_path DIR puts results_<time>.json and samples_<task>_<time>.jsonl in a subfolder named
  // after the model.
  const files = (await readdir(output, { recursive: true })).map((f) => join(output, f));
  const results = files.find((f) => /results_[^/]*\.json$/.test(f));
  const samplesFile = files.find((f) => new RegExp(`samples_${TASK}_[^/]*\\.jsonl$`).test(f));
  expect(results && samplesFile, `lm-eval ${name} wrote ${files.join(", ")}`).toBeTruthy();
  const metrics = (
    JSON.parse(await readFile(results as string, "utf8")) as { results: Record<string, Record<string, number>> }
  ).results[TASK] as Record<string, number>;
  const samples = new Map<number, Sample>();
  for (const line of (await readFile(samplesFile as string, "utf8")).split("\n")) {
    if (line.trim() === "") continue;
    const sample = JSON.parse(line) as Sample;
    samples.set(sample.doc_id, sample);
  }
  return { metrics, samples };
}

describe.skipIf(skip !== undefined)("lm-evaluation-harness against the platform", () => {
  it("local-completions on the platform scores a multiple-choice task as lm-eval's hf backend does", async () => {
    const t0 = Date.now();
    const hf = await lmEval("hf", [
      "--model",
      "hf",
      "--model_args",
      `pretrained=${CHECKPOINT},dtype=float32`,
      "--device",
      "cpu",
    ]);
    const t1 = Date.now();
    const platform = await lmEval("platform", [
      "--model",
      "local-completions",
      "--model_args",
      [
        "model=tiny-hf",
        `base_url=${gateway.url}/v1/completions`,
        `tokenizer=${CHECKPOINT}`,
        "tokenizer_backend=huggingface",
        "tokenized_requests=True",
        "add_bos_token=True",
        "num_concurrent=1",
        "max_retries=1",
      ].join(","),
      "--batch_size",
      "4",
    ]);
    console.info(`lm-eval-platform.test: hf ${t1 - t0} ms, local-completions ${Date.now() - t1} ms`);

    expect(hf.samples.size).toBe(QUESTIONS.length);
    expect(platform.samples.size).toBe(QUESTIONS.length);
    for (const metric of ["acc,none", "acc_norm,none"]) {
      expect(hf.metrics[metric], metric).toBeTypeOf("number");
      expect(platform.metrics[metric], metric).toBe(hf.metrics[metric]);
    }
    for (const [id, want] of hf.samples) {
      const got = platform.samples.get(id) as Sample;
      expect(got, `doc ${id}`).toBeDefined();
      expect(got.acc, `doc ${id} acc`).toBe(want.acc);
      expect(got.acc_norm, `doc ${id} acc_norm`).toBe(want.acc_norm);
      expect(got.filtered_resps).toHaveLength(want.filtered_resps.length);
      want.filtered_resps.forEach(([wanted], i) => {
        const lp = Number((got.filtered_resps[i] as [string, string])[0]);
        const ref = Number(wanted);
        expect(Number.isFinite(lp) && Number.isFinite(ref), `doc ${id} choice ${i}`).toBe(true);
        expect(Math.abs(lp - ref) / Math.abs(ref), `doc ${id} choice ${i}: ${lp} vs ${ref}`).toBeLessThanOrEqual(1e-3);
      });
      // The choices' scores differ: a comparison of equal numbers would prove little.
      expect(new Set(want.filtered_resps.map(([lp]) => lp)).size, `doc ${id}`).toBeGreaterThan(1);
    }
  }, 600_000);
});
