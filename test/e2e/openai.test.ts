/**
 * End to end through the official `openai` client against a stack started the
 * way `platform up` starts it, on the suite's own tiny model.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueName } from "../../src/contracts/naming.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack, waitAvailable } from "../helpers/stack.ts";
import { QueueObserver } from "../helpers/queue-observer.ts";

let stack: Stack;
let client: OpenAI;
let tinyPath: string;
const MODEL = unique("tiny");
const EMBED = `${MODEL}-embed`;

beforeAll(async () => {
  // A long context so the cancellation test can ask for far more tokens than it will wait for.
  tinyPath = await tinyModelPath({ contextLength: 4096 });
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: tinyPath, version: "v1" });
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
});

afterAll(() => undeploy(stack, MODEL, EMBED));

describe("chat completions", () => {
  it("answers in the chat.completion shape with exact usage", async () => {
    const res = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 12,
      temperature: 0,
    });
    expect(res.object).toBe("chat.completion");
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.model).toBe(MODEL);
    expect(Math.abs(res.created - Date.now() / 1000)).toBeLessThan(120);
    expect(res.choices).toHaveLength(1);
    expect(res.choices[0]?.message.role).toBe("assistant");
    expect(res.choices[0]?.message.content?.length).toBeGreaterThan(0);
    // The fixture never emits EOS, so 12 tokens means it hit max_tokens.
    expect(res.choices[0]?.finish_reason).toBe("length");
    expect(res.usage?.completion_tokens).toBe(12);
    expect(res.usage?.prompt_tokens).toBeGreaterThanOrEqual(5); // 4 words, at least, plus BOS
    expect(res.usage?.total_tokens).toBe((res.usage?.prompt_tokens ?? 0) + 12);
  });

  it("counts prompt tokens exactly: the context window is full at prompt + max_tokens", async () => {
    const messages = [{ role: "user" as const, content: "Once upon a time" }];
    const probe = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1 });
    const room = 4096 - (probe.usage?.prompt_tokens ?? 0);
    const full = await client.chat.completions.create({ model: MODEL, messages, max_tokens: room, temperature: 0 });
    expect(full.usage?.completion_tokens).toBe(room);
    expect(full.usage?.total_tokens).toBe(4096);
    const over = await client.chat.completions
      .create({ model: MODEL, messages, max_tokens: room + 1 })
      .catch((e: unknown) => e);
    expect(over).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it("is deterministic at temperature 0 and streams the same text, ending with a usage chunk", async () => {
    const request = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "The little dog" }],
      max_tokens: 20,
      temperature: 0,
    };
    const whole = await client.chat.completions.create(request);
    const again = await client.chat.completions.create(request);
    expect(again.choices[0]?.message.content).toBe(whole.choices[0]?.message.content);

    const stream = await client.chat.completions.create({
      ...request,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe(whole.choices[0]?.message.content);
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant");
    const ids = new Set(chunks.map((c) => c.id));
    expect(ids.size).toBe(1);
    for (const c of chunks) expect(c.object).toBe("chat.completion.chunk");
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    // The same counts; the repeated prompt now finds its tokens in the replica's cache (all but the last).
    expect(last?.usage).toEqual({ ...whole.usage, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
    expect(last?.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
    const finishing = chunks.at(-2);
    expect(finishing?.choices[0]?.finish_reason).toBe("length");
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
  });

  it("honours stop sequences with finish_reason stop", async () => {
    const base = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 20,
      temperature: 0,
    });
    const words = (base.choices[0]?.message.content ?? "").trim().split(/\s+/);
    const stopWord = words[3] as string;
    const res = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 20,
      temperature: 0,
      stop: [stopWord],
    });
    expect(res.choices[0]?.finish_reason).toBe("stop");
    expect(res.choices[0]?.message.content).not.toContain(stopWord);
    expect(base.choices[0]?.message.content?.startsWith(res.choices[0]?.message.content ?? "?")).toBe(true);
  });

  it("gives the same sample for the same seed", async () => {
    const request = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "Once upon a time" }],
      max_tokens: 15,
      temperature: 1,
      seed: 42,
    };
    const a = await client.chat.completions.create(request);
    const b = await client.chat.completions.create(request);
    expect(a.choices[0]?.message.content).toBe(b.choices[0]?.message.content);
  });
});

describe("completions, generate, models", () => {
  it("serves legacy completions, streaming too", async () => {
    const res = await client.completions.create({
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 8,
      temperature: 0,
    });
    expect(res.object).toBe("text_completion");
    expect(res.choices[0]?.logprobs).toBeNull();
    expect(res.usage?.completion_tokens).toBe(8);
    const stream = await client.completions.create({
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 8,
      temperature: 0,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe(res.choices[0]?.text);
  });

  it("serves the platform's generate route", async () => {
    const res = await fetch(`${stack.baseUrl}/v1/inference/${MODEL}/generate`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 6, temperature: 0 }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toMatch(/^req_/);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ object: "generation", model: MODEL, version: "v1", finish_reason: "length" });
    const completion = await client.completions.create({
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 6,
      temperature: 0,
    });
    expect(body.output).toBe(completion.choices[0]?.text);
    expect(body.usage).toEqual(completion.usage);
  });

  it("lists and retrieves models", async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toContain(MODEL);
    const one = await client.models.retrieve(MODEL);
    expect(one).toMatchObject({ id: MODEL, object: "model", owned_by: "platform" });
  });

  it("serves embeddings (float and the client's default base64) from the model registered with the embed task", async () => {
    // A model serves one task: the same file registered for embeddings is an endpoint of its own.
    const submit = await runCli(
      ["training", "submit", "--name", EMBED, "--source", tinyPath, "--task", "embed"],
      stack.env,
    );
    expect(submit.code, submit.stderr).toBe(0);
    expect(
      (
        await stack.admin("PUT", `/admin/v1/endpoints/${EMBED}`, {
          model: { name: EMBED, version: "v1" },
          resources: { replicas: 1, parallel: 1 },
        })
      ).status,
    ).toBe(200);
    await waitAvailable(stack, EMBED);
    const refused = await client.embeddings.create({ model: MODEL, input: "hello" }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("model_not_embedding");
    const res = await client.embeddings.create({ model: EMBED, input: ["hello", "a story"] });
    expect(res.data).toHaveLength(2);
    expect(res.data[0]?.embedding).toHaveLength(64);
    expect(res.data[0]?.embedding.every((x) => Number.isFinite(x))).toBe(true);
    const floats = await client.embeddings.create({ model: EMBED, input: "hello", encoding_format: "float" });
    expect(floats.data[0]?.embedding[0]).toBeCloseTo(res.data[0]?.embedding[0] as number, 5);
  });
});

describe("errors come out as the client's error classes", () => {
  it("401 invalid_api_key", async () => {
    const bad = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: "sk-plat-wrong", maxRetries: 0 });
    const err = await bad.models.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe("invalid_api_key");
  });

  it("404 model_not_found", async () => {
    const err = await client.chat.completions
      .create({ model: "nope", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");
  });

  it("400 context_length_exceeded, streaming or not", async () => {
    const request = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "Once upon a time" }],
      max_tokens: 100_000,
    };
    const err = await client.chat.completions.create(request).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("context_length_exceeded");
    expect((err as Error).message).toMatch(/maximum context length is 4096 tokens/);
    const streamErr = await client.chat.completions.create({ ...request, stream: true }).catch((e: unknown) => e);
    expect(streamErr).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it("400 for bad messages, naming the field", async () => {
    const err = await client.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: "wizard", content: "hi" }],
      } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("messages.0.role");
    const empty = await client.chat.completions.create({ model: MODEL, messages: [] }).catch((e: unknown) => e);
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
  });
});

/** The receipt of the cancelled job the observer sees completing (online jobs are deleted once finished: it comes from the queue's event stream). */
async function cancelledJob(
  observer: QueueObserver,
): Promise<{ finish_reason: string; usage: { completion_tokens: number } }> {
  let cancelled: { finish_reason: string; usage: { completion_tokens: number } } | undefined;
  try {
    await stack.waitFor(
      async () => {
        cancelled = observer
          .events()
          .filter((e) => e.event === "completed" && e.returnvalue !== undefined)
          .map(
            (e) =>
              JSON.parse(e.returnvalue as string) as { finish_reason: string; usage: { completion_tokens: number } },
          )
          .find((r) => r.finish_reason === "cancelled");
        return cancelled !== undefined;
      },
      "a cancelled job",
      30_000,
    );
  } finally {
    await observer.stop();
  }
  return cancelled!;
}

describe("cancellation", () => {
  it("a client that disconnects mid-stream stops the generation on the worker", async () => {
    const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"), { keepLog: true });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      {
        model: MODEL,
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 4000,
        temperature: 0,
        stream: true,
      },
      { signal: controller.signal },
    );
    let chunks = 0;
    await (async () => {
      for await (const _ of stream) {
        if (++chunks === 5) controller.abort();
      }
    })().catch(() => undefined);
    expect((await cancelledJob(observer)).usage.completion_tokens).toBeLessThan(4000);
  });

  it("a client that leaves while waiting for a whole (non-streamed) answer stops the generation too", async () => {
    const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"), { keepLog: true });
    const controller = new AbortController();
    const request = client.chat.completions
      .create(
        {
          model: MODEL,
          messages: [{ role: "user", content: "Once upon a time, far away" }],
          max_tokens: 4000,
          temperature: 0,
        },
        { signal: controller.signal },
      )
      .catch((e: unknown) => e);
    // Gone as soon as a replica has the job, long before 4000 tokens.
    await stack.waitFor(async () => observer.events().some((e) => e.event === "active"), "the job to start", 30_000);
    controller.abort();
    expect(await request).toBeInstanceOf(Error);
    expect((await cancelledJob(observer)).usage.completion_tokens).toBeLessThan(4000);
  });
});

describe("status after the traffic", () => {
  it("reports the endpoint available with its replica and an empty queue", async () => {
    const endpoint = async () =>
      (
        await stack.admin<{
          state: string;
          replicas: { ready: number; desired: number };
          queue: { waiting: number };
        }>("GET", `/admin/v1/endpoints/${MODEL}`)
      ).body;
    // The last test's cancelled job may still be leaving the queue.
    await expect
      .poll(endpoint)
      .toMatchObject({ state: "available", replicas: { ready: 1, desired: 1 }, queue: { waiting: 0 } });
  });
});
