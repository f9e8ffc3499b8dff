/**
 * What one key's JSON schemas may cost the others (issue 21), end to end through `platform up` and
 * the official `openai` client: each limit refused with its message before anything is queued, a
 * schema at the limits answered, plain requests answered while large-schema requests run, and a
 * job a producer enqueues directly refused by the replica. On stories260K where ../shared has it,
 * else on the suite's tiny model, on the shared stack: the default limits (a lowered one is
 * test/unit/settings.test.ts's). No timings are asserted: `npm run bench:grammar` measures them.
 */
import { randomBytes, randomUUID } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueName } from "../../src/contracts/naming.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { MAX_TOOLS } from "../../src/contracts/job.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { QueueObserver } from "../helpers/queue-observer.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";

const MODEL = unique("limits");
let stack: Stack;
let client: OpenAI;
let ctl: Control;

beforeAll(async () => {
  const model = sharedModelPath() ?? (await tinyModelPath({ contextLength: 2048 }));
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: model });
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
  ctl = connectControl(stack.redisUrl, "platform");
}, 120_000);
afterAll(async () => {
  await ctl?.redis.quit();
  await undeploy(stack, MODEL);
});

const pad = (text: string, length: number) => text.padEnd(length, "x");
const values = (n: number, length: number, salt = randomBytes(3).toString("hex")) =>
  Array.from({ length: n }, (_, i) => pad(`${salt}-${i}-`, length));
const format = (schema: object) => ({
  type: "json_schema" as const,
  json_schema: { name: "answer", schema: schema as Record<string, unknown> },
});
const ask = [{ role: "user" as const, content: "Once upon a time" }];

/** The largest schemas the default limits allow, each new (no grammar is cached for it). */
const largest = {
  /** 1,000 enum values in one string enum of 15,000 characters. */
  wideEnum: () => ({
    type: "object",
    properties: { pick: { enum: values(1000, 15) } },
    required: ["pick"],
    additionalProperties: false,
  }),
  /** Ten levels, 4,991 properties, ~115,000 characters of names. */
  deepAndWide: () => {
    const salt = randomBytes(3).toString("hex");
    let schema: object = { type: "string" };
    for (let level = 10; level > 0; level--) {
      const leaves = values(498, 23, `${salt}${level}`).map((name) => [name, { type: "integer" }]);
      schema = { type: "object", properties: Object.fromEntries([[`n${level}`, schema], ...leaves]) };
    }
    return schema;
  },
  /** Four 250-value enums of 119-character values: 1,000 values, 119,000 characters. */
  longValues: () => ({
    type: "object",
    properties: Object.fromEntries(["a", "b", "c", "d"].map((name) => [name, { enum: values(250, 119) }])),
  }),
};

const refusal = async (request: Promise<unknown>) => {
  const error = await request.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OpenAI.BadRequestError);
  // The error envelope as sent (the client's own message begins with the status).
  const { code, param, message } = (error as InstanceType<typeof OpenAI.BadRequestError>).error as {
    code: string;
    param: string;
    message: string;
  };
  return { code, param, message };
};

describe("schema limits", () => {
  it("refuses each limit with its message at the gateway, and nothing is queued", async () => {
    const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"));
    const chat = (body: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming>) =>
      refusal(client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 4, ...body }));
    expect(
      await chat({ response_format: format({ type: "object", properties: { pick: { enum: values(20_000, 8) } } }) }),
    ).toEqual({
      code: "schema_too_large",
      param: "response_format.json_schema.schema",
      message:
        "response_format.json_schema.schema: 20000 enum values; at most 1000 (PLATFORM_MAX_SCHEMA_ENUM_VALUES), passed at /properties/pick/enum",
    });
    let deep: object = { type: "string" };
    for (let i = 0; i < 60; i++) deep = { type: "object", properties: { [`l${i}`]: deep } };
    expect((await chat({ response_format: format(deep) })).message).toMatch(
      /^response_format\.json_schema\.schema: 60 levels of nesting; at most 10 \(PLATFORM_MAX_SCHEMA_DEPTH\), passed at \/properties\/l59\//,
    );
    const wide = Object.fromEntries(values(5001, 8).map((name) => [name, { type: "integer" }]));
    expect((await chat({ response_format: format({ type: "object", properties: wide }) })).message).toBe(
      "response_format.json_schema.schema: 5001 object properties; at most 5000 (PLATFORM_MAX_SCHEMA_PROPERTIES), passed at /properties",
    );
    const names = Object.fromEntries(values(1000, 121).map((name) => [name, { type: "string" }]));
    expect((await chat({ response_format: format({ type: "object", properties: names }) })).message).toMatch(
      /^response_format\.json_schema\.schema: 121000 characters of property names, definition names, enum and const values; at most 120000 \(PLATFORM_MAX_SCHEMA_CHARS\), passed at \/properties\//,
    );
    expect((await chat({ response_format: format({ enum: values(300, 51) }) })).message).toBe(
      "response_format.json_schema.schema: 15300 characters in one string enum of more than 250 values; at most 15000 (PLATFORM_MAX_SCHEMA_LARGE_ENUM_CHARS), passed at /enum",
    );
    const tool = (i: number, parameters: object = { type: "object" }) => ({
      type: "function" as const,
      function: { name: `tool_${i}`, parameters: parameters as Record<string, unknown> },
    });
    // Past the queue contract's bound (PLATFORM_MAX_TOOLS lowers it: schema_too_large, settings.test.ts).
    expect(await chat({ tools: Array.from({ length: MAX_TOOLS + 1 }, (_, i) => tool(i)) })).toEqual({
      code: "invalid_request",
      param: "tools",
      message: `tools: at most ${MAX_TOOLS} tools in one request; send fewer`,
    });
    // Every tool's parameters and response_format count together.
    const half = { type: "object", properties: { pick: { enum: values(600, 8) } } };
    expect(await chat({ tools: [tool(0), tool(1, half), tool(2, half)] })).toMatchObject({
      code: "schema_too_large",
      param: "tools[2].function.parameters",
    });
    // The completions routes hold response_format to the same limits.
    const completion = await refusal(
      client.completions.create({
        model: MODEL,
        prompt: "Once",
        max_tokens: 4,
        // @ts-expect-error response_format is the platform's extension of /v1/completions (docs/chat.md)
        response_format: format({ enum: values(1001, 8) }),
      }),
    );
    expect(completion).toMatchObject({ code: "schema_too_large", param: "response_format.json_schema.schema" });

    // The one request that reaches the queue is the plain one sent last.
    await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 2 });
    await observer.drain();
    expect(observer.jobIds()).toHaveLength(1);
    await observer.stop();
  });

  it("answers a schema at the limits", async () => {
    const pick = largest.wideEnum();
    const answer = await client.chat.completions.create({
      model: MODEL,
      messages: ask,
      max_tokens: 200,
      response_format: format(pick),
    });
    const choice = answer.choices[0];
    expect(choice?.finish_reason).toBe("stop");
    expect(pick.properties.pick.enum).toContain(JSON.parse(choice?.message.content ?? "").pick);
    for (const schema of [largest.deepAndWide(), largest.longValues()]) {
      const cut = await client.chat.completions.create({
        model: MODEL,
        messages: ask,
        max_tokens: 16,
        response_format: format(schema),
      });
      expect(cut.choices[0]?.message.content?.startsWith("{")).toBe(true);
    }
  });

  it("answers plain requests while large-schema requests run", async () => {
    let running = 0;
    const large = Object.values(largest).flatMap((make) =>
      [0, 1].map(async () => {
        running++;
        try {
          return await client.chat.completions.create({
            model: MODEL,
            messages: ask,
            max_tokens: 32,
            response_format: format(make()),
          });
        } finally {
          running--;
        }
      }),
    );
    let answeredMeanwhile = 0;
    while (running > 0) {
      const plain = await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 16 });
      expect(plain.choices[0]?.message.content).toBeTypeOf("string");
      if (running > 0) answeredMeanwhile++;
    }
    for (const answer of await Promise.all(large))
      expect(answer.choices[0]?.message.content?.startsWith("{")).toBe(true);
    expect(answeredMeanwhile).toBeGreaterThan(0);
  });

  it("refuses a job a producer enqueues directly, on the replica", async () => {
    const base = new QueueBase(ctl);
    const queue = base.queue(MODEL, "v1");
    const events = base.events(queue.name);
    await events.waitUntilReady();
    try {
      const job = await queue.add("chat", {
        v: 1,
        kind: "chat",
        request_id: randomUUID(),
        model: MODEL,
        version: "v1",
        messages: ask,
        params: { max_tokens: 4, response_format: format({ enum: values(1001, 8) }) },
      });
      const failure = await job.waitUntilFinished(events, 60_000).then(
        () => undefined,
        (e: Error) => JSON.parse(e.message),
      );
      expect(failure).toMatchObject({
        code: "schema_too_large",
        status: 400,
        message:
          "response_format.json_schema.schema: 1001 enum values; at most 1000 (PLATFORM_MAX_SCHEMA_ENUM_VALUES), passed at /enum",
      });
    } finally {
      await base.close();
    }
  });
});
