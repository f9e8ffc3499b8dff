/**
 * Evaluation through a real `platform up` stack and the real CLI: the stack runs the evaluation
 * coordinator beside its gateway; `platform training evaluate` uploads a local dataset, waits, and
 * prints the result; `platform training list` shows it on the version; a version no endpoint serves
 * is evaluated on a temporary endpoint, gone afterwards. The numbers themselves are
 * held to transformers and lm-eval in test/integration/evaluation.test.ts.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { BIN, runCli, type Stack, waitAvailable } from "../helpers/stack.ts";

let stack: Stack;
let scratch: string;
let questions: string;

const EV = unique("ev");

/** This file's endpoints (others share the stack). */
async function endpointNames(): Promise<string[]> {
  const { body } = await stack.admin<{ data: { endpoint: string }[] }>("GET", "/admin/v1/endpoints");
  return body.data
    .map((e) => e.endpoint)
    .filter((name) => name.startsWith(EV))
    .sort();
}

beforeAll(async () => {
  const modelPath = await tinyModelPath();
  scratch = await mkdtemp(join(tmpdir(), "platform-eval-e2e-"));
  questions = join(scratch, "questions.jsonl");
  await writeFile(
    questions,
    [
      { context: "Once upon a time, there was a little", choices: [" girl", " tree"], answer: 0 },
      { context: "The dog ran to the", choices: [" park", " sky"], answer: 0 },
      { context: "She had a red", choices: [" ball", " moon"], answer: 1 },
    ]
      .map((l) => JSON.stringify(l))
      .join("\n"),
  );
  stack = await sharedStack();
  for (const version of ["v1", "v2"]) {
    const reg = await stack.admin<{ version: string }>("POST", "/admin/v1/models", {
      name: EV,
      framework: "llamacpp",
      source: modelPath,
    });
    expect(reg.status, JSON.stringify(reg.body)).toBe(201);
    expect(reg.body.version).toBe(version);
  }
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${EV}`, {
    model: { name: EV, version: "v1" },
    runtime: { dtype: "float32" },
    resources: { replicas: 1, parallel: 3 },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await waitAvailable(stack, EV);
}, 120_000);

afterAll(async () => {
  await undeploy(stack, EV);
  await rm(scratch, { recursive: true, force: true });
});

describe("platform training evaluate on platform up", () => {
  it("uploads a local dataset, runs the evaluation on the stack's coordinator and prints the result", async () => {
    const run = await runCli(["training", "evaluate", `${EV}@v1`, "--dataset", questions, "--json"], stack.env);
    expect(run.code, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout) as { metric: string; value: number; n: number; stderr: number | null };
    expect(out.metric).toBe("accuracy");
    expect(out.n).toBe(3);
    expect([0, 1 / 3, 2 / 3, 1].some((v) => Math.abs(v - out.value) < 1e-12)).toBe(true);
    expect(out.stderr).toBeTypeOf("number");

    const list = await runCli(["training", "list"], stack.env);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`${EV}\\s+│\\s+v1\\s+│.*accuracy \\S+±\\S+ \\(n 3\\)`));

    const missing = await runCli(["training", "evaluate", `${EV}@v9`, "--dataset", questions], stack.env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`model "${EV}" has no version "v9"`);
    const noData = await runCli(["training", "evaluate", `${EV}@v1`], stack.env);
    expect(noData.code).toBe(2);
    expect(noData.stderr).toContain("--dataset");
  }, 120_000);

  it("evaluates a version no endpoint serves on a temporary endpoint <model>--eval-<version>, removed afterwards", async () => {
    expect(await endpointNames()).toEqual([EV]);
    const running = runCli(["training", "evaluate", `${EV}@v2`, "--dataset", questions, "--json"], stack.env);
    // While it runs: the temporary endpoint has ev's settings, one replica.
    let deployed: { config: { model: object; runtime: object; resources: object } } | undefined;
    await stack.waitFor(async () => {
      const r = await stack.admin<NonNullable<typeof deployed>>("GET", `/admin/v1/endpoints/${EV}--eval-v2`);
      if (r.status === 200) deployed = r.body;
      return deployed !== undefined;
    }, `${EV}--eval-v2 to be deployed`);
    expect(deployed?.config).toMatchObject({
      model: { name: EV, version: "v2" },
      runtime: { dtype: "float32" },
      resources: { replicas: 1, parallel: 3 },
    });
    const run = await running;
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain(
      `no endpoint serves ${EV}@v2: deploying the temporary endpoint ${EV}--eval-v2; it is removed at the end (${EV}'s settings, 1 replica)`,
    );
    expect(run.stderr).toContain(`deployed ${EV}--eval-v2 (${EV}@v2, 1 replica(s))`);
    expect(run.stderr).toContain(`removed ${EV}--eval-v2`);
    const out = JSON.parse(run.stdout) as { metric: string; value: number; n: number };
    expect(out).toMatchObject({ metric: "accuracy", n: 3 });
    expect((await stack.admin("GET", `/admin/v1/endpoints/${EV}--eval-v2`)).status).toBe(404);
    expect(await endpointNames()).toEqual([EV]);
    // The result is on v2, where `abtest create --require-eval` looks.
    const { body } = await stack.admin<{ data: { target: string; results: { metric: string }[] }[] }>(
      "GET",
      `/admin/v1/evaluations/results?target=${EV}@v2`,
    );
    expect(JSON.stringify(body)).toContain("accuracy");
  }, 180_000);

  it("--compare deploys a temporary endpoint for the side that needs one only", async () => {
    const run = await runCli(
      ["training", "evaluate", EV, "--dataset", questions, "--compare", "v1,v2", "--json"],
      stack.env,
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain(`no endpoint serves ${EV}@v2: deploying the temporary endpoint ${EV}--eval-v2`);
    expect(run.stderr).not.toContain(`no endpoint serves ${EV}@v1`);
    expect(run.stderr).toContain(`removed ${EV}--eval-v2`);
    const out = JSON.parse(run.stdout) as { a: { model: string }; b: { model: string }; method: string };
    expect([out.a.model, out.b.model]).toEqual([`${EV}@v1`, `${EV}@v2`]);
    expect(out.method).toBe("paired");
    expect(await endpointNames()).toEqual([EV]);
  }, 180_000);

  it("Ctrl-C removes the temporary endpoint and cancels the evaluation on it", async () => {
    // Long enough that it is still running when the signal comes.
    const texts = join(scratch, "long.jsonl");
    await writeFile(
      texts,
      Array.from({ length: 4000 }, (_, i) => JSON.stringify({ text: `Once upon a time, story ${i} began.` })).join(
        "\n",
      ),
    );
    const child = spawn(process.execPath, [BIN, "training", "evaluate", `${EV}@v2`, "--dataset", texts], {
      env: stack.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await stack.waitFor(
      async () => new RegExp(`${EV}@v2 perplexity: \\w+ \\d+/4000`).test(stderr),
      "the evaluation to be created",
      60_000,
    );
    child.kill("SIGINT");
    expect(await exited, stderr).toBe(130);
    expect(stderr).toContain(`SIGINT: stopping, removing ${EV}--eval-v2`);
    expect(stderr).toContain(`removed ${EV}--eval-v2`);
    expect(await endpointNames()).toEqual([EV]);
    // This file's long evaluation, found by its model and size: other files on the shared stack make
    // evaluations too (the dashboard's), so the newest need not be it.
    const ours = async () =>
      (
        await stack.admin<{ data: { model: string; state: string; items: number }[] }>(
          "GET",
          "/admin/v1/evaluations?limit=100",
        )
      ).body.data.find((e) => e.model === `${EV}@v2` && e.items === 4000);
    expect(await ours()).toBeDefined();
    await stack.waitFor(async () => (await ours())?.state === "cancelled", "the evaluation to be cancelled");
  }, 120_000);

  it("--no-deploy refuses a version no endpoint serves with the gateway's 409", async () => {
    const run = await runCli(["training", "evaluate", `${EV}@v2`, "--dataset", questions, "--no-deploy"], stack.env);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`no endpoint serves ${EV}@v2; deploy it first`);
    expect(run.stderr).toContain("(model_not_deployed)");
    expect(run.stderr).not.toContain("deploying the temporary endpoint");
    expect(await endpointNames()).toEqual([EV]);
  }, 60_000);

  it("a user key gets the 409 and why no temporary endpoint was deployed: that takes an admin key", async () => {
    const key = (await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: "eval-user", role: "user" })).body
      .key;
    const run = await runCli(["training", "evaluate", `${EV}@v2`, "--dataset", questions], {
      ...stack.env,
      PLATFORM_API_KEY: key,
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(
        `no endpoint serves ${EV}@v2; deploy it first .*\\(model_not_deployed\\); deploying a temporary endpoint for it takes an admin key: .*\\(permission_denied\\)`,
      ),
    );
    expect(await endpointNames()).toEqual([EV]);
  }, 60_000);
});
