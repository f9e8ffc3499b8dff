/**
 * Prompt log-likelihoods through /v1/completions (`echo` with `logprobs`, what lm-evaluation-harness's
 * local-completions reads), held to transformers: the tiny Llama checkpoint under test/fixtures/hf/llama
 * is converted by the platform and served by a real gateway and llama.cpp worker (runtime.dtype
 * float32) in process against a private Redis; every prompt token's logprob must be what transformers
 * computes on the same checkpoint in float32 (scripts/reference/prompt-logprobs.py). Skips, saying
 * why, without the reference venv (.venv-ref or PLATFORM_TEST_PYTHON_REF).
 */
import { spawnSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningGateway } from "../../src/gateway/server/app.ts";
import { referencePython } from "../helpers/models.ts";
import { type ServedCheckpoint, serveFloat32Checkpoint } from "../helpers/float32-checkpoint.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const CHECKPOINT = join(repoRoot, "test", "fixtures", "hf", "llama");
const SCRIPT = join(repoRoot, "scripts", "reference", "prompt-logprobs.py");

const python = referencePython();
const skip =
  python === undefined
    ? "no reference venv (.venv-ref, made by scripts/reference/setup.sh, or PLATFORM_TEST_PYTHON_REF)"
    : spawnSync(python, ["-c", "import torch, transformers"], { stdio: "ignore" }).status !== 0
      ? `${python} cannot import torch and transformers`
      : undefined;
if (skip !== undefined) console.warn(`echo-logprobs.test: ${skip}; skipping the check against transformers`);

/** Texts in the fixture tokenizer's words, and one it must spell out in pieces. */
const TEXTS = [
  "Once upon a time, there was a little girl",
  "The little dog ran to the park.",
  "Lily and Tom played with a big red ball",
];
/** The greedy continuation of TEXTS[0] transformers found (the fixture's reference.json). */
const CONTINUATION = [421, 445];

type Reference = { input_ids: number[]; logprobs: (number | null)[]; top: (number | null)[] };
type Legacy = {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
};
type Completion = {
  choices: { index: number; text: string; logprobs: Legacy | null; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number };
};

let served: ServedCheckpoint;
let gateway: RunningGateway;
let key: string;
/** TEXTS as transformers reads them, then TEXTS[0] with its continuation. */
let reference: Reference[];

function transformers(items: ({ text: string } | { ids: number[] })[]): Reference[] {
  const run = spawnSync(python as string, [SCRIPT, CHECKPOINT], {
    input: JSON.stringify(items),
    encoding: "utf8",
    timeout: 120_000,
  });
  if (run.status !== 0) throw new Error(`prompt-logprobs.py failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as Reference[];
}

beforeAll(async () => {
  if (skip !== undefined) return;
  const fixture = JSON.parse(await readFile(join(CHECKPOINT, "reference.json"), "utf8")) as { output_ids: number[] };
  expect(fixture.output_ids.slice(0, 2)).toEqual(CONTINUATION);
  const read = transformers(TEXTS.map((text) => ({ text })));
  const continued = transformers([{ ids: [...(read[0] as Reference).input_ids, ...CONTINUATION] }]);
  reference = [...read, ...continued];

  served = await serveFloat32Checkpoint(CHECKPOINT, "tiny-hf-echo-1");
  gateway = served.gateway;
  key = served.key;
}, 180_000);

afterAll(async () => {
  await served?.stop();
});

const post = (path: string, body: unknown) =>
  fetch(`${gateway.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

async function complete(body: Record<string, unknown>): Promise<Completion> {
  const res = await post("/v1/completions", { model: "tiny-hf", temperature: 0, ...body });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Completion;
}

/** Each token's logprob within 1e-3, the sum within 1e-3 of its size; the best alternative's too. */
function expectScores(got: Legacy, want: Reference, from: number) {
  const wanted = want.logprobs.slice(from) as number[];
  const scores = got.token_logprobs.slice(got.token_logprobs.length - wanted.length) as number[];
  expect(scores).toHaveLength(wanted.length);
  for (const [i, lp] of scores.entries())
    expect(Math.abs(lp - (wanted[i] as number)), `token ${i}`).toBeLessThanOrEqual(1e-3);
  const sum = scores.reduce((a, b) => a + b, 0);
  const wantedSum = wanted.reduce((a, b) => a + b, 0);
  expect(Math.abs(sum - wantedSum) / Math.abs(wantedSum)).toBeLessThanOrEqual(1e-3);
  const tops = got.top_logprobs.slice(got.top_logprobs.length - wanted.length);
  tops.forEach((top, i) => {
    expect(Object.keys(top ?? {})).toHaveLength(1);
    const best = Object.values(top ?? {})[0] as number;
    expect(Math.abs(best - (want.top[from + i] as number))).toBeLessThanOrEqual(1e-3);
  });
}

/** The legacy shape's own consistency: one entry per token, offsets into the choice's text. */
function expectShape(choice: Completion["choices"][number]) {
  const lp = choice.logprobs as Legacy;
  expect(lp.token_logprobs).toHaveLength(lp.tokens.length);
  expect(lp.top_logprobs).toHaveLength(lp.tokens.length);
  expect(lp.tokens.join("")).toBe(choice.text);
  let offset = 0;
  lp.tokens.forEach((t, i) => {
    expect(lp.text_offset[i]).toBe(offset);
    offset += t.length;
  });
}

describe.skipIf(skip !== undefined)("echo with logprobs", () => {
  it("scores every token of text prompts as transformers does: the BOS token conditions the first, and is not echoed", async () => {
    const body = await complete({ prompt: TEXTS, echo: true, logprobs: 1, max_tokens: 0 });
    expect(body.choices).toHaveLength(TEXTS.length);
    expect(body.usage.completion_tokens).toBe(0);
    expect(body.usage.prompt_tokens).toBe(
      TEXTS.reduce((n, _, i) => n + (reference[i] as Reference).input_ids.length, 0),
    );
    for (const [i, text] of TEXTS.entries()) {
      const choice = body.choices.find((c) => c.index === i) as Completion["choices"][number];
      const want = reference[i] as Reference;
      expect(choice.text).toBe(text);
      expect(choice.finish_reason).toBe("length");
      expectShape(choice);
      // One entry per prompt token: every one after the BOS token, the first among them scored given it.
      expect(choice.logprobs?.tokens).toHaveLength(want.input_ids.length - 1);
      expect(choice.logprobs?.token_logprobs.every((lp) => typeof lp === "number")).toBe(true);
      expectScores(choice.logprobs as Legacy, want, 1);
    }
  });

  it("echoes token ids as given: the first has nothing before it, so null, and the rest are scored", async () => {
    const want = reference[0] as Reference;
    const body = await complete({ prompt: want.input_ids, echo: true, logprobs: 1, max_tokens: 0 });
    const choice = body.choices[0] as Completion["choices"][number];
    expectShape(choice);
    expect(choice.text).toBe(TEXTS[0]);
    const lp = choice.logprobs as Legacy;
    expect(lp.tokens).toHaveLength(want.input_ids.length);
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
    expectScores(lp, want, 1);
    expect(body.usage.prompt_tokens).toBe(want.input_ids.length);
  });

  it("max_tokens 2: the generated tokens follow the prompt's in the same arrays, and the text", async () => {
    const body = await complete({ prompt: TEXTS[0], echo: true, logprobs: 1, max_tokens: 2 });
    const choice = body.choices[0] as Completion["choices"][number];
    const want = reference[TEXTS.length] as Reference;
    expectShape(choice);
    expect(choice.text.startsWith(TEXTS[0] as string)).toBe(true);
    expect(choice.text.length).toBeGreaterThan((TEXTS[0] as string).length);
    expect(choice.logprobs?.tokens).toHaveLength(want.input_ids.length - 1);
    expect(body.usage.completion_tokens).toBe(2);
    // The whole chain, prompt and greedy continuation, as transformers scores BOS + prompt + continuation.
    expectScores(choice.logprobs as Legacy, want, 1);
  });

  it("echo without logprobs: the text starts with the prompt, and no logprobs", async () => {
    const body = await complete({ prompt: TEXTS[1], echo: true, max_tokens: 3 });
    const choice = body.choices[0] as Completion["choices"][number];
    expect(choice.text.startsWith(TEXTS[1] as string)).toBe(true);
    expect(choice.logprobs).toBeNull();
    expect(body.usage.completion_tokens).toBe(3);
  });

  it("refuses what it cannot honour with a 400 naming the field", async () => {
    const refused = async (path: string, body: Record<string, unknown>, param: string, message: RegExp) => {
      const res = await post(path, { model: "tiny-hf", ...body });
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { param: string; message: string } };
      expect(error.param).toBe(param);
      expect(error.message).toMatch(message);
    };
    await refused("/v1/completions", { prompt: "Once", max_tokens: 0 }, "max_tokens", /only with echo: true/);
    await refused("/v1/completions", { prompt: "Once", max_tokens: 0, echo: false }, "max_tokens", /echo/);
    await refused("/v1/completions", { prompt: "Once", echo: true, stream: true }, "echo", /stream: true/);
    await refused(
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "x" }], max_tokens: 0 },
      "max_tokens",
      /./,
    );
    await refused(
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "x" }], echo: true },
      "echo",
      /not supported/,
    );
  });
});
