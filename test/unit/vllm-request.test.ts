/**
 * The vLLM client's mapping without a server: the request body each contract field becomes
 * (`vllmRequestBody`), and what a replayed vLLM stream reads as (`readVllmStream`): tool calls
 * streamed in fragments, chat logprobs and /v1/completions' legacy logprobs. The stream shapes
 * are vLLM's own (vllm/entrypoints/openai/protocol.py, serving_chat.py, serving_completion.py).
 */
import { describe, expect, it } from "vitest";
import type { ChatMessage, SamplingParams, TokenLogprob } from "../../src/contracts/job.ts";
import type { ChatTools, TextRequest } from "../../workers/engines/engine.ts";
import { readVllmStream, vllmRequestBody } from "../../workers/engines/vllm-protocol.ts";

const WEATHER: ChatTools["tools"][number] = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather now",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
};

function chat(
  params: SamplingParams,
  tools?: ChatTools,
  messages: ChatMessage[] = [{ role: "user", content: "Hi" }],
): TextRequest {
  return { kind: "chat", messages, params, tools };
}

function prompt(params: SamplingParams): TextRequest {
  return { kind: "prompt", prompt: "Once", params };
}

/** The events as vLLM sends them, each line ended by `eol`, cut into small byte pieces so events straddle reads. */
function sse(events: unknown[], eol = "\n"): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(
    [...events.map((e) => `data: ${JSON.stringify(e)}`), "data: [DONE]"].map((line) => line + eol + eol).join(""),
  );
  return new ReadableStream({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 7) controller.enqueue(bytes.slice(i, i + 7));
      controller.close();
    },
  });
}

const usageAt = (completion: number) => ({
  prompt_tokens: 5,
  completion_tokens: completion,
  total_tokens: 5 + completion,
});
const chatChunk = (delta: object, finish: string | null = null, logprobs: object | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  model: "m",
  choices: [{ index: 0, delta, logprobs, finish_reason: finish }],
});
const completionChunk = (text: string, finish: string | null, logprobs: object | null) => ({
  id: "cmpl-1",
  object: "text_completion",
  model: "m",
  choices: [{ index: 0, text, logprobs, finish_reason: finish }],
});

async function read(request: TextRequest, events: unknown[], eol?: string) {
  const pieces: [string, TokenLogprob[] | undefined][] = [];
  const out = await readVllmStream(sse(events, eol), request, {
    onText: (text, logprobs) => pieces.push([text, logprobs]),
  });
  return { out, pieces };
}

describe("vllmRequestBody", () => {
  it("passes every sampling field under its own name to /v1/completions, with legacy integer logprobs", () => {
    const body = vllmRequestBody(
      prompt({
        max_tokens: 20,
        temperature: 0.5,
        top_p: 0.9,
        top_k: 40,
        min_p: 0.05,
        seed: 7,
        stop: ["\n"],
        frequency_penalty: 0.1,
        presence_penalty: -0.2,
        logit_bias: { "42": -100, "7": 5 },
        logprobs: true,
        top_logprobs: 3,
        response_format: { type: "json_object" },
      }),
      "stories",
    );
    expect(body).toEqual({
      model: "stories",
      prompt: "Once",
      max_tokens: 20,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.05,
      seed: 7,
      stop: ["\n"],
      frequency_penalty: 0.1,
      presence_penalty: -0.2,
      logit_bias: { "42": -100, "7": 5 },
      logprobs: 3,
      response_format: { type: "json_object" },
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
  });

  it("sends nothing for fields left unset (vLLM's defaults apply), except max_tokens null", () => {
    const body = vllmRequestBody(prompt({}), "m");
    expect(body).toEqual({
      model: "m",
      prompt: "Once",
      max_tokens: null,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    // top_logprobs alone asks for nothing: the contract reports logprobs only when `logprobs` is true.
    expect(vllmRequestBody(prompt({ top_logprobs: 2 }), "m")).not.toHaveProperty("logprobs");
    expect(vllmRequestBody(chat({ logprobs: false, top_logprobs: 2 }), "m")).not.toHaveProperty("top_logprobs");
  });

  it("sends a token-id prompt as the ids themselves (vLLM evaluates them as given)", () => {
    const body = vllmRequestBody({ kind: "prompt", prompt: [1, 403, 407], params: {} }, "m");
    expect(body.prompt).toEqual([1, 403, 407]);
  });

  it("asks /v1/chat/completions for logprobs in the chat form", () => {
    expect(vllmRequestBody(chat({ logprobs: true, top_logprobs: 2 }), "m")).toMatchObject({
      logprobs: true,
      top_logprobs: 2,
    });
    expect(vllmRequestBody(chat({ logprobs: true }), "m")).toMatchObject({ logprobs: true, top_logprobs: 0 });
    expect(vllmRequestBody(prompt({ logprobs: true }), "m")).toMatchObject({ logprobs: 0 });
  });

  it("passes a json_schema response format as OpenAI's, and one without a schema as json_object", () => {
    const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
    const withSchema = { type: "json_schema", json_schema: { name: "count", schema, strict: true } } as const;
    expect(vllmRequestBody(chat({ response_format: withSchema }), "m").response_format).toEqual(withSchema);
    expect(vllmRequestBody(prompt({ response_format: withSchema }), "m").response_format).toEqual(withSchema);
    expect(
      vllmRequestBody(chat({ response_format: { type: "json_schema", json_schema: { name: "any" } } }), "m")
        .response_format,
    ).toEqual({ type: "json_object" });
  });

  it("passes tools, defaulting tool_choice to auto as OpenAI does (older vLLM defaults to none)", () => {
    const body = vllmRequestBody(chat({}, { tools: [WEATHER] }), "m");
    expect(body.tools).toEqual([WEATHER]);
    expect(body.tool_choice).toBe("auto");
    expect(body).not.toHaveProperty("parallel_tool_calls");
    const named = { type: "function", function: { name: "get_weather" } } as const;
    expect(
      vllmRequestBody(chat({}, { tools: [WEATHER], tool_choice: named, parallel_tool_calls: false }), "m"),
    ).toMatchObject({
      tool_choice: named,
      parallel_tool_calls: false,
    });
    expect(vllmRequestBody(chat({}, { tools: [WEATHER], tool_choice: "required" }), "m").tool_choice).toBe("required");
    expect(vllmRequestBody(chat({}), "m")).not.toHaveProperty("tools");
    expect(vllmRequestBody(chat({}), "m")).not.toHaveProperty("tool_choice");
  });

  it("sends a tool conversation as OpenAI does: null content beside tool_calls, tool_call_id on tool turns", () => {
    const call = {
      id: "call_1",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Oslo"}' },
    } as const;
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: "", tool_calls: [call] },
      { role: "tool", content: '{"celsius":3}', tool_call_id: "call_1" },
      { role: "assistant", content: "Let me check again.", tool_calls: [call] },
    ];
    expect(vllmRequestBody(chat({}, { tools: [WEATHER] }, messages), "m").messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", content: '{"celsius":3}', tool_call_id: "call_1" },
      { role: "assistant", content: "Let me check again.", tool_calls: [call] },
    ]);
  });
});

describe("readVllmStream", () => {
  it("puts a streamed tool call together from its index-keyed fragments", async () => {
    const { out, pieces } = await read(chat({}, { tools: [WEATHER] }), [
      chatChunk({ role: "assistant", content: "" }),
      chatChunk({
        tool_calls: [{ index: 0, id: "chatcmpl-tool-a", type: "function", function: { name: "get_weather" } }],
      }),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: '{"city": ' } }] }),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }),
      chatChunk({
        tool_calls: [
          {
            index: 1,
            id: "chatcmpl-tool-b",
            type: "function",
            function: { name: "get_weather", arguments: '{"city": "Bergen"}' },
          },
        ],
      }),
      chatChunk({}, "tool_calls"),
      { id: "chatcmpl-1", object: "chat.completion.chunk", model: "m", choices: [], usage: usageAt(14) },
    ]);
    expect(out).toEqual({
      text: "",
      finish_reason: "tool_calls",
      usage: usageAt(14),
      tool_calls: [
        { id: "chatcmpl-tool-a", type: "function", function: { name: "get_weather", arguments: '{"city": "Oslo"}' } },
        { id: "chatcmpl-tool-b", type: "function", function: { name: "get_weather", arguments: '{"city": "Bergen"}' } },
      ],
    });
    expect(pieces).toEqual([]);
  });

  it("reads vLLM's stop_reason: the caller's stop string that ended the text, never a stop token's id", async () => {
    const last = (stop_reason: string | number | null) => ({
      ...completionChunk(" upon", "stop", null),
      choices: [{ index: 0, text: " upon", logprobs: null, finish_reason: "stop", stop_reason }],
    });
    const byString = await read(prompt({ stop: [" a"] }), [completionChunk("Once", null, null), last(" a")]);
    expect(byString.out).toMatchObject({ text: "Once upon", finish_reason: "stop", stop_sequence: " a" });
    const byToken = await read(prompt({}), [last(2)]);
    expect(byToken.out.finish_reason).toBe("stop");
    expect(byToken.out).not.toHaveProperty("stop_sequence");
  });

  it("keeps only the first call when parallel_tool_calls is false, and reports a named tool's 'stop' as tool_calls", async () => {
    const named = { type: "function", function: { name: "get_weather" } } as const;
    const { out } = await read(chat({}, { tools: [WEATHER], tool_choice: named, parallel_tool_calls: false }), [
      chatChunk({ tool_calls: [{ index: 0, id: "t0", function: { name: "get_weather", arguments: "{}" } }] }),
      chatChunk({ tool_calls: [{ index: 1, id: "t1", function: { name: "get_weather", arguments: "{}" } }] }),
      chatChunk({}, "stop"),
    ]);
    expect(out.finish_reason).toBe("tool_calls");
    expect(out.tool_calls?.map((c) => c.id)).toEqual(["t0"]);
  });

  it("a call cut by max_tokens, which vLLM's stream still ends with tool_calls, is said to be cut", async () => {
    const named = { type: "function", function: { name: "get_weather" } } as const;
    const events = (completion: number) => [
      chatChunk({ tool_calls: [{ index: 0, id: "t0", function: { name: "get_weather", arguments: '{"city": "Os' } }] }),
      { ...chatChunk({}, "tool_calls"), usage: usageAt(completion) },
    ];
    const { out } = await read(chat({ max_tokens: 6 }, { tools: [WEATHER], tool_choice: named }), events(6));
    expect(out).toMatchObject({
      finish_reason: "length",
      text: "",
      tool_calls: [{ id: "t0", function: { name: "get_weather", arguments: '{"city": "Os' } }],
    });
    const below = await read(chat({ max_tokens: 7 }, { tools: [WEATHER], tool_choice: named }), events(6));
    expect(below.out.finish_reason).toBe("tool_calls");
  });

  it("passes chat logprobs with the text they came from and collects them when asked", async () => {
    const hello = {
      token: "Hello",
      logprob: -0.25,
      bytes: [72, 101, 108, 108, 111],
      top_logprobs: [
        { token: "Hello", logprob: -0.25, bytes: [72, 101, 108, 108, 111] },
        { token: "Hi", logprob: -1.5, bytes: [72, 105] },
      ],
    };
    const bang = {
      token: "!",
      logprob: -0.01,
      bytes: [33],
      top_logprobs: [
        { token: "!", logprob: -0.01, bytes: [33] },
        { token: ".", logprob: -4.75, bytes: [46] },
      ],
    };
    const events = [
      chatChunk({ role: "assistant", content: "" }),
      chatChunk({ content: "Hello" }, null, { content: [hello] }),
      chatChunk({ content: "!" }, "stop", { content: [bang] }),
    ];
    const { out, pieces } = await read(chat({ logprobs: true, top_logprobs: 2 }), events);
    expect(out).toMatchObject({ text: "Hello!", finish_reason: "stop", logprobs: [hello, bang] });
    expect(out).not.toHaveProperty("tool_calls");
    expect(pieces).toEqual([
      ["Hello", [hello]],
      ["!", [bang]],
    ]);
    // Not asked for: neither the hook nor the result carries logprobs.
    const plain = await read(chat({}), events);
    expect(plain.out).not.toHaveProperty("logprobs");
    expect(plain.pieces).toEqual([
      ["Hello", undefined],
      ["!", undefined],
    ]);
  });

  it("turns /v1/completions' legacy logprobs into the chat shape: best `top_logprobs` first, bytes from UTF-8", async () => {
    const { out, pieces } = await read(prompt({ logprobs: true, top_logprobs: 2 }), [
      // vLLM's map holds the sampled token first and the `top` best after it: here " café" is not among the best two.
      completionChunk(" café", null, {
        text_offset: [4],
        tokens: [" café"],
        token_logprobs: [-3.5],
        top_logprobs: [{ " café": -3.5, " upon": -0.5, " there": -1.25 }],
      }),
      completionChunk(" x", "length", {
        text_offset: [9],
        tokens: [" x"],
        token_logprobs: [-0.125],
        top_logprobs: [{ " x": -0.125, " y": -2.5 }],
      }),
    ]);
    const cafe: TokenLogprob = {
      token: " café",
      logprob: -3.5,
      bytes: [32, 99, 97, 102, 195, 169],
      top_logprobs: [
        { token: " upon", logprob: -0.5, bytes: [32, 117, 112, 111, 110] },
        { token: " there", logprob: -1.25, bytes: [32, 116, 104, 101, 114, 101] },
      ],
    };
    const x: TokenLogprob = {
      token: " x",
      logprob: -0.125,
      bytes: [32, 120],
      top_logprobs: [
        { token: " x", logprob: -0.125, bytes: [32, 120] },
        { token: " y", logprob: -2.5, bytes: [32, 121] },
      ],
    };
    expect(out).toMatchObject({ text: " café x", finish_reason: "length", logprobs: [cafe, x] });
    expect(pieces).toEqual([
      [" café", [cafe]],
      [" x", [x]],
    ]);
  });

  it("reads a stream whose lines end in \\r\\n as one whose lines end in \\n", async () => {
    const events = [
      chatChunk({ role: "assistant", content: "" }),
      chatChunk({ content: "Hello" }),
      chatChunk({ content: "!" }, "stop"),
      { id: "chatcmpl-1", object: "chat.completion.chunk", model: "m", choices: [], usage: usageAt(2) },
    ];
    const crlf = await read(chat({}), events, "\r\n");
    expect(crlf.out).toEqual({ text: "Hello!", finish_reason: "stop", usage: usageAt(2) });
    expect(crlf).toEqual(await read(chat({}), events));
  });

  it("reports the logprob of a token that has no text yet (the first half of a character)", async () => {
    const { out, pieces } = await read(prompt({ logprobs: true }), [
      completionChunk("", null, {
        text_offset: [0],
        tokens: ["\ufffd"],
        token_logprobs: [-0.5],
        top_logprobs: [{ "\ufffd": -0.5 }],
      }),
      completionChunk("é", "stop", {
        text_offset: [0],
        tokens: ["é"],
        token_logprobs: [-0.25],
        top_logprobs: [{ é: -0.25 }],
      }),
    ]);
    expect(out.text).toBe("é");
    expect(out.logprobs?.map((l) => [l.token, l.logprob, l.top_logprobs])).toEqual([
      ["\ufffd", -0.5, []],
      ["é", -0.25, []],
    ]);
    expect(pieces.map(([text]) => text)).toEqual(["", "é"]);
  });
});
