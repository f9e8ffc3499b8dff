/**
 * Anthropic's Messages API end to end (issue 40), on one `platform up` stack serving the suite's
 * tiny model: @anthropic-ai/sdk (messages.create, messages.stream, tools and the tool_result round
 * trip, countTokens, its error classes from Anthropic's envelope, x-api-key auth) and LangChain's
 * ChatAnthropic pointed at the platform; and vLLM's /tokenize and /detokenize on the same stack.
 */
import Anthropic from "@anthropic-ai/sdk";
import { ChatAnthropic } from "@langchain/anthropic";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack } from "../helpers/stack.ts";

const MODEL = unique("tiny");
const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "The weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 12 } },
    required: ["city"],
    additionalProperties: false,
  },
};

let stack: Stack;
let client: Anthropic;

beforeAll(async () => {
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: await tinyModelPath({ contextLength: 4096 }) });
  // The SDK sends the key as x-api-key, with anthropic-version, to <baseURL>/v1/messages.
  client = new Anthropic({ baseURL: stack.baseUrl, apiKey: stack.apiKey, maxRetries: 0 });
}, 180_000);

afterAll(() => undeploy(stack, MODEL));

describe("@anthropic-ai/sdk", () => {
  it("creates a message: text content, stop_reason max_tokens, usage", async () => {
    const m = await client.messages.create({
      model: MODEL,
      max_tokens: 8,
      system: "Tell a story.",
      messages: [{ role: "user", content: "Once upon a time" }],
    });
    expect(m).toMatchObject({ type: "message", role: "assistant", model: MODEL, stop_reason: "max_tokens" });
    expect(m.id).toMatch(/^msg_/);
    expect(m.content).toHaveLength(1);
    expect(m.content[0]?.type).toBe("text");
    expect(m.usage).toMatchObject({ output_tokens: 8, cache_creation_input_tokens: 0 });
    expect(m.usage.input_tokens).toBeGreaterThan(0);
    expect(typeof m.usage.cache_read_input_tokens).toBe("number");
  });

  it("streams Anthropic's events; the stream helper's final message is the deltas joined", async () => {
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 10,
      messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }] }],
    });
    const types: string[] = [];
    let joined = "";
    stream.on("streamEvent", (e) => {
      types.push(e.type);
      if (e.type === "content_block_delta" && e.delta.type === "text_delta") joined += e.delta.text;
    });
    const final = await stream.finalMessage();
    expect(types.slice(0, 2)).toEqual(["message_start", "content_block_start"]);
    expect(types.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(types.filter((t) => t === "content_block_delta").length).toBeGreaterThan(1);
    expect(final.content).toEqual([{ type: "text", text: joined }]);
    expect(final.stop_reason).toBe("max_tokens");
    expect(final.usage.output_tokens).toBe(10);
    expect(final.usage.input_tokens).toBeGreaterThan(0);
  });

  it("says which stop sequence ended the answer (stop_reason stop_sequence), streamed and not", async () => {
    const ask = {
      model: MODEL,
      max_tokens: 200,
      temperature: 0,
      messages: [{ role: "user" as const, content: "Once upon a time" }],
    };
    // Greedy: the same answer again, cut where its fifth word first appears.
    const free = await client.messages.create(ask);
    const text = free.content[0]?.type === "text" ? free.content[0].text : "";
    const stop = ` ${text.split(" ")[4]}`;
    expect(stop.length).toBeGreaterThan(1);
    const m = await client.messages.create({ ...ask, stop_sequences: ["never written", stop] });
    expect(m).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(m.content).toEqual([{ type: "text", text: text.slice(0, text.indexOf(stop)) }]);
    const streamed = await client.messages.stream({ ...ask, stop_sequences: [stop] }).finalMessage();
    expect(streamed).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(free.stop_sequence).toBeNull();
  });

  it("calls tools (tool_use with parsed input) and takes the tool_result back, streamed too", async () => {
    const ask: Anthropic.MessageCreateParamsNonStreaming = {
      model: MODEL,
      max_tokens: 200,
      tools: [weather],
      tool_choice: { type: "tool", name: "get_weather" },
      messages: [{ role: "user", content: "Weather?" }],
    };
    const m = await client.messages.create(ask);
    expect(m.stop_reason).toBe("tool_use");
    const use = m.content.find((b) => b.type === "tool_use");
    expect(use).toMatchObject({ type: "tool_use", name: "get_weather" });
    if (use?.type !== "tool_use") throw new Error("no tool_use");
    expect(Object.keys(use.input as object)).toEqual(["city"]);

    const answered = await client.messages.create({
      model: MODEL,
      max_tokens: 6,
      tools: [weather],
      tool_choice: { type: "none" },
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: m.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny" }] },
      ],
    });
    expect(answered.content.map((b) => b.type)).toEqual(["text"]);
    // The call and its result reached the prompt: longer than the question alone.
    const alone = await client.messages.create({
      model: MODEL,
      max_tokens: 1,
      tools: [weather],
      tool_choice: { type: "none" },
      messages: [{ role: "user", content: "Weather?" }],
    });
    expect(answered.usage.input_tokens).toBeGreaterThan(alone.usage.input_tokens);

    const streamed = await client.messages.stream({ ...ask, tool_choice: { type: "any" } }).finalMessage();
    expect(streamed.stop_reason).toBe("tool_use");
    const streamedUse = streamed.content.find((b) => b.type === "tool_use");
    expect(Object.keys((streamedUse as Anthropic.ToolUseBlock).input as object)).toEqual(["city"]);
  });

  it("counts tokens as the model reads the prompt", async () => {
    const request = { model: MODEL, messages: [{ role: "user" as const, content: "Once upon a time" }] };
    const counted = await client.messages.countTokens(request);
    const made = await client.messages.create({ ...request, max_tokens: 1 });
    expect(counted.input_tokens).toBe(made.usage.input_tokens);
    const longer = await client.messages.countTokens({ ...request, system: "Tell a long story." });
    expect(longer.input_tokens).toBeGreaterThan(counted.input_tokens);
  });

  it("answers errors in Anthropic's envelope, as the SDK's error classes", async () => {
    const base = { model: MODEL, max_tokens: 4, messages: [{ role: "user" as const, content: "x" }] };
    const missing = await client.messages.create({ ...base, max_tokens: undefined } as never).catch((e) => e);
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError);
    expect(missing.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(missing.error.error.message).toMatch(/^max_tokens: is required/);

    const unknown = await client.messages.create({ ...base, foo: 1 } as never).catch((e) => e);
    expect(unknown).toBeInstanceOf(Anthropic.BadRequestError);
    expect(unknown.error.error.message).toMatch(/^foo: is not supported/);

    const image = await client.messages
      .create({
        ...base,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "http://x" } }] }],
      })
      .catch((e) => e);
    expect(image).toBeInstanceOf(Anthropic.BadRequestError);
    expect(image.error.error.message).toMatch(/"image"/);

    const serverTool = await client.messages
      .create({ ...base, tools: [{ type: "web_search_20250305", name: "web_search" }] })
      .catch((e) => e);
    expect(serverTool.error.error.message).toMatch(/web_search_20250305 is one of Anthropic's server tools/);

    const noModel = await client.messages.create({ ...base, model: "nope" }).catch((e) => e);
    expect(noModel).toBeInstanceOf(Anthropic.NotFoundError);
    expect(noModel.error.error.type).toBe("not_found_error");

    const badKey = new Anthropic({ baseURL: stack.baseUrl, apiKey: "sk-plat-wrong", maxRetries: 0 });
    const denied = await badKey.messages.create(base).catch((e) => e);
    expect(denied).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(denied.error.error.type).toBe("authentication_error");

    const created = await runCli(["keys", "create", "one-a-minute", "--rpm", "1", "--json"], stack.env);
    expect(created.code, created.stderr).toBe(0);
    const limited = new Anthropic({
      baseURL: stack.baseUrl,
      apiKey: (JSON.parse(created.stdout) as { key: string }).key,
      maxRetries: 0,
    });
    await limited.messages.create(base);
    const refused = await limited.messages.create(base).catch((e) => e);
    expect(refused).toBeInstanceOf(Anthropic.RateLimitError);
    expect(refused.error.error.type).toBe("rate_limit_error");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
  });

  it("takes the bearer header as well as x-api-key", async () => {
    const res = await fetch(`${stack.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "x" }] }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { type: string }).type).toBe("message");
  });
});

describe("LangChain's ChatAnthropic", () => {
  it("invokes and streams against the platform", async () => {
    const model = new ChatAnthropic({
      model: MODEL,
      anthropicApiUrl: stack.baseUrl,
      apiKey: stack.apiKey,
      maxTokens: 6,
      maxRetries: 0,
    });
    const answer = await model.invoke([
      ["system", "Tell a story."],
      ["human", "Once upon a time"],
    ]);
    expect(typeof answer.content === "string" ? answer.content.length : 0).toBeGreaterThan(0);
    expect(answer.response_metadata.stop_reason).toBe("max_tokens");
    let joined = "";
    for await (const chunk of await model.stream("Once upon a time")) joined += String(chunk.content);
    expect(joined.length).toBeGreaterThan(0);
  });

  it("binds tools: a tool call with parsed args", async () => {
    const model = new ChatAnthropic({
      model: MODEL,
      anthropicApiUrl: stack.baseUrl,
      apiKey: stack.apiKey,
      maxTokens: 200,
      maxRetries: 0,
    }).bindTools([weather], { tool_choice: { type: "tool", name: "get_weather" } });
    const answer = await model.invoke("Weather?");
    expect(answer.tool_calls?.[0]).toMatchObject({ name: "get_weather", args: { city: expect.any(String) } });
  });
});

describe("POST /tokenize and /detokenize (vLLM's shapes)", () => {
  const post = async (path: string, body: unknown, key = stack.apiKey) => {
    const res = await fetch(`${stack.baseUrl}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const openaiPost = async (path: string, body: unknown) =>
    (await post(`/v1${path}`, body)).body as { usage: { prompt_tokens: number } };

  it("tokenizes a prompt as a completion reads it, and a chat as a chat request's prompt is", async () => {
    const prompt = "Once upon a time";
    const tokenized = await post("/tokenize", { model: MODEL, prompt });
    expect(tokenized.status, JSON.stringify(tokenized.body)).toBe(200);
    const { count, max_model_len, tokens } = tokenized.body as {
      count: number;
      max_model_len: number;
      tokens: number[];
    };
    expect(count).toBe(tokens.length);
    expect(max_model_len).toBe(4096);
    const completion = await openaiPost("/completions", { model: MODEL, prompt, max_tokens: 1 });
    expect(count).toBe(completion.usage.prompt_tokens);
    expect((await post("/v1/tokenize", { model: MODEL, prompt })).body).toEqual(tokenized.body);

    const messages = [{ role: "user", content: prompt }];
    const chat = await post("/tokenize", { model: MODEL, messages });
    const asked = await openaiPost("/chat/completions", { model: MODEL, messages, max_tokens: 1 });
    expect(chat.body.count).toBe(asked.usage.prompt_tokens);

    const bare = (await post("/tokenize", { model: MODEL, prompt, add_special_tokens: false })).body as {
      tokens: number[];
    };
    expect(bare.tokens.length).toBeLessThanOrEqual(count);
    const back = await post("/detokenize", { model: MODEL, tokens: bare.tokens });
    expect(back.status).toBe(200);
    expect(String(back.body.prompt).trimStart()).toBe(prompt);
  });

  it("refuses bad input naming the field, and callers without a key", async () => {
    const unknown = await post("/tokenize", { model: MODEL, prompt: "x", return_token_strs: true });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ param: "return_token_strs" });
    const huge = await post("/detokenize", { model: MODEL, tokens: [2 ** 30] });
    expect(huge.status).toBe(400);
    expect(huge.body.error).toMatchObject({ param: "tokens", message: expect.stringMatching(/^tokens\[0\]: token/) });
    expect((await post("/tokenize", { model: "nope", prompt: "x" })).status).toBe(404);
    expect((await post("/tokenize", { model: MODEL, prompt: "x" }, "sk-plat-wrong")).status).toBe(401);
  });
});
