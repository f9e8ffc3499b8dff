/**
 * The chat-completions surface beyond plain text (issue 10), end to end through a stack started
 * as `platform up` starts it and the official `openai` client: structured outputs, tool calling,
 * logprobs, n, seed and logit_bias on the llama.cpp engine, streaming included, and the 400s for
 * what cannot be honoured. On the suite's own tiny model, and on stories260K where ../shared has it.
 */
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { HERMES_STYLE_TEMPLATE } from "../fixtures/chat-templates.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";

const shared = sharedModelPath();
const models = [
  // Room for the tools' description, which the tiny vocabulary spells out almost byte by byte.
  { name: "tiny", endpoint: unique("tiny"), path: () => tinyModelPath({ contextLength: 2048 }) },
  ...(shared ? [{ name: "stories", endpoint: unique("stories"), path: async () => shared }] : []),
];
if (!shared) console.warn("chat-surface: ../shared/models absent; the stories260K cases are skipped");

const Person = z.object({
  name: z.string().max(16),
  age: z.number().int(),
  happy: z.boolean(),
  mood: z.enum(["calm", "glad", "sad"]),
});
const personSchema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 16 },
    age: { type: "integer" },
    happy: { type: "boolean" },
    mood: { type: "string", enum: ["calm", "glad", "sad"] },
  },
  required: ["name", "age", "happy", "mood"],
  additionalProperties: false,
};
const weatherTool = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer" } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};
const timeTool = {
  type: "function" as const,
  function: {
    name: "get_time",
    parameters: {
      type: "object",
      properties: { zone: { type: "string", enum: ["utc", "local"] } },
      required: ["zone"],
    },
  },
};
const WeatherArgs = z.object({ city: z.string().max(20), days: z.number().int() }).strict();
const ask = [{ role: "user" as const, content: "Once upon a time" }];

/**
 * A call to get_weather cut by max_tokens, whole and streamed: finish_reason length, the call with
 * its id, name and arguments as far as generated (a prefix of the whole call's), and no content.
 * The cuts are placed from the whole call's tokens (greedy, so the cut answer is their prefix).
 */
async function expectCutCall(client: OpenAI, model: string): Promise<void> {
  const request = {
    model,
    messages: ask,
    tools: [weatherTool, timeTool],
    tool_choice: { type: "function" as const, function: { name: "get_weather" } },
    temperature: 0,
  };
  const whole = await client.chat.completions.create({ ...request, max_tokens: 300, logprobs: true });
  const first = whole.choices[0]?.message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  const args = first.function.arguments;
  const ends: number[] = [];
  for (const t of whole.choices[0]?.logprobs?.content ?? []) ends.push((ends.at(-1) ?? 0) + t.token.length);
  const raw = (whole.choices[0]?.logprobs?.content ?? []).map((t) => t.token).join("");
  const argsAt = raw.indexOf(args);
  // Inside the arguments (halfway through them), and at most four characters into the name.
  const inArgs = ends.findIndex((end) => end > argsAt + args.length / 2) + 1;
  const inName = ends.filter((end) => end <= raw.indexOf("get_weather") + 4).length;
  expect(inArgs).toBeGreaterThan(0);
  expect(inName).toBeGreaterThan(0);

  const cut = await client.chat.completions.create({ ...request, max_tokens: inArgs });
  expect(cut.choices[0]).toMatchObject({ finish_reason: "length", message: { content: null } });
  expect(cut.usage?.completion_tokens).toBe(inArgs);
  const call = cut.choices[0]?.message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  expect(cut.choices[0]?.message.tool_calls).toHaveLength(1);
  expect(call.id).toMatch(/^call_/);
  expect(call.function.name).toBe("get_weather");
  expect(call.function.arguments.length).toBeGreaterThan(0);
  expect(call.function.arguments.length).toBeLessThan(args.length);
  expect(args.startsWith(call.function.arguments)).toBe(true);

  const inside = await client.chat.completions.create({ ...request, max_tokens: inName });
  expect(inside.choices[0]).toMatchObject({ finish_reason: "length", message: { content: null } });
  expect(inside.choices[0]?.message.tool_calls?.map((c) => c.type === "function" && c.function)).toEqual([
    { name: "get_weather", arguments: "" },
  ]);

  const stream = await client.chat.completions.create({ ...request, max_tokens: inArgs, stream: true });
  const calls: { id?: string; name?: string; arguments: string }[] = [];
  let content = "";
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    content += chunk.choices[0]?.delta.content ?? "";
    for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
      const c = calls[d.index] ?? { arguments: "" };
      calls[d.index] = c;
      c.id ??= d.id;
      c.name ??= d.function?.name;
      c.arguments += d.function?.arguments ?? "";
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  expect(finish).toBe("length");
  expect(content).toBe("");
  expect(calls).toEqual([
    { id: expect.stringMatching(/^call_/), name: "get_weather", arguments: call.function.arguments },
  ]);
}

describe.each(models)("on $name", ({ endpoint: name, path }) => {
  let stack: Stack;
  let client: OpenAI;
  let modelPath: string;

  beforeAll(async () => {
    modelPath = await path();
    stack = await sharedStack();
    await deploy(stack, name, { source: modelPath });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
  }, 120_000);
  afterAll(() => undeploy(stack, name));

  describe("structured outputs", () => {
    it("json_schema: the answer parses and validates, whole and streamed", async () => {
      const response_format = {
        type: "json_schema" as const,
        json_schema: { name: "person", schema: personSchema, strict: true },
      };
      const res = await client.chat.completions.create({
        model: name,
        messages: ask,
        response_format,
        max_tokens: 300,
        temperature: 0.8,
        seed: 1,
      });
      expect(res.choices[0]?.finish_reason).toBe("stop");
      Person.parse(JSON.parse(res.choices[0]?.message.content ?? ""));
      const stream = await client.chat.completions.create({
        model: name,
        messages: ask,
        response_format,
        max_tokens: 300,
        temperature: 0,
        stream: true,
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      Person.parse(JSON.parse(text));
    });

    it("json_object: the answer is a JSON object", async () => {
      const res = await client.chat.completions.create({
        model: name,
        messages: ask,
        response_format: { type: "json_object" },
        max_tokens: 400,
        temperature: 0.7,
        seed: 3,
      });
      const choice = res.choices[0];
      // A free-form object may be cut by max_tokens; it is then said so, never passed off as complete.
      if (choice?.finish_reason === "stop") expect(typeof JSON.parse(choice.message.content ?? "")).toBe("object");
      else expect(choice?.finish_reason).toBe("length");
      expect(choice?.message.content?.trimStart().startsWith("{")).toBe(true);
    });

    it("refuses a schema keyword it cannot enforce, naming it and where", async () => {
      const schema = {
        type: "object",
        properties: { code: { type: "string", pattern: "^[A-Z]+$" } },
        required: ["code"],
      };
      const err = await client.chat.completions
        .create({
          model: name,
          messages: ask,
          response_format: { type: "json_schema", json_schema: { name: "c", schema } },
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(
        /"pattern" at \/properties\/code\/pattern/,
      );
    });
  });

  describe("tool calling", () => {
    it("required: calls a tool with arguments valid against its schema", async () => {
      const res = await client.chat.completions.create({
        model: name,
        messages: ask,
        tools: [weatherTool, timeTool],
        tool_choice: "required",
        parallel_tool_calls: true,
        max_tokens: 1000,
        temperature: 0,
      });
      const choice = res.choices[0];
      expect(choice?.finish_reason).toBe("tool_calls");
      expect(choice?.message.content).toBeNull();
      const calls = choice?.message.tool_calls ?? [];
      expect(calls.length).toBeGreaterThan(0);
      for (const call of calls) {
        if (call.type !== "function") throw new Error("not a function call");
        expect(call.id).toMatch(/^call_/);
        expect(["get_weather", "get_time"]).toContain(call.function.name);
        const args = JSON.parse(call.function.arguments);
        if (call.function.name === "get_weather") WeatherArgs.parse(args);
        else expect(["utc", "local"]).toContain(args.zone);
      }
    });

    it("a named function is the one called, once by default; streamed as one tool_calls delta", async () => {
      const request = {
        model: name,
        messages: ask,
        tools: [weatherTool, timeTool],
        tool_choice: { type: "function" as const, function: { name: "get_weather" } },
        max_tokens: 300,
        temperature: 0,
      };
      const res = await client.chat.completions.create(request);
      const calls = res.choices[0]?.message.tool_calls ?? [];
      expect(calls).toHaveLength(1);
      const call = calls[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
      expect(call.function.name).toBe("get_weather");
      WeatherArgs.parse(JSON.parse(call.function.arguments));

      const stream = await client.chat.completions.create({ ...request, stream: true });
      const deltas: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
      let finish: string | null | undefined;
      for await (const chunk of stream) {
        deltas.push(...(chunk.choices[0]?.delta.tool_calls ?? []));
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(finish).toBe("tool_calls");
      expect(deltas).toHaveLength(1);
      expect(deltas[0]).toMatchObject({
        index: 0,
        type: "function",
        function: { name: "get_weather", arguments: call.function.arguments },
      });
    });

    it("takes the call and its result back in the history; tool_choice none answers in text", async () => {
      const first = await client.chat.completions.create({
        model: name,
        messages: ask,
        tools: [weatherTool],
        tool_choice: "required",
        max_tokens: 300,
        temperature: 0,
      });
      const call = first.choices[0]?.message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
      const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
        ...ask,
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: "sunny, 21 degrees" },
      ];
      const res = await client.chat.completions.create({
        model: name,
        messages,
        tools: [weatherTool],
        tool_choice: "none",
        max_tokens: 8,
        temperature: 0,
      });
      expect(res.choices[0]?.message.tool_calls).toBeUndefined();
      expect(res.choices[0]?.message.content?.length).toBeGreaterThan(0);
      // The history is in the prompt: it is longer than the question alone.
      const plain = await client.chat.completions.create({ model: name, messages: ask, max_tokens: 1 });
      expect(res.usage?.prompt_tokens).toBeGreaterThan((plain.usage?.prompt_tokens ?? 0) + 10);
    });

    it("auto: either calls a tool or answers in text, never anything else", async () => {
      for (const seed of [1, 2, 3]) {
        const res = await client.chat.completions.create({
          model: name,
          messages: ask,
          tools: [weatherTool],
          tool_choice: "auto",
          max_tokens: 300,
          temperature: 1,
          seed,
        });
        const choice = res.choices[0];
        if (choice?.finish_reason === "tool_calls")
          WeatherArgs.parse(
            JSON.parse(
              (choice.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.arguments,
            ),
          );
        else expect(typeof choice?.message.content).toBe("string");
      }
    });

    it("a call cut by max_tokens: finish_reason length, the call so far in tool_calls, no content; streamed alike", async () => {
      await expectCutCall(client, name);
    });

    it("refuses tool_choice naming a function that is not among the tools", async () => {
      const err = await client.chat.completions
        .create({
          model: name,
          messages: ask,
          tools: [weatherTool],
          tool_choice: { type: "function", function: { name: "nope" } },
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as Error).message).toMatch(/tool_choice: names function "nope"/);
    });
  });

  describe("logprobs, n, seed and logit_bias", () => {
    it("logprobs: one entry per token, its top alternatives sorted, the greedy token the likeliest; streamed too", async () => {
      const res = await client.chat.completions.create({
        model: name,
        messages: ask,
        max_tokens: 8,
        temperature: 0,
        logprobs: true,
        top_logprobs: 3,
      });
      const content = res.choices[0]?.logprobs?.content ?? [];
      expect(content).toHaveLength(res.usage?.completion_tokens ?? -1);
      expect(content.map((c) => c.token).join("")).toBe(res.choices[0]?.message.content);
      for (const entry of content) {
        expect(entry.top_logprobs).toHaveLength(3);
        const lps = entry.top_logprobs.map((t) => t.logprob);
        expect([...lps].sort((a, b) => b - a)).toEqual(lps);
        expect(entry.top_logprobs[0]?.token).toBe(entry.token);
        expect(entry.logprob).toBeLessThanOrEqual(0);
        expect(entry.bytes).toEqual([...Buffer.from(entry.token)]);
      }
      const stream = await client.chat.completions.create({
        model: name,
        messages: ask,
        max_tokens: 8,
        temperature: 0,
        logprobs: true,
        top_logprobs: 3,
        stream: true,
      });
      const streamed: OpenAI.Chat.ChatCompletionTokenLogprob[] = [];
      for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
      // Evaluated in other batches (the prompt's KV cache reused), the same tokens with the same probabilities to float precision.
      expect(streamed.map((e) => [e.token, e.top_logprobs.map((t) => t.token)])).toEqual(
        content.map((e) => [e.token, e.top_logprobs.map((t) => t.token)]),
      );
      for (const [i, e] of streamed.entries()) expect(e.logprob).toBeCloseTo(content[i]?.logprob ?? 0, 3);
    });

    it("logprobs are the model's own, whatever the temperature; top_p limits the alternatives to what it keeps", async () => {
      const first = async (temperature: number, top_p?: number) =>
        (
          await client.completions.create({
            model: name,
            prompt: "Once upon a time",
            max_tokens: 1,
            temperature,
            top_p,
            seed: 1,
            logprobs: 3,
          })
        ).choices[0]?.logprobs?.top_logprobs?.[0] ?? {};
      const greedy = await first(0);
      for (const t of [0.5, 1.7]) {
        const tempered = await first(t);
        expect(Object.keys(tempered)).toEqual(Object.keys(greedy));
        for (const [token, lp] of Object.entries(greedy)) expect(tempered[token]).toBeCloseTo(lp, 3);
      }
      const cut = await first(1, 0.01);
      expect(Object.keys(cut)).toEqual([Object.keys(greedy)[0]]);
    });

    it("completions: the legacy logprobs shape", async () => {
      const res = await client.completions.create({
        model: name,
        prompt: "Once upon a time",
        max_tokens: 5,
        temperature: 0,
        logprobs: 2,
      });
      const lp = res.choices[0]?.logprobs;
      expect(lp?.tokens).toHaveLength(5);
      expect(lp?.token_logprobs).toHaveLength(5);
      expect(lp?.top_logprobs?.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2)).toBe(true);
      expect(lp?.text_offset?.[0]).toBe(0);
      expect(lp?.tokens?.join("")).toBe(res.choices[0]?.text);
    });

    it("n: that many choices, each a generation of its own, usage adding up; streamed with their indexes", async () => {
      const res = await client.chat.completions.create({
        model: name,
        messages: ask,
        max_tokens: 6,
        temperature: 1,
        seed: 7,
        n: 3,
      });
      expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2]);
      const single = await client.chat.completions.create({
        model: name,
        messages: ask,
        max_tokens: 6,
        temperature: 1,
        seed: 7,
      });
      // Choice 0 samples with the request's seed, so it is exactly the single answer.
      expect(res.choices[0]?.message.content).toBe(single.choices[0]?.message.content);
      expect(res.usage?.prompt_tokens).toBe(single.usage?.prompt_tokens);
      // Three generations of at most 6 tokens, the prompt counted once.
      expect(res.usage?.completion_tokens).toBeGreaterThan(single.usage?.completion_tokens ?? 0);
      expect(res.usage?.completion_tokens).toBeLessThanOrEqual(18);
      expect(res.usage?.total_tokens).toBe((res.usage?.prompt_tokens ?? 0) + (res.usage?.completion_tokens ?? 0));

      const stream = await client.chat.completions.create({
        model: name,
        messages: ask,
        max_tokens: 6,
        temperature: 1,
        seed: 7,
        n: 3,
        stream: true,
      });
      const texts = ["", "", ""];
      const finished = new Set<number>();
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          texts[c.index] += c.delta.content ?? "";
          if (c.finish_reason) finished.add(c.index);
        }
      }
      expect(finished).toEqual(new Set([0, 1, 2]));
      expect(texts).toEqual(res.choices.map((c) => c.message.content));
    });

    it("seed: the same seed gives the same sample, another seed another one", async () => {
      const sample = async (seed: number) =>
        (
          await client.completions.create({
            model: name,
            prompt: "Once upon a time",
            max_tokens: 12,
            temperature: 1.5,
            seed,
          })
        ).choices[0]?.text;
      const a = await sample(11);
      expect(await sample(11)).toBe(a);
      const others = await Promise.all([12, 13, 14, 15].map(sample));
      expect(others.some((t) => t !== a)).toBe(true);
    });

    it("logit_bias: -100 bans the greedy token, +100 forces another; an id outside the vocabulary is a 400", async () => {
      const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
      const model = await llama.loadModel({ modelPath });
      try {
        const greedy = await client.completions.create({
          model: name,
          prompt: "Once upon a time",
          max_tokens: 1,
          temperature: 0,
          logprobs: 5,
        });
        const first = greedy.choices[0]?.logprobs?.tokens?.[0] as string;
        const alternatives = Object.keys(greedy.choices[0]?.logprobs?.top_logprobs?.[0] ?? {}).filter(
          (t) => t !== first,
        );
        // Token ids by the text each decodes to, as the answer's first token is decoded.
        const vocabulary = (model.fileInfo.metadata.tokenizer?.ggml?.tokens ?? []) as string[];
        // (A byte token may decode to the same text as a piece: all of them are banned.)
        const idsOf = (text: string) =>
          vocabulary.flatMap((_, id) => (model.detokenize([id as never]) === text ? [id] : []));
        const ban = Object.fromEntries(idsOf(first).map((id) => [String(id), -100]));
        expect(Object.keys(ban).length).toBeGreaterThan(0);
        const banned = await client.completions.create({
          model: name,
          prompt: "Once upon a time",
          max_tokens: 1,
          temperature: 0,
          logprobs: 5,
          logit_bias: ban,
        });
        expect(banned.choices[0]?.logprobs?.tokens?.[0]).not.toBe(first);
        const wanted = alternatives.at(-1) as string;
        const wantedId = idsOf(wanted).at(-1) as number;
        const forced = await client.completions.create({
          model: name,
          prompt: "Once upon a time",
          max_tokens: 1,
          temperature: 0,
          logprobs: 1,
          logit_bias: { [String(wantedId)]: 100 },
        });
        expect(forced.choices[0]?.logprobs?.tokens?.[0]).toBe(wanted);
        const err = await client.completions
          .create({ model: name, prompt: "x", max_tokens: 1, logit_bias: { "99999999": 5 } })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as Error).message).toMatch(/logit_bias: token 99999999 is not in this model's vocabulary/);
      } finally {
        await model.dispose();
      }
    });
  });

  it("refuses a field that would change the answer, naming it; ignores informational ones", async () => {
    const refused = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: name,
        messages: ask,
        max_tokens: 2,
        prediction: { type: "content", content: "x" },
      }),
    });
    expect(refused.status).toBe(400);
    const body = (await refused.json()) as { error: { param: string; message: string } };
    expect(body.error.param).toBe("prediction");
    expect(body.error.message).toMatch(/prediction: is not supported/);
    const ok = await client.chat.completions.create({
      model: name,
      messages: ask,
      max_tokens: 2,
      user: "u-1",
      metadata: { team: "a" },
      store: false,
    });
    expect(ok.choices[0]?.message.content?.length).toBeGreaterThan(0);
  });
});

describe("a model whose chat template has its own tool format (Hermes/Qwen style)", () => {
  let stack: Stack;
  let client: OpenAI;
  const name = unique("hermes");

  beforeAll(async () => {
    const modelPath = await tinyModelPath({ chatTemplate: HERMES_STYLE_TEMPLATE, contextLength: 2048 });
    stack = await sharedStack();
    await deploy(stack, name, { source: modelPath });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
  }, 120_000);
  afterAll(() => undeploy(stack, name));

  it("calls in the template's own syntax, arguments held to the schema; the raw answer shows the syntax", async () => {
    const request = {
      model: name,
      messages: ask,
      tools: [weatherTool, timeTool],
      tool_choice: "required" as const,
      max_tokens: 300,
      temperature: 0,
    };
    const res = await client.chat.completions.create({ ...request, logprobs: true });
    expect(res.choices[0]?.finish_reason).toBe("tool_calls");
    const call = res.choices[0]?.message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === "get_weather") WeatherArgs.parse(args);
    else expect(["utc", "local"]).toContain(args.zone);
    // The tokens generated spell the template's call, not the generic {"tool_calls": …} object.
    const raw = (res.choices[0]?.logprobs?.content ?? []).map((t) => t.token).join("");
    expect(raw).toMatch(new RegExp(`^<tool_call>\\n\\{"name": "${call.function.name}", "arguments": `));
    expect(raw.endsWith("}\n</tool_call>")).toBe(true);
  });

  it("a call cut by max_tokens in the template's syntax: the call so far, as in the generic format", async () => {
    await expectCutCall(client, name);
  });

  it("a named function, parallel calls when asked for, and the history rendered back natively", async () => {
    const named = await client.chat.completions.create({
      model: name,
      messages: ask,
      tools: [weatherTool, timeTool],
      tool_choice: { type: "function", function: { name: "get_time" } },
      parallel_tool_calls: true,
      max_tokens: 600,
      temperature: 0,
    });
    const calls = (named.choices[0]?.message.tool_calls ?? []) as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[];
    expect(calls.length).toBeGreaterThanOrEqual(1);
    expect(calls.length).toBeLessThanOrEqual(4);
    for (const c of calls) expect(c.function.name).toBe("get_time");

    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      ...ask,
      { role: "assistant", content: null, tool_calls: calls },
      ...calls.map((c) => ({ role: "tool" as const, tool_call_id: c.id, content: "12:00" })),
    ];
    const answer = await client.chat.completions.create({
      model: name,
      messages,
      tools: [timeTool],
      tool_choice: "none",
      max_tokens: 5,
      temperature: 0,
      logprobs: true,
    });
    expect(answer.choices[0]?.message.tool_calls).toBeUndefined();
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0);
    // tool_choice auto: the tiny model never starts a call by itself, so it answers in text, streamed.
    const stream = await client.chat.completions.create({
      model: name,
      messages: ask,
      tools: [weatherTool],
      max_tokens: 5,
      temperature: 0,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      expect(chunk.choices[0]?.delta.tool_calls).toBeUndefined();
    }
    expect(text.length).toBeGreaterThan(0);
  });
});
