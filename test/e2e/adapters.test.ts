/**
 * Adapters on a running platform (`platform up`, its worker a child process) with the artifact store
 * in S3 (s3rver): the tiny Llama checkpoint and a PEFT adapter registered with `training submit`, the
 * base deployed, the adapter served as `<endpoint>:<adapter>` token for token as transformers + peft
 * (scripts/reference/make-lora.py), its GGUF conversion kept in the store, `inference status`
 * naming it loaded, and `/v1/models` listing it through the official openai client.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openStore } from "../../src/storage/index.ts";
import { type S3Server, startS3 } from "../helpers/batch-env.ts";
import { referencePython } from "../helpers/models.ts";
import { type OwnStack, runCli, startStack, waitAvailable } from "../helpers/stack.ts";

const CHECKPOINT = fileURLToPath(new URL("../fixtures/hf/llama/", import.meta.url));
const MAKE_LORA = fileURLToPath(new URL("../../scripts/reference/make-lora.py", import.meta.url));
const BUCKET = "platform-e2e-adapters";
const python = referencePython();
const skip = python === undefined ? "the reference venv (.venv-ref, scripts/reference/setup.sh) is absent" : undefined;
if (skip) console.warn(`e2e/adapters.test.ts skipped: ${skip}`);

type Reference = {
  prompts: number[][];
  new_tokens: number;
  adapters: Record<string, { dir: string; outputs: number[][] }>;
};

let work: string;
let s3: S3Server;
let stack: OwnStack;
let reference: Reference;

beforeAll(async () => {
  if (skip) return;
  work = await mkdtemp(join(tmpdir(), "platform-e2e-adapters-"));
  const made = spawnSync(python as string, [MAKE_LORA, CHECKPOINT, work], { encoding: "utf8", timeout: 300_000 });
  if (made.status !== 0) throw new Error(`make-lora.py failed: ${made.stderr}`);
  reference = JSON.parse(made.stdout) as Reference;
  s3 = await startS3(join(work, "s3rver"), BUCKET);
  stack = await startStack({ env: { ...s3.env, PLATFORM_ARTIFACTS_URL: `s3://${BUCKET}/artifacts` } });
}, 300_000);

afterAll(async () => {
  if (skip) return;
  const code = await stack?.stop();
  await s3?.close();
  if (work) await rm(work, { recursive: true, force: true });
  expect(code).toBe(0);
});

describe.skipIf(skip !== undefined)("adapters on a running platform", () => {
  it("registers base and adapter with the CLI, deploys the base, and serves tiny:a2 as transformers + peft", async () => {
    const base = await runCli(["training", "submit", "--name", "tiny", "--source", CHECKPOINT], stack.env);
    expect(base.code, base.stderr).toBe(0);
    const adapter = await runCli(
      ["training", "submit", "--name", "a2", "--base", "tiny@v1", "--source", reference.adapters.a2!.dir],
      stack.env,
    );
    expect(adapter.code, adapter.stderr).toBe(0);
    expect(adapter.stdout).toContain("LoRA adapter of tiny@v1 · rank 8");

    const deployed = await stack.admin("PUT", "/admin/v1/endpoints/tiny", {
      model: { name: "tiny" },
      runtime: { dtype: "float32" },
      resources: { replicas: 1, parallel: 2 },
    });
    expect(deployed.status, JSON.stringify(deployed.body)).toBe(200);
    await waitAvailable(stack, "tiny", 180_000);

    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    const models = (await client.models.list()).data.map((m) => m.id);
    expect(models).toEqual(expect.arrayContaining(["tiny", "tiny:a2"]));
    const answers = await Promise.all(
      reference.prompts.map((prompt) =>
        client.completions.create({ model: "tiny:a2", prompt, max_tokens: reference.new_tokens, temperature: 0 }),
      ),
    );

    // The replica's conversion of the base: its vocabulary turns transformers' ids into text.
    const gguf = (await readdirGguf(join(stack.dataDir, "cache", "models")))!;
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const vocab = await llama.loadModel({ modelPath: gguf, vocabOnly: true });
    try {
      for (const [i, answer] of answers.entries())
        expect(answer.choices[0]!.text).toBe(vocab.detokenize(reference.adapters.a2!.outputs[i]! as Token[]));
    } finally {
      await vocab.dispose();
    }

    // The adapter's conversion lives in the artifact store, for every other replica.
    const store = openStore(`s3://${BUCKET}/artifacts`, s3.settings);
    try {
      const keys: string[] = [];
      for await (const o of store.list("converted/lora/")) keys.push(o.key);
      expect(keys).toHaveLength(1);
      expect(keys[0]).toMatch(/^converted\/lora\/[0-9a-f]{64}\/adapter\.gguf$/);
    } finally {
      store.close();
    }
    await stack.waitFor(
      async () => (await runCli(["inference", "status", "tiny"], stack.env)).stdout.includes("adapters loaded: a2@v1"),
      "status to show the loaded adapter",
    );
  });
});

/** The converted base in the node's cache (`<digest>.model.gguf`). */
async function readdirGguf(dir: string): Promise<string | undefined> {
  const name = (await readdir(dir)).find((f) => f.endsWith(".model.gguf"));
  return name === undefined ? undefined : join(dir, name);
}
