/**
 * Speculative decoding on llama.cpp endpoints (`runtime.speculative_model`) on the shared
 * `platform up` stack: a draft registered beside the model, the speculative endpoint answering
 * exactly what the plain one does at temperature 0 (each on its own queue, so each endpoint's own
 * replicas answer), `status` counting the fields as applied, and the refusals: a draft that is not
 * registered (at deploy time) and one whose vocabulary differs (the replica fails, saying so).
 */
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack } from "../helpers/stack.ts";

const MODEL = unique("tiny");
const DRAFT = `${MODEL}-draft`;
const STORIES = `${MODEL}-stories`;
const PLAIN = `${MODEL}-plain`;
const SPEC = `${MODEL}-spec`;
const SELF = `${MODEL}-self`;
const NODRAFT = `${MODEL}-nodraft`;
const MISMATCH = `${MODEL}-mismatch`;
const NOPE = unique("nope");

let stack: Stack;
type Status = { state: string; not_applied: string[]; errors?: string[]; replicas: { ready: number } };

beforeAll(async () => {
  stack = await sharedStack();
  const register = async (name: string, source: string) => {
    const r = await runCli(["training", "submit", "--name", name, "--source", source], stack.env);
    expect(r.code, r.stderr).toBe(0);
  };
  await register(MODEL, await tinyModelPath({ contextLength: 2048 }));
  // Another model with the same vocabulary (the fixture's other seed): it drafts, and is often wrong.
  await register(DRAFT, await tinyModelPath({ seed: 2, contextLength: 2048 }));
});

afterAll(async () => {
  await undeploy(stack, PLAIN, SPEC, SELF, NODRAFT, MISMATCH);
});

const deploy = (name: string, runtime: object) =>
  stack.admin("PUT", `/admin/v1/endpoints/${name}`, {
    model: { name: MODEL },
    runtime,
    resources: { replicas: 1, parallel: 2 },
  });
const available = (name: string) =>
  stack.waitFor(
    async () => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${name}`)).body.state === "available",
    `${name} available`,
    120_000,
  );
const complete = async (model: string, prompt: string) => {
  const res = await fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: 48, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: { text: string }[] }).choices[0]?.text;
};

describe("speculative decoding on llama.cpp", () => {
  it("answers exactly as without it, with the draft applied and the fields reported as applied", {
    timeout: 180_000,
  }, async () => {
    expect((await deploy(PLAIN, {})).status).toBe(200);
    expect((await deploy(SPEC, { speculative_model: DRAFT, num_speculative_tokens: 3 })).status).toBe(200);
    expect((await deploy(SELF, { speculative_model: `${MODEL}@v1` })).status).toBe(200);
    await Promise.all([PLAIN, SPEC, SELF].map(available));
    for (const prompt of ["Once upon a time", "The little dog ran", "She was happy because"]) {
      const plain = await complete(PLAIN, prompt);
      expect(await complete(SPEC, prompt)).toBe(plain);
      expect(await complete(SELF, prompt)).toBe(plain);
    }
    const status = (await stack.admin<Status>("GET", `/admin/v1/endpoints/${SPEC}`)).body;
    expect(status.not_applied).not.toContain("runtime.speculative_model");
    expect(status.not_applied).not.toContain("runtime.num_speculative_tokens");
    // The replica loaded the draft and speculates, as its own log says.
    const log = new RegExp(`replica ${SPEC}-\\S+ starting .*log (\\S+\\.log)\\)`).exec(stack.output())?.[1];
    expect(log, stack.output()).toBeDefined();
    expect(await readFile(log as string, "utf8")).toMatch(
      /speculative decoding: a draft model proposes 3 tokens per step/,
    );
  });

  it("refuses a draft that is not registered, naming the field", async () => {
    const res = await deploy(NODRAFT, { speculative_model: NOPE });
    expect(res.status).toBe(400);
    expect(JSON.stringify(res.body)).toContain(`runtime.speculative_model: model \\"${NOPE}\\" is not registered`);
  });

  it.skipIf(!sharedModelPath())(
    "a draft with another vocabulary fails the replica, and status says why",
    { timeout: 120_000 },
    async () => {
      const r = await runCli(
        ["training", "submit", "--name", STORIES, "--source", sharedModelPath() as string],
        stack.env,
      );
      expect(r.code, r.stderr).toBe(0);
      expect((await deploy(MISMATCH, { speculative_model: STORIES })).status).toBe(200);
      await stack.waitFor(
        async () =>
          JSON.stringify((await stack.admin<Status>("GET", `/admin/v1/endpoints/${MISMATCH}`)).body).includes(
            "vocabulary differs",
          ),
        `${MISMATCH} to report the vocabulary`,
        60_000,
      );
      expect((await stack.admin("DELETE", `/admin/v1/endpoints/${MISMATCH}`)).status).toBeLessThan(300);
    },
  );
});
