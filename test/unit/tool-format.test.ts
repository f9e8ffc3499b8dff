/**
 * The generic tool format and the JSON-schema checks behind constrained decoding, on their own:
 * the schema the answer is held to per tool_choice, the history as the model reads it, the answer
 * read back (whole, or as far as it goes when cut short), and which schema keywords are enforced,
 * rewritten or refused.
 */
import { describe, expect, it } from "vitest";
import type { FunctionTool } from "../../src/contracts/job.ts";
import type { PlatformError } from "../../src/contracts/errors.ts";
import type { ChatTools } from "../../workers/engines/engine.ts";
import { enforceable } from "../../workers/engines/llamacpp-grammar.ts";
import {
  MAX_PARALLEL_CALLS,
  readToolAnswer,
  toolAnswerSchema,
  toolPromptMessages,
} from "../../workers/engines/tool-format.ts";

const weather: FunctionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const time: FunctionTool = { type: "function", function: { name: "get_time" } };

describe("the answer's schema", () => {
  it("required: calls only, one per answer unless parallel calls are asked for", () => {
    const schema = toolAnswerSchema({ tools: [weather, time], tool_choice: "required" }) as {
      properties: { tool_calls: { items: { oneOf: unknown[] }; maxItems: number } };
    };
    expect(schema.properties.tool_calls.maxItems).toBe(1);
    expect(schema.properties.tool_calls.items.oneOf).toEqual([
      {
        type: "object",
        properties: { name: { const: "get_weather" }, arguments: weather.function.parameters },
        required: ["name", "arguments"],
        additionalProperties: false,
      },
      {
        type: "object",
        properties: { name: { const: "get_time" }, arguments: { type: "object" } },
        required: ["name", "arguments"],
        additionalProperties: false,
      },
    ]);
    const parallel = toolAnswerSchema({ tools: [weather], tool_choice: "required", parallel_tool_calls: true }) as {
      properties: { tool_calls: { maxItems: number } };
    };
    expect(parallel.properties.tool_calls.maxItems).toBe(MAX_PARALLEL_CALLS);
  });

  it("a named function: only that one; auto (the default): calls or a text response", () => {
    const named = toolAnswerSchema({
      tools: [weather, time],
      tool_choice: { type: "function", function: { name: "get_time" } },
    }) as { properties: { tool_calls: { items: { properties: { name: unknown } } } } };
    expect(named.properties.tool_calls.items.properties.name).toEqual({ const: "get_time" });
    const auto = toolAnswerSchema({ tools: [weather] }) as { oneOf: { properties: Record<string, unknown> }[] };
    expect(auto.oneOf.map((s) => Object.keys(s.properties))).toEqual([["tool_calls"], ["response"]]);
  });
});

describe("the history in the generic format", () => {
  it("describes the tools in the one system turn and writes calls and results back as the model answers them", () => {
    const messages = toolPromptMessages(
      [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: "tool", content: "sunny", tool_call_id: "call_1" },
      ],
      { tools: [weather], tool_choice: "auto" },
    );
    expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
    expect(messages[0]?.content).toMatch(
      /^Be brief\.\n\nYou can call these tools:\n\[\{"name":"get_weather","description":"Weather"/,
    );
    expect(messages[0]?.content).toMatch(/\{"response": <your answer>\}/);
    expect(messages[2]?.content).toBe('{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]}');
    expect(messages[3]?.content).toBe("Result of tool call call_1: sunny");
  });

  it("without tools the turns are only rendered (a tool_choice none request still has its history)", () => {
    expect(toolPromptMessages([{ role: "tool", content: "42", tool_call_id: "c" }], undefined)).toEqual([
      { role: "user", content: "Result of tool call c: 42" },
    ]);
  });
});

describe("the answer read back", () => {
  const out = (text: string, finish_reason: "stop" | "length" = "stop") => ({
    text,
    finish_reason,
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });

  const auto: ChatTools = { tools: [weather] };

  it("calls become OpenAI tool_calls with fresh ids and JSON-text arguments; a response becomes content", () => {
    const calls = readToolAnswer(out('{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]}'), auto);
    expect(calls).toMatchObject({
      text: "",
      finish_reason: "tool_calls",
      tool_calls: [{ type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
    });
    expect(calls.tool_calls?.[0]?.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(readToolAnswer(out('{"response":"It is sunny."}'), auto)).toMatchObject({
      text: "It is sunny.",
      finish_reason: "stop",
    });
  });

  it("keeps each call's arguments as written: a number beyond a double's range does not become null", () => {
    const text =
      '{"tool_calls": [{"name": "a", "arguments": {"n": -1e999, "s": "x\\"}, \\"arguments\\": 1"}}, {"name": "arguments", "arguments": [1, {"k": []}]}]}';
    const calls = readToolAnswer(out(text), auto).tool_calls ?? [];
    expect(calls.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ["a", '{"n": -1e999, "s": "x\\"}, \\"arguments\\": 1"}'],
      ["arguments", '[1, {"k": []}]'],
    ]);
  });

  const named: ChatTools = {
    tools: [weather, time],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  };
  const required: ChatTools = { tools: [weather, time], tool_choice: "required", parallel_tool_calls: true };
  const cut = (text: string, request: ChatTools) => {
    const read = readToolAnswer(out(text, "length"), request);
    return { ...read, tool_calls: read.tool_calls?.map((c) => [c.function.name, c.function.arguments]) };
  };

  it("a call cut short: its name once known, its arguments as far as written, no content, finish_reason length", () => {
    const head = '{ "tool_calls": [ { "name": "get_weather", ';
    expect(cut('{ "tool_calls": [ { "name": "get_w', named)).toMatchObject({
      text: "",
      finish_reason: "length",
      tool_calls: [["get_weather", ""]],
    });
    expect(cut(head, named).tool_calls).toEqual([["get_weather", ""]]);
    expect(cut(`${head}"arguments": `, named).tool_calls).toEqual([["get_weather", ""]]);
    expect(cut(`${head}"arguments": { "city": "Pa\\u00`, named).tool_calls).toEqual([
      ["get_weather", '{ "city": "Pa\\u00'],
    ]);
    // Whole arguments, the format's closing cut: the arguments and nothing after them.
    expect(cut(`${head}"arguments": { "city": "Paris" } }`, named).tool_calls).toEqual([
      ["get_weather", '{ "city": "Paris" }'],
    ]);
    // A named tool_choice is known before it is written; among several tools, once one name is left.
    expect(cut("{", named).tool_calls).toEqual([["get_weather", ""]]);
    expect(cut('{"tool_calls": [{"name": "get_', required)).toEqual({ ...out("", "length"), tool_calls: undefined });
    expect(cut('{"tool_calls": [{"name": "get_t', required).tool_calls).toEqual([["get_time", ""]]);
  });

  it("parallel calls: the whole ones, then the one cut short", () => {
    const text =
      '{"tool_calls": [{"name": "get_time", "arguments": {"zone": "utc"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"ci';
    expect(cut(text, required).tool_calls).toEqual([
      ["get_time", '{"zone": "utc"}'],
      ["get_weather", '{"city": "Oslo"}'],
      ["get_weather", '{"ci'],
    ]);
    // A further call whose name is not known yet is left out.
    expect(cut('{"tool_calls": [{"name": "get_time", "arguments": {}}, {"na', required).tool_calls).toEqual([
      ["get_time", "{}"],
    ]);
  });

  it("auto: a response cut short is its text so far; a call once the answer says it is one", () => {
    expect(cut('{"response": "It is \\"sun', auto)).toEqual({ ...out('It is "sun', "length"), tool_calls: undefined });
    // An escape cut short is left out, as is half a surrogate pair.
    expect(cut('{"response": "caf\\u00', auto).text).toBe("caf");
    expect(cut('{"response": "a\\ud83d', auto).text).toBe("a");
    expect(cut('{"response": "a\\ud83d\\ude00', auto).text).toBe("a😀");
    expect(cut('{"resp', auto).text).toBe("");
    expect(cut("{", auto)).toEqual({ ...out("", "length"), tool_calls: undefined });
    expect(cut('{"t', auto).tool_calls).toEqual([["get_weather", ""]]);
    expect(cut('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}]', auto).tool_calls).toEqual([
      ["get_weather", '{"city": "Rome"}'],
    ]);
  });

  it("a whole answer that reached max_tokens keeps finish_reason length; a stop string's cut keeps stop", () => {
    const whole = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}]}';
    expect(cut(whole, named)).toMatchObject({
      finish_reason: "length",
      tool_calls: [["get_weather", '{"city": "Rome"}']],
    });
    expect(readToolAnswer(out('{"tool_calls": [{"name": "get_weather", "arg'), named)).toMatchObject({
      text: "",
      finish_reason: "stop",
      tool_calls: [{ function: { name: "get_weather", arguments: "" } }],
    });
  });
});

describe("what a grammar can enforce", () => {
  const refusal = (schema: unknown) => {
    try {
      enforceable(schema, "response_format.json_schema.schema", "");
    } catch (e) {
      return e as PlatformError;
    }
    throw new Error("not refused");
  };

  it("drops annotations, enforces anyOf as oneOf, renames definitions, keeps property names that look like keywords", () => {
    const schema = {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      title: "T",
      type: "object",
      properties: { pattern: { anyOf: [{ type: "string" }, { $ref: "#/definitions/n" }], description: "d" } },
      definitions: { n: { type: "null" } },
    };
    expect(enforceable(schema, "p", "")).toEqual({
      type: "object",
      properties: { pattern: { oneOf: [{ type: "string" }, { $ref: "#/$defs/n" }] } },
      $defs: { n: { type: "null" } },
    });
  });

  it("zod's .int() bounds are dropped; a small integer range becomes its values", () => {
    expect(
      enforceable({ type: "integer", minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER }, "p", ""),
    ).toEqual({ type: "integer" });
    expect(enforceable({ type: "integer", minimum: 1, maximum: 4 }, "p", "")).toEqual({ enum: [1, 2, 3, 4] });
    expect(enforceable({ type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 3 }, "p", "")).toEqual({
      enum: [1, 2],
    });
  });

  it("refuses what it cannot hold the model to, naming the keyword, where it is and the field", () => {
    const pattern = refusal({ type: "object", properties: { code: { type: "string", pattern: "^A" } } });
    expect(pattern.status).toBe(400);
    expect(pattern.param).toBe("response_format.json_schema.schema");
    expect(pattern.message).toMatch(/the keyword "pattern" at \/properties\/code\/pattern cannot be enforced/);
    expect(refusal({ type: "number", minimum: 0 }).message).toMatch(/"minimum" at \/minimum/);
    expect(refusal({ type: "integer", minimum: 0, maximum: 1_000_000 }).message).toMatch(/"minimum"/);
  });
});
