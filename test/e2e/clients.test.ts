/**
 * Structured output and tool calling through real client libraries: the Vercel AI SDK (its
 * OpenAI-compatible provider) and the official `openai` client's zod helpers, against a
 * `platform up` stack serving the suite's tiny model and, where ../shared has it, stories260K.
 * Neither model can follow instructions, so whatever parses and validates here does so because
 * the server constrains decoding, not because the model understood the schema.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { APICallError, generateObject, generateText, Output, streamText, tool } from "ai";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";

const TINY = unique("tiny");
const STORIES = `${TINY}-stories`;
const shared = sharedModelPath();

// Bounded strings: neither model ever chooses to close a string, so only maxLength ends one
// within a modest token budget. The plain int() still carries zod's safe-integer bounds.
const Pet = z.object({
  name: z.string().max(20),
  age: z.number().int(),
  friendly: z.boolean(),
  kind: z.enum(["dog", "cat", "bird"]),
});

const Weather = z.object({
  city: z.string().max(20),
  unit: z.enum(["celsius", "fahrenheit"]),
  days: z.number().int(),
});
// A numeric range is a keyword llama.cpp's grammar cannot hold the model to: the server refuses it.
/** A lower bound on a real number: no grammar can hold the model to it. */
const BoundedWeather = Weather.extend({ rain: z.number().positive() });
/** A small integer range: enforced, as the enum of its values. */
const RangedWeather = Weather.extend({ days: z.number().int().min(1).max(7) });
const Time = z.object({ zone: z.enum(["UTC", "CET", "PST"]) });

/** What the clients sent and got back, printed when a test fails: the bodies say whose bug it is. */
type Exchange = { request: string; status?: number; response?: string };
const exchanges: Exchange[] = [];

const recordingFetch: typeof fetch = async (input, init) => {
  const exchange: Exchange = {
    request: `${init?.method ?? "GET"} ${String(input instanceof Request ? input.url : input)}\n${typeof init?.body === "string" ? init.body : ""}`,
  };
  exchanges.push(exchange);
  const res = await fetch(input, init);
  exchange.status = res.status;
  // A clone, read on the side, so streaming clients still see chunks as they arrive.
  void res
    .clone()
    .text()
    .then((text) => (exchange.response = text))
    .catch(() => undefined);
  return res;
};

let stack: Stack;
let openai: OpenAI;
let provider: ReturnType<typeof createOpenAICompatible>;

beforeAll(async () => {
  // A long context: the tool-calling prompt spells out the tools' schemas, and the tiny model's
  // vocabulary spells most JSON one character a token.
  const tiny = await tinyModelPath({ contextLength: 4096 });
  stack = await sharedStack();
  await deploy(stack, TINY, { source: tiny });
  if (shared) {
    await deploy(stack, STORIES, {
      source: shared,
      version: "v1",
      endpoint: { resources: { replicas: 1, parallel: 2 } },
    });
  }
  openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0, fetch: recordingFetch });
  // supportsStructuredOutputs: without it the provider sends only json_object and drops the schema.
  provider = createOpenAICompatible({
    name: "platform",
    baseURL: `${stack.baseUrl}/v1`,
    apiKey: stack.apiKey,
    supportsStructuredOutputs: true,
    includeUsage: true,
    fetch: recordingFetch,
  });
}, 180_000);

afterAll(() => undeploy(stack, TINY, ...(shared ? [STORIES] : [])));

beforeEach(({ onTestFailed }) => {
  exchanges.length = 0;
  onTestFailed(() => {
    for (const e of exchanges)
      console.error(`--- ${e.request}\n=== ${e.status ?? "no response"}\n${e.response ?? "(body not read)"}`);
  });
});

function lastRequestBody(): Record<string, unknown> {
  const last = exchanges.at(-1);
  expect(last, "no request was recorded").toBeDefined();
  return JSON.parse((last as Exchange).request.slice((last as Exchange).request.indexOf("\n") + 1)) as Record<
    string,
    unknown
  >;
}

function expectPet(value: unknown): void {
  const pet = Pet.parse(value);
  expect(pet.name.length).toBeLessThanOrEqual(20);
  expect(Number.isSafeInteger(pet.age)).toBe(true);
  expect(typeof pet.friendly).toBe("boolean");
  expect(["dog", "cat", "bird"]).toContain(pet.kind);
}

function expectWeather(value: unknown): void {
  const args = Weather.parse(value);
  expect(args.city.length).toBeLessThanOrEqual(20);
  expect(Number.isSafeInteger(args.days)).toBe(true);
}

const models = [
  { title: "the suite's tiny model", name: TINY, skip: false },
  {
    title: shared ? "stories260K" : "stories260K (skipped: ../shared/models/stories260K is absent in this checkout)",
    name: STORIES,
    skip: !shared,
  },
];

for (const { title, name, skip } of models) {
  describe.skipIf(skip)(`real clients on ${title}`, () => {
    describe("Vercel AI SDK", () => {
      it("generateObject with a zod schema returns an object the SDK validated", async () => {
        const { object, finishReason } = await generateObject({
          model: provider.chatModel(name),
          schema: Pet,
          schemaName: "pet",
          prompt: "Describe a pet.",
          maxOutputTokens: 200,
          temperature: 0,
          maxRetries: 0,
        });
        expect(lastRequestBody().response_format).toMatchObject({
          type: "json_schema",
          json_schema: { name: "pet", strict: true },
        });
        expect(finishReason).toBe("stop");
        expectPet(object);

        // The SDK's non-deprecated route to the same request.
        const viaText = await generateText({
          model: provider.chatModel(name),
          output: Output.object({ schema: Pet }),
          prompt: "Describe a pet.",
          maxOutputTokens: 200,
          temperature: 0,
          maxRetries: 0,
        });
        expect(lastRequestBody().response_format).toMatchObject({ type: "json_schema" });
        expectPet(viaText.output);
      });

      it("generateText with toolChoice required returns a tool call whose input validates", async () => {
        const result = await generateText({
          model: provider.chatModel(name),
          tools: { get_weather: tool({ description: "The weather forecast for a city", inputSchema: Weather }) },
          toolChoice: "required",
          prompt: "What is the weather in Paris?",
          maxOutputTokens: 200,
          temperature: 0,
          maxRetries: 0,
        });
        expect(lastRequestBody().tool_choice).toBe("required");
        expect(result.finishReason).toBe("tool-calls");
        expect(result.toolCalls.length).toBeGreaterThanOrEqual(1);
        for (const call of result.toolCalls) {
          expect(call.invalid, `the SDK rejected the call: ${String(call.error)}`).toBeFalsy();
          expect(call.toolName).toBe("get_weather");
          expectWeather(call.input);
        }
      });

      it("generateText with a named tool choice calls that tool", async () => {
        const result = await generateText({
          model: provider.chatModel(name),
          tools: {
            get_weather: tool({ description: "The weather forecast for a city", inputSchema: Weather }),
            get_time: tool({ description: "The time in a time zone", inputSchema: Time }),
          },
          toolChoice: { type: "tool", toolName: "get_time" },
          prompt: "What time is it?",
          maxOutputTokens: 200,
          temperature: 0,
          maxRetries: 0,
        });
        expect(lastRequestBody().tool_choice).toEqual({ type: "function", function: { name: "get_time" } });
        expect(result.finishReason).toBe("tool-calls");
        expect(result.toolCalls.length).toBeGreaterThanOrEqual(1);
        for (const call of result.toolCalls) {
          expect(call.invalid, `the SDK rejected the call: ${String(call.error)}`).toBeFalsy();
          expect(call.toolName).toBe("get_time");
          Time.parse(call.input);
        }
      });

      it("streamText yields the tool call too", async () => {
        const errors: unknown[] = [];
        const result = streamText({
          model: provider.chatModel(name),
          tools: { get_weather: tool({ description: "The weather forecast for a city", inputSchema: Weather }) },
          toolChoice: "required",
          prompt: "What is the weather in Paris?",
          maxOutputTokens: 200,
          temperature: 0,
          maxRetries: 0,
          onError: ({ error }) => void errors.push(error),
        });
        const parts: string[] = [];
        const calls: { toolName: string; input: unknown; invalid?: boolean }[] = [];
        for await (const part of result.fullStream) {
          parts.push(part.type);
          if (part.type === "tool-call") calls.push(part);
          if (part.type === "error") errors.push(part.error);
        }
        expect(errors.map(String)).toEqual([]);
        expect(lastRequestBody()).toMatchObject({ stream: true, tool_choice: "required" });
        expect(calls.length, `stream parts: ${parts.join(", ")}`).toBeGreaterThanOrEqual(1);
        for (const call of calls) {
          expect(call.invalid).toBeFalsy();
          expect(call.toolName).toBe("get_weather");
          expectWeather(call.input);
        }
        expect(await result.finishReason).toBe("tool-calls");
        expect((await result.toolCalls).map((c) => c.input)).toEqual(calls.map((c) => c.input));
      });
    });

    describe("openai client", () => {
      it("chat.completions.parse with zodResponseFormat returns message.parsed matching the schema", async () => {
        const completion = await openai.chat.completions.parse({
          model: name,
          messages: [{ role: "user", content: "Describe a pet." }],
          response_format: zodResponseFormat(Pet, "pet"),
          max_tokens: 200,
          temperature: 0,
        });
        const message = completion.choices[0]?.message;
        expect(completion.choices[0]?.finish_reason).toBe("stop");
        expect(message?.parsed).not.toBeNull();
        expectPet(message?.parsed);
        expect(JSON.parse(message?.content ?? "")).toEqual(message?.parsed);
      });

      it("tool_choice required answers tool_calls, and the history with the tool's result gets a text answer", async () => {
        const tools: ChatCompletionTool[] = [
          {
            type: "function",
            function: {
              name: "get_weather",
              description: "The weather forecast for a city",
              parameters: z.toJSONSchema(Weather) as Record<string, unknown>,
            },
          },
        ];
        const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
        const first = await openai.chat.completions.create({
          model: name,
          messages,
          tools,
          tool_choice: "required",
          max_tokens: 200,
          temperature: 0,
        });
        const choice = first.choices[0];
        expect(choice?.finish_reason).toBe("tool_calls");
        const calls = choice?.message.tool_calls ?? [];
        expect(calls.length).toBeGreaterThanOrEqual(1);
        for (const call of calls) {
          expect(call.type).toBe("function");
          if (call.type !== "function") continue;
          expect(call.id).toBeTruthy();
          expect(call.function.name).toBe("get_weather");
          expectWeather(JSON.parse(call.function.arguments));
        }

        // As applications do: the assistant message goes back as it came, then one result per call.
        messages.push(choice?.message as ChatCompletionMessageParam);
        for (const call of calls)
          messages.push({
            role: "tool",
            tool_call_id: call.id,
            content: JSON.stringify({ forecast: "sunny", high: 21 }),
          });
        const second = await openai.chat.completions.create({
          model: name,
          messages,
          tools,
          tool_choice: "none",
          max_tokens: 32,
          temperature: 0,
        });
        const answer = second.choices[0];
        expect(["stop", "length"]).toContain(answer?.finish_reason);
        expect(answer?.message.tool_calls ?? []).toEqual([]);
        expect(answer?.message.content?.length).toBeGreaterThan(0);
      });

      it("streams a tool call whole in one delta, then finish_reason tool_calls", async () => {
        const stream = await openai.chat.completions.create({
          model: name,
          messages: [{ role: "user", content: "What is the weather in Paris?" }],
          tools: [
            {
              type: "function",
              function: { name: "get_weather", parameters: z.toJSONSchema(Weather) as Record<string, unknown> },
            },
          ],
          tool_choice: "required",
          max_tokens: 200,
          temperature: 0,
          stream: true,
        });
        const deltas = [];
        const finishes = [];
        for await (const chunk of stream) {
          for (const c of chunk.choices) {
            if (c.delta.tool_calls) deltas.push(...c.delta.tool_calls);
            if (c.finish_reason) finishes.push(c.finish_reason);
          }
        }
        expect(finishes).toEqual(["tool_calls"]);
        expect(deltas.length).toBeGreaterThanOrEqual(1);
        for (const delta of deltas) {
          expect(delta.id).toBeTruthy();
          expect(delta.function?.name).toBe("get_weather");
          expectWeather(JSON.parse(delta.function?.arguments ?? ""));
        }
      });

      it("chat.completions.parse with zodFunction tools fills parsed_arguments", async () => {
        const completion = await openai.chat.completions.parse({
          model: name,
          messages: [{ role: "user", content: "What is the weather in Paris?" }],
          tools: [
            zodFunction({ name: "get_weather", parameters: Weather, description: "The weather forecast for a city" }),
          ],
          tool_choice: { type: "function", function: { name: "get_weather" } },
          max_tokens: 200,
          temperature: 0,
        });
        const call = completion.choices[0]?.message.tool_calls?.[0];
        expect(completion.choices[0]?.finish_reason).toBe("tool_calls");
        expect(call?.type).toBe("function");
        if (call?.type !== "function") return;
        expectWeather(call.function.parsed_arguments);
      });
    });
  });
}

describe("what real clients see of a schema the engine cannot enforce", () => {
  // Refused rather than ignored: an answer outside the range would fail the client's own validation later.
  it("a small integer range is enforced; a bound on a real number is a 400 naming the keyword and where, through both clients", async () => {
    const ranged = await generateText({
      model: provider.chatModel(TINY),
      tools: { get_weather: tool({ inputSchema: RangedWeather }) },
      toolChoice: "required",
      prompt: "What is the weather in Paris?",
      maxOutputTokens: 300,
      maxRetries: 0,
    });
    expect(ranged.toolCalls).toHaveLength(1);
    RangedWeather.parse(ranged.toolCalls[0]?.input);

    const sdk = await generateText({
      model: provider.chatModel(TINY),
      tools: { get_weather: tool({ inputSchema: BoundedWeather }) },
      toolChoice: "required",
      prompt: "What is the weather in Paris?",
      maxOutputTokens: 200,
      maxRetries: 0,
    }).catch((e: unknown) => e);
    expect(APICallError.isInstance(sdk)).toBe(true);
    expect((sdk as APICallError).statusCode).toBe(400);
    expect((sdk as APICallError).message).toMatch(
      /tools\[0\]\.function\.parameters: the keyword "exclusiveMinimum" at \/properties\/rain\/exclusiveMinimum/,
    );

    const direct = await openai.chat.completions
      .parse({
        model: TINY,
        messages: [{ role: "user", content: "Describe a pet." }],
        response_format: zodResponseFormat(BoundedWeather, "weather"),
        max_tokens: 200,
      })
      .catch((e: unknown) => e);
    expect(direct).toBeInstanceOf(OpenAI.BadRequestError);
    expect((direct as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(
      /"exclusiveMinimum" at \/properties\/rain\/exclusiveMinimum/,
    );
  });
});
