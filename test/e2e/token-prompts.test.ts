/**
 * /v1/completions' four forms of `prompt` through the official `openai` client, as
 * lm-evaluation-harness sends them (issue 20.2): token ids evaluated as given, several prompts
 * answered as several choices numbered prompt by prompt with their usage summed, streamed too,
 * token ids the model does not know refused by their place, and an OpenAI batch line of ids. On a
 * `platform up` stack serving stories260K where ../shared has it, else the suite's tiny model.
 */
import { basename } from "node:path";
import { readGgufFileInfo } from "node-llama-cpp";
import OpenAI, { toFile } from "openai";
import type { Completion } from "openai/resources/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";
import { tokenCounts } from "../helpers/usage.ts";

const MODEL = unique("storyteller");
const TEXT = "Once upon a time";
/** "Once upon a time" as stories260K tokenizes it, BOS first. */
const STORIES_IDS = [1, 403, 407, 261, 378];
const MAX_TOKENS = 8;

let stack: Stack;
let client: OpenAI;
/** TEXT's ids on the served model, BOS first, as a client that tokenizes for itself sends them. */
let ids: number[];
let vocabulary: number;

beforeAll(async () => {
  const model = sharedModelPath() ?? (await tinyModelPath());
  const tokenizer = (await readGgufFileInfo(model)).metadata.tokenizer.ggml;
  const tokens = tokenizer.tokens as string[];
  vocabulary = tokens.length;
  ids = [tokenizer.bos_token_id as number, ...TEXT.split(" ").map((word) => tokens.indexOf(`\u2581${word}`))];
  if (basename(model) === "stories260K.gguf") expect(ids).toEqual(STORIES_IDS);
  expect(ids.every((id) => id >= 0)).toBe(true);
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: model });
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
}, 180_000);

afterAll(() => undeploy(stack, MODEL));

const complete = (prompt: string | string[] | number[] | number[][], more: { n?: number } = {}) =>
  client.completions.create({ model: MODEL, prompt, max_tokens: MAX_TOKENS, temperature: 0, ...more });

/** The 400's error envelope. */
const badRequest = async (promise: Promise<unknown>) => {
  const err = await promise.catch((e: unknown) => e);
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  return (err as InstanceType<typeof OpenAI.BadRequestError>).error as { message: string; param: string | null };
};

describe("token-id prompts", () => {
  it("evaluate the ids as given: BOS + the text's ids answer what the text does, in every form", async () => {
    const byText = await complete(TEXT);
    expect(byText.choices[0]?.text.length).toBeGreaterThan(0);
    // The engine adds BOS to a text; ids carry their own, so both evaluate the same 5 tokens.
    expect(byText.usage?.prompt_tokens).toBe(ids.length);
    for (const prompt of [ids, [ids], [TEXT]]) {
      const res = await complete(prompt);
      expect(
        res.choices.map((c) => [c.index, c.text]),
        JSON.stringify(prompt),
      ).toEqual([[0, byText.choices[0]?.text]]);
      expect(tokenCounts(res.usage)).toEqual(tokenCounts(byText.usage));
    }
  });

  it("answers several prompts as several choices, prompt by prompt, each prompt counted once", async () => {
    const other = ids.slice(0, 3);
    const single = [await complete(ids), await complete(other)];
    const res = await complete([ids, other], { n: 2 });
    // Choice p * n + i is prompt p's i-th, as OpenAI and vLLM number them.
    expect(res.choices.map((c) => [c.index, c.text])).toEqual([
      [0, single[0]?.choices[0]?.text],
      [1, single[0]?.choices[0]?.text],
      [2, single[1]?.choices[0]?.text],
      [3, single[1]?.choices[0]?.text],
    ]);
    const prompt = ids.length + other.length;
    const completion = 2 * single.reduce((sum, r) => sum + (r.usage?.completion_tokens ?? 0), 0);
    expect(res.usage).toEqual({
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: expect.any(Number) },
    });

    const texts = await complete([TEXT, "The little dog"]);
    expect(texts.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(texts.choices[0]?.text).toBe(single[0]?.choices[0]?.text);
  });

  it("streams several prompts' choices under the same indexes, with the same usage", async () => {
    const whole = await complete([ids, ids.slice(0, 3)], { n: 2 });
    const stream = await client.completions.create({
      model: MODEL,
      prompt: [ids, ids.slice(0, 3)],
      n: 2,
      max_tokens: MAX_TOKENS,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts: string[] = [];
    const finished: (string | null)[] = [];
    let usage: Completion["usage"];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] = (texts[c.index] ?? "") + c.text;
        if (c.finish_reason) finished[c.index] = c.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(texts).toEqual(whole.choices.map((c) => c.text));
    expect(finished).toEqual(whole.choices.map((c) => c.finish_reason));
    expect(tokenCounts(usage)).toEqual(tokenCounts(whole.usage));
  });

  it("refuses an id outside the model's vocabulary with a 400 naming its place", async () => {
    const flat = await badRequest(complete([...ids.slice(0, 3), 70_000]));
    expect(flat.message).toBe(`prompt[3]: token 70000 is not in this model's vocabulary (${vocabulary} tokens)`);
    expect(flat.param).toBe("prompt");
    const nested = await badRequest(complete([ids, [ids[0] as number, 70_000]]));
    expect(nested.message).toBe(`prompt[1][1]: token 70000 is not in this model's vocabulary (${vocabulary} tokens)`);
    for (const stream of [false, true]) {
      const err = await badRequest(
        client.completions.create({ model: MODEL, prompt: [ids, [70_000]], max_tokens: 2, stream }),
      );
      expect(err.message).toMatch(/^prompt\[1\]\[0\]: token 70000 /);
    }
  });

  it("refuses an empty list, an empty id list and what is none of the four forms, saying what is expected", async () => {
    expect((await badRequest(complete([]))).message).toBe("prompt: is an empty array; send at least one prompt");
    expect((await badRequest(complete([ids, []]))).message).toBe(
      "prompt[1]: is an empty token list; a prompt needs at least one token",
    );
    const mixed = await badRequest(complete([1, "two"] as unknown as number[]));
    expect(mixed.message).toBe(
      "prompt: expected a string, an array of strings, an array of token ids or an array of such arrays",
    );
    expect((await badRequest(complete([1, -1]))).message).toBe(
      "prompt[1]: expected a token id (an integer from 0 to 2147483647)",
    );
  });
});

describe("an OpenAI batch of /v1/completions lines", () => {
  it("answers a line of token ids as the same request online, and refuses a line of several prompts", async () => {
    const online = await complete(ids);
    const line = (customId: string, prompt: unknown) =>
      JSON.stringify({
        custom_id: customId,
        method: "POST",
        url: "/v1/completions",
        body: { model: MODEL, prompt, max_tokens: MAX_TOKENS, temperature: 0 },
      });
    const text = [line("ids", ids), line("nested", [ids]), line("several", [ids, ids]), line("bad", [ids, []])];
    const file = await client.files.create({
      file: await toFile(Buffer.from(text.join("\n")), "ids.jsonl"),
      purpose: "batch",
    });
    let batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/completions",
      completion_window: "24h",
    });
    await expect
      .poll(async () => (await client.batches.retrieve(batch.id)).status, { timeout: 60_000, interval: 200 })
      .toMatch(/^(completed|failed|cancelled)$/);
    batch = await client.batches.retrieve(batch.id);
    expect(batch).toMatchObject({ status: "completed", request_counts: { total: 4, completed: 2, failed: 2 } });
    const lines = async (id: string | null | undefined) =>
      (await (await client.files.content(id as string)).text())
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as { custom_id: string; response: { body: Completion } | null; error: unknown });
    const output = await lines(batch.output_file_id);
    expect(
      output.map((l) => [l.custom_id, l.response?.body.choices[0]?.text, tokenCounts(l.response?.body.usage)]),
    ).toEqual([
      ["ids", online.choices[0]?.text, tokenCounts(online.usage)],
      ["nested", online.choices[0]?.text, tokenCounts(online.usage)],
    ]);
    const errors = await lines(batch.error_file_id);
    expect(errors.map((l) => [l.custom_id, l.error])).toEqual([
      [
        "several",
        {
          code: "invalid_request",
          message:
            "line 3: body.prompt: 2 prompts; a batch line answers one (one text answer per line): put each prompt on a line of its own",
        },
      ],
      [
        "bad",
        {
          code: "invalid_request",
          message: "line 4: body.prompt[1]: is an empty token list; a prompt needs at least one token",
        },
      ],
    ]);
  });
});
