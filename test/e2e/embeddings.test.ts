/**
 * Embeddings end to end: the suite's tiny sentence-transformers BERT, converted to GGUF, registered
 * (its task detected as embed), deployed and asked through the gateway, the queue
 * and a real worker with the official `openai` client, in its default base64 encoding and as floats.
 * Every embedding must match the TypeScript reference forward pass (cosine ≥ 0.999), for mean and
 * CLS pooling; generation routes and embeddings refuse the model of the other task.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { convertCheckpoint } from "../../src/formats/convert/index.ts";
import { TINY_BERT, writeTinyBert } from "../fixtures/tiny-bert.ts";
import { bertEmbedding, bertInput, cosine } from "../helpers/bert-reference.ts";
import { deploy as deployModel, undeploy } from "../helpers/deploy.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack, waitAvailable } from "../helpers/stack.ts";

const TEXTS = [
  "The quick brown fox jumped over the lazy dog.",
  "hello, world!",
  "Once upon a time, a small cat sat on the mat",
  "xyz",
];

let dir: string;
let stack: Stack;
let client: OpenAI;
let mean: Awaited<ReturnType<typeof writeTinyBert>>;
let cls: Awaited<ReturnType<typeof writeTinyBert>>;
let clsModel: string;
const BERT = unique("bert");
const BERT_CLS = `${BERT}-cls`;
const TINY = `${BERT}-tiny`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "embeddings-e2e-"));
  mean = await writeTinyBert(join(dir, "mean"), { pooling: "mean", normalize: true, seed: 11 });
  cls = await writeTinyBert(join(dir, "cls"), { pooling: "cls", seed: 12 });
  await convertCheckpoint(join(dir, "mean"), join(dir, "bert-mean.gguf"));
  clsModel = join(dir, "bert-cls.gguf");
  await convertCheckpoint(join(dir, "cls"), clsModel);
  stack = await sharedStack();
  await deployModel(stack, BERT, { source: join(dir, "bert-mean.gguf") });
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
});

afterAll(async () => {
  await undeploy(stack, BERT, BERT_CLS, TINY);
  await rm(dir, { recursive: true, force: true });
});

const post = (path: string, body: unknown) =>
  fetch(`${stack.baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
const errorOf = async (res: Response) => ({
  status: res.status,
  ...((await res.json()) as { error: { code: string; message: string; param: string | null; type: string } }).error,
});

const expectReference = (
  embeddings: number[][],
  texts: string[],
  fixture: typeof mean,
  pooling: "mean" | "cls",
  normalize: boolean,
) => {
  expect(embeddings).toHaveLength(texts.length);
  texts.forEach((text, i) => {
    const reference = bertEmbedding(bertInput(text, fixture.vocab), fixture.weights, TINY_BERT, pooling, normalize);
    expect(cosine(embeddings[i] as number[], reference), text).toBeGreaterThanOrEqual(0.999);
  });
};
const tokensOf = (texts: string[], fixture: typeof mean) =>
  texts.reduce((n, t) => n + bertInput(t, fixture.vocab).length, 0);

describe("a converted BERT embedding model", () => {
  it("is registered with the embed task, detected from its architecture", async () => {
    const { body } = await stack.admin<{ data: { name: string; task?: string; gguf: { architecture: string } }[] }>(
      "GET",
      "/admin/v1/models",
    );
    const record = body.data.find((m) => m.name === BERT);
    expect(record?.gguf.architecture).toBe("bert");
    expect(record?.task).toBe("embed");
  });

  it("answers the openai client's default (base64 on the wire, decoded by the client) as the reference does, with usage summed over the inputs", async () => {
    const wire = await post("/v1/embeddings", { model: BERT, input: TEXTS[0], encoding_format: "base64" });
    const raw = (await wire.json()) as { data: { embedding: unknown }[] };
    expect(typeof raw.data[0]?.embedding).toBe("string");

    const res = await client.embeddings.create({ model: BERT, input: TEXTS });
    expect(res.object).toBe("list");
    expect(res.model).toBe(BERT);
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2, 3]);
    const vectors = res.data.map((d) => [...d.embedding]);
    expectReference(vectors, TEXTS, mean, "mean", true);
    // The checkpoint declares Normalize: unit vectors.
    for (const v of vectors) expect(Math.hypot(...v)).toBeCloseTo(1, 5);
    expect(res.usage).toEqual({ prompt_tokens: tokensOf(TEXTS, mean), total_tokens: tokensOf(TEXTS, mean) });

    const floats = await client.embeddings.create({ model: BERT, input: TEXTS, encoding_format: "float" });
    expectReference(
      floats.data.map((d) => d.embedding),
      TEXTS,
      mean,
      "mean",
      true,
    );
    for (const [i, d] of floats.data.entries())
      for (const [j, x] of d.embedding.entries()) expect(x).toBeCloseTo(vectors[i]?.[j] as number, 6);
  });

  it("takes token ids: one list, or a list per input", async () => {
    const ids = TEXTS.map((t) => bertInput(t, mean.vocab));
    const many = await client.embeddings.create({ model: BERT, input: ids, encoding_format: "float" });
    expectReference(
      many.data.map((d) => d.embedding),
      TEXTS,
      mean,
      "mean",
      true,
    );
    expect(many.usage.prompt_tokens).toBe(tokensOf(TEXTS, mean));
    const one = await client.embeddings.create({ model: BERT, input: ids[1] as number[] });
    expectReference(
      one.data.map((d) => [...d.embedding]),
      [TEXTS[1] as string],
      mean,
      "mean",
      true,
    );
  });

  it("refuses, naming the input: an empty one, too many, one past the context (by the gateway or the worker)", async () => {
    expect(await errorOf(await post("/v1/embeddings", { model: BERT, input: ["hello", ""] }))).toMatchObject({
      status: 400,
      type: "invalid_request_error",
      param: "input",
      message: "input[1] is an empty string; every input needs at least one character",
    });
    expect(await errorOf(await post("/v1/embeddings", { model: BERT, input: "" }))).toMatchObject({
      status: 400,
      param: "input",
    });
    expect(
      await errorOf(await post("/v1/embeddings", { model: BERT, input: Array.from({ length: 2049 }, () => "a") })),
    ).toMatchObject({
      status: 400,
      message: "input has 2049 items; at most 2048 per request (split it into several requests)",
    });
    expect(
      await errorOf(
        await post("/v1/embeddings", { model: BERT, input: [[5, 6], Array.from({ length: 100 }, () => 7)] }),
      ),
    ).toMatchObject({
      status: 400,
      code: "context_length_exceeded",
      message: `input[1] has 100 tokens; this model embeds at most ${TINY_BERT.maxPositions} tokens per input. Shorten or split input[1].`,
    });
    // Under the gateway's byte bound, so the worker's exact count refuses it.
    expect(
      await errorOf(await post("/v1/embeddings", { model: BERT, input: ["hello", "a ".repeat(70)] })),
    ).toMatchObject({
      status: 400,
      code: "context_length_exceeded",
      param: "input",
      message: `input[1] has 72 tokens; this model embeds at most ${TINY_BERT.maxPositions - 1} tokens per input. Shorten or split input[1].`,
    });
  });

  it("refuses text generation with a 400 saying to use /v1/embeddings", async () => {
    const err = await client.chat.completions
      .create({ model: BERT, messages: [{ role: "user", content: "hello" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("model_not_generative");
    expect((err as Error).message).toContain("use /v1/embeddings");
    for (const [path, body] of [
      ["/v1/completions", { model: BERT, prompt: "hello" }],
      [`/v1/inference/${BERT}/generate`, { prompt: "hello" }],
    ] as const) {
      expect(await errorOf(await post(path, body))).toMatchObject({
        status: 400,
        code: "model_not_generative",
        param: "model",
      });
    }
  });
});

describe("tasks chosen at registration", () => {
  it("serves a CLS-pooled checkpoint registered through the CLI, as the reference pools it", async () => {
    const submit = await runCli(["training", "submit", "--name", BERT_CLS, "--source", clsModel], stack.env);
    expect(submit.code, submit.stderr).toBe(0);
    expect(submit.stdout).toContain("task embed");
    const deploy = await stack.admin("PUT", `/admin/v1/endpoints/${BERT_CLS}`, {
      model: { name: BERT_CLS, version: "v1" },
      resources: { replicas: 1, parallel: 1 },
    });
    expect(deploy.status, JSON.stringify(deploy.body)).toBe(200);
    await waitAvailable(stack, BERT_CLS);
    const res = await client.embeddings.create({ model: BERT_CLS, input: TEXTS });
    expectReference(
      res.data.map((d) => [...d.embedding]),
      TEXTS,
      cls,
      "cls",
      false,
    );
  });

  it("a decoder model generates by default and embeds only as a version registered with --task embed", async () => {
    const tiny = await tinyModelPath();
    const generate = await runCli(
      ["training", "submit", "--name", TINY, "--source", tiny, "--version", "v1"],
      stack.env,
    );
    expect(generate.code, generate.stderr).toBe(0);
    expect(generate.stdout).toContain("task generate");
    // No replica is needed: the gateway refuses before anything is queued.
    const deploy = (version: string) =>
      stack.admin("PUT", `/admin/v1/endpoints/${TINY}`, { model: { name: TINY, version }, resources: { replicas: 0 } });
    expect((await deploy("v1")).status).toBe(200);
    const refused = await errorOf(await post("/v1/embeddings", { model: TINY, input: "hello" }));
    expect(refused).toMatchObject({
      status: 400,
      type: "invalid_request_error",
      code: "model_not_embedding",
      param: "model",
    });
    expect(refused.message).toContain("--task embed");

    const bad = await runCli(["training", "submit", "--name", TINY, "--source", tiny, "--task", "rerank"], stack.env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--task rerank: use embed, generate or image");
    const embed = await runCli(
      ["training", "submit", "--name", TINY, "--source", tiny, "--version", "v2", "--task", "embed", "--json"],
      stack.env,
    );
    expect(embed.code, embed.stderr).toBe(0);
    expect((JSON.parse(embed.stdout) as { task: string }).task).toBe("embed");
    expect((await deploy("v2")).status).toBe(200);
    await stack.waitFor(
      async () =>
        (
          await errorOf(
            await post("/v1/chat/completions", { model: TINY, messages: [{ role: "user", content: "hi" }] }),
          )
        ).code === "model_not_generative",
      `the gateway to route ${TINY} to v2`,
    );
  });
});
