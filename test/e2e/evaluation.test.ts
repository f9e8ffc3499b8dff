/**
 * Evaluation through a real `platform up` stack and the real CLI: the stack runs the evaluation
 * coordinator beside its gateway; `platform training evaluate` uploads a local dataset, waits, and
 * prints the result; `platform training list` shows it on the version. The numbers themselves are
 * held to transformers and lm-eval in test/integration/evaluation.test.ts.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { runCli, type Stack, startStack } from "../helpers/stack.ts";

let stack: Stack;
let scratch: string;

beforeAll(async () => {
  const modelPath = await tinyModelPath();
  scratch = await mkdtemp(join(tmpdir(), "platform-eval-e2e-"));
  stack = await startStack({ args: ["--storage-root", dirname(modelPath)] });
  const reg = await stack.admin("POST", "/admin/v1/models", { name: "ev", framework: "llamacpp", source: modelPath });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  const res = await stack.admin("PUT", "/admin/v1/endpoints/ev", {
    model: { name: "ev", version: "v1" },
    resources: { replicas: 1, parallel: 4 },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await stack.waitFor(
    async () => (await stack.admin<{ state: string }>("GET", "/admin/v1/endpoints/ev")).body.state === "available",
    "ev available",
  );
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await rm(scratch, { recursive: true, force: true });
});

describe("platform training evaluate on platform up", () => {
  it("uploads a local dataset, runs the evaluation on the stack's coordinator and prints the result", async () => {
    const dataset = join(scratch, "questions.jsonl");
    await writeFile(
      dataset,
      [
        { context: "Once upon a time, there was a little", choices: [" girl", " tree"], answer: 0 },
        { context: "The dog ran to the", choices: [" park", " sky"], answer: 0 },
        { context: "She had a red", choices: [" ball", " moon"], answer: 1 },
      ]
        .map((l) => JSON.stringify(l))
        .join("\n"),
    );
    const run = await runCli(["training", "evaluate", "ev@v1", "--dataset", dataset, "--json"], stack.env);
    expect(run.code, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout) as { metric: string; value: number; n: number; stderr: number | null };
    expect(out.metric).toBe("accuracy");
    expect(out.n).toBe(3);
    expect([0, 1 / 3, 2 / 3, 1].some((v) => Math.abs(v - out.value) < 1e-12)).toBe(true);
    expect(out.stderr).toBeTypeOf("number");

    const list = await runCli(["training", "list"], stack.env);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/ev\s+│\s+v1\s+│.*accuracy \S+±\S+ \(n 3\)/);

    const missing = await runCli(["training", "evaluate", "ev@v9", "--dataset", dataset], stack.env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('model "ev" has no version "v9"');
    const noData = await runCli(["training", "evaluate", "ev@v1"], stack.env);
    expect(noData.code).toBe(2);
    expect(noData.stderr).toContain("--dataset");
  }, 120_000);
});
