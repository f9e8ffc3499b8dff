/**
 * The Responses and Messages API contracts (src/contracts/openai/responses*.ts, anthropic.ts):
 * bodies as the chat jobs they become, answers and stream events as the SDKs read them, the
 * errors naming their field, and /v1/responses batch lines.
 */
import { describe, expect, it } from "vitest";
import { openAiFormat } from "../../src/batch/openai-lines.ts";
import type { BatchSpec, OpenAiSpec } from "../../src/batch/store.ts";
import {
  anthropicError,
  anthropicStatus,
  MessagesRequest,
  messageResponse,
  toChatMessages as anthropicMessages,
  toChatToolChoice,
} from "../../src/contracts/anthropic.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import {
  inputItems,
  ResponseCreateRequest,
  toChatMessages,
  toResponseFormat,
  withInstructions,
} from "../../src/contracts/openai/responses.ts";
import {
  itemList,
  listedItems,
  outputItems,
  ResponseEvents,
  responseShell,
} from "../../src/contracts/openai/responses-output.ts";
import { DEFAULT_SCHEMA_LIMITS } from "../../src/contracts/schema-limits.ts";
import { asPlatformError } from "../../src/gateway/errors.ts";

let counter = 0;
const newId = (prefix: string) => `${prefix}${(counter++).toString(16).padStart(16, "0")}`;
const usage = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 };
const refusal = (schema: { parse: (v: unknown) => unknown }, body: unknown) => {
  try {
    schema.parse(body);
    return undefined;
  } catch (e) {
    const err = asPlatformError(e);
    return { param: err.param, message: err.message };
  }
};

describe("the Responses API request", () => {
  it("becomes the chat conversation: instructions first, a function_call joining its assistant turn", () => {
    const body = ResponseCreateRequest.parse({
      model: "m",
      instructions: "Be brief.",
      input: [
        { role: "user", content: "Weather?" },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me see." }] },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Oslo"}' },
        { type: "function_call_output", call_id: "call_1", output: "sunny" },
        { role: "developer", content: [{ type: "input_text", text: "Answer now." }] },
      ],
    });
    expect(withInstructions(body.instructions, toChatMessages(inputItems(body.input)))).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "Let me see.",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: "tool", content: "sunny", tool_call_id: "call_1" },
      { role: "system", content: "Answer now." },
    ]);
  });

  it("maps text.format to chat's response_format", () => {
    const format = { type: "json_schema" as const, name: "pet", schema: { type: "object" }, strict: true };
    expect(toResponseFormat(format)).toEqual({
      type: "json_schema",
      json_schema: { name: "pet", schema: { type: "object" }, strict: true },
    });
    expect(toResponseFormat({ type: "text" })).toBeUndefined();
  });

  it("refuses, naming the field: built-in tools, unknown fields, images, a tool_choice naming no tool", () => {
    expect(refusal(ResponseCreateRequest, { model: "m", input: "x", tools: [{ type: "file_search" }] })).toEqual({
      param: "tools.0.type",
      message:
        "tools[0].type: file_search is one of OpenAI's built-in tools, which run on OpenAI's servers; this server runs function tools only (type: \"function\")",
    });
    expect(refusal(ResponseCreateRequest, { model: "m", input: "x", logprobs: true })?.param).toBe("logprobs");
    expect(refusal(ResponseCreateRequest, { model: "m", input: "x", store: true, user: "u" })).toBeUndefined();
    expect(
      refusal(ResponseCreateRequest, {
        model: "m",
        input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }],
      })?.message,
    ).toMatch(/\[0\]\.content.*images, files and audio are not supported/);
    expect(
      refusal(ResponseCreateRequest, { model: "m", input: "x", tool_choice: { type: "function", name: "f" } })?.message,
    ).toMatch(/^tool_choice: needs tools/);
    expect(refusal(ResponseCreateRequest, { model: "m", input: [] })?.message).toMatch(/^input: is an empty list/);
  });
});

describe("the Responses API answer", () => {
  const shell = () => responseShell(ResponseCreateRequest.parse({ model: "m", input: "x" }), "resp_1", 1, true);

  it("is a message, then the calls; a cut answer is incomplete", () => {
    const call = { id: "call_1", type: "function" as const, function: { name: "f", arguments: "{}" } };
    const items = outputItems({ text: "", finish_reason: "tool_calls", tool_calls: [call], usage }, newId);
    expect(items).toMatchObject([{ type: "function_call", call_id: "call_1", name: "f", status: "completed" }]);
    expect(outputItems({ text: "hi", finish_reason: "length", usage }, newId)).toMatchObject([
      { type: "message", status: "incomplete", content: [{ type: "output_text", text: "hi", annotations: [] }] },
    ]);
  });

  it("streams numbered events whose deltas join to the done text", () => {
    const events = new ResponseEvents(newId);
    const all = [...events.started(shell()), ...events.text("Once"), ...events.text(" upon")];
    const done = events.finish(shell(), {
      text: "ignored: the deltas are what was sent",
      finish_reason: "stop",
      usage,
    });
    all.push(...done.events);
    expect(all.map((e) => e.sequence_number)).toEqual(all.map((_, i) => i));
    expect(all.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(all.find((e) => e.type === "response.output_text.done")?.text).toBe("Once upon");
    expect(done.response.usage).toEqual({
      input_tokens: 5,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 3,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 8,
    });
  });

  it("lists input items in OpenAI's cursor pages", () => {
    const items = listedItems(
      inputItems([1, 2, 3].map((i) => ({ type: "message" as const, role: "user" as const, content: `m${i}` }))),
      newId,
    );
    const page = itemList(items, { order: "asc", limit: 2 });
    expect(page.data.map((i) => i.type === "message" && i.content)).toEqual([
      [{ type: "input_text", text: "m1" }],
      [{ type: "input_text", text: "m2" }],
    ]);
    expect(page.has_more).toBe(true);
    expect(itemList(items, { order: "asc", limit: 2, after: page.last_id ?? "" }).data).toHaveLength(1);
    expect(itemList(items, { order: "desc", limit: 1 }).first_id).toBe(items[2]?.id);
  });
});

describe("the Messages API", () => {
  it("becomes the chat conversation: system first, tool results before the turn's text", () => {
    const body = MessagesRequest.parse({
      model: "m",
      max_tokens: 5,
      system: [{ type: "text", text: "Be brief." }],
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "w", input: { city: "Oslo" } }] },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "sunny" }] },
            { type: "text", text: "And?" },
          ],
        },
      ],
    });
    expect(anthropicMessages(body)).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "toolu_1", type: "function", function: { name: "w", arguments: '{"city":"Oslo"}' } }],
      },
      { role: "tool", content: "sunny", tool_call_id: "toolu_1" },
      { role: "user", content: "And?" },
    ]);
    expect(toChatToolChoice({ type: "any", disable_parallel_tool_use: true })).toEqual({
      tool_choice: "required",
      parallel_tool_calls: false,
    });
  });

  it("answers tool_use with parsed input and the stop reason", () => {
    const call = { id: "toolu_1", type: "function" as const, function: { name: "w", arguments: '{"city":"Oslo"}' } };
    expect(
      messageResponse(
        { id: "msg_1", model: "m" },
        { text: "", finish_reason: "tool_calls", tool_calls: [call], usage },
      ),
    ).toMatchObject({
      content: [{ type: "tool_use", id: "toolu_1", name: "w", input: { city: "Oslo" } }],
      stop_reason: "tool_use",
      usage: { input_tokens: 5, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
  });

  it("refuses what Anthropic's API refuses, naming the field", () => {
    expect(refusal(MessagesRequest, { model: "m", messages: [{ role: "user", content: "x" }] })?.message).toMatch(
      /^max_tokens: is required/,
    );
    expect(
      refusal(MessagesRequest, { model: "m", max_tokens: 1, messages: [{ role: "user", content: "x" }], n: 2 })?.param,
    ).toBe("n");
    expect(
      refusal(MessagesRequest, {
        model: "m",
        max_tokens: 1,
        messages: [{ role: "user", content: "x" }],
        tools: [{ type: "bash_20250124", name: "bash" }],
      })?.message,
    ).toMatch(/bash_20250124 is one of Anthropic's server tools/);
  });

  it("puts errors in Anthropic's envelope: 503 overload as its 529", () => {
    const busy = new PlatformError(503, "no_capacity", "no replica", null, 30);
    expect(anthropicStatus(busy)).toBe(529);
    expect(anthropicError(busy)).toEqual({ type: "error", error: { type: "overloaded_error", message: "no replica" } });
    expect(anthropicError(new PlatformError(400, "invalid_request", "is bad", "max_tokens")).error).toEqual({
      type: "invalid_request_error",
      message: "max_tokens: is bad",
    });
    expect(anthropicError(new PlatformError(413, "request_too_large", "too big")).error.type).toBe("request_too_large");
  });
});

describe("/v1/responses batch lines", () => {
  const spec = { id: "batch_1", created: 1_700_000_000_000, version: "v1" } as BatchSpec;
  const openai: OpenAiSpec = {
    endpoint: "/v1/responses",
    served_model: "m",
    input_file_id: "file-1",
    completion_window: "24h",
    metadata: null,
  };
  const lines = openAiFormat(spec, openai, DEFAULT_SCHEMA_LIMITS);
  const parse = (body: object, url = "/v1/responses") => {
    const text = JSON.stringify({ custom_id: "c1", method: "POST", url, body });
    return lines.parse({ lineNumber: 1, start: 0, end: text.length + 1, text });
  };

  it("reads a line as the chat record it becomes, and writes a response object", () => {
    expect(parse({ model: "m", input: "hi", instructions: "Be brief.", max_output_tokens: 4 })).toEqual({
      ok: true,
      line: 1,
      id: "c1",
      work: {
        kind: "chat",
        messages: [
          { role: "system", content: "Be brief." },
          { role: "user", content: "hi" },
        ],
      },
      params: { max_tokens: 4 },
    });
    const written = JSON.parse(
      lines.render(
        { line: 1, id: "c1" },
        { ok: true, text: "hello", tokens: 6, prompt_tokens: 4, completion_tokens: 2 },
      ),
    );
    expect(written.response.status_code).toBe(200);
    expect(written.response.body).toMatchObject({
      object: "response",
      status: "completed",
      model: "m",
      output: [{ type: "message", content: [{ type: "output_text", text: "hello" }] }],
      usage: { input_tokens: 4, output_tokens: 2, total_tokens: 6 },
    });
    // The same line rendered again is the same bytes (a batch redone after a crash).
    expect(
      lines.render(
        { line: 1, id: "c1" },
        { ok: true, text: "hello", tokens: 6, prompt_tokens: 4, completion_tokens: 2 },
      ),
    ).toBe(JSON.stringify(written));
  });

  it("refuses what a line cannot do, naming the field under body.", () => {
    expect(parse({ model: "m", input: "hi", previous_response_id: "resp_0123456789abcdef" })).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^line 1: body\.previous_response_id: not available in a batch/),
    });
    expect(parse({ model: "m", input: "hi", tools: [{ type: "web_search" }] })).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^line 1: body\.tools\[0\]\.type: web_search is one of OpenAI's built-in tools/),
    });
    expect(parse({ model: "m", input: "hi" }, "/v1/chat/completions")).toMatchObject({ ok: false });
  });
});
