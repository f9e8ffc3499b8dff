/**
 * The bounds on a request's JSON schemas (src/contracts/schema-limits.ts, issue 21): each limit
 * refused with its message (the count, the limit, the setting, where it is passed), totals over
 * response_format and every tool together, a schema at the limits accepted, and a batch line held
 * to the same limits when it is read.
 */
import { describe, expect, it } from "vitest";
import type { FunctionTool } from "../../src/contracts/job.ts";
import {
  DEFAULT_SCHEMA_LIMITS,
  type SchemaCarrier,
  type SchemaLimits,
  schemaLimitError,
} from "../../src/contracts/schema-limits.ts";
import { openAiFormat } from "../../src/batch/openai-lines.ts";
import type { BatchSpec, OpenAiSpec } from "../../src/batch/store.ts";

const limits = DEFAULT_SCHEMA_LIMITS;
const format = (schema: object): SchemaCarrier => ({
  response_format: { type: "json_schema", json_schema: { name: "answer", schema: schema as Record<string, unknown> } },
});
const tool = (name: string, parameters: object): FunctionTool => ({
  type: "function",
  function: { name, parameters: parameters as Record<string, unknown> },
});
const values = (n: number, length = 8) => Array.from({ length: n }, (_, i) => `v${i}-`.padEnd(length, "x"));
/** `levels` objects, each inside the one before. */
const nested = (levels: number) => {
  let schema: object = { type: "string" };
  for (let i = levels; i > 0; i--) schema = { type: "object", properties: { [`l${i}`]: schema } };
  return schema;
};
const refusal = (request: SchemaCarrier, with_: SchemaLimits = limits) => {
  const error = schemaLimitError(request, with_);
  return error && { status: error.status, code: error.code, param: error.param, message: error.message };
};

describe("schema limits", () => {
  it("refuses each limit with the count, the limit, the setting and where it is passed", () => {
    expect(refusal(format({ type: "object", properties: { pick: { enum: values(20_000) } } }))).toEqual({
      status: 400,
      code: "schema_too_large",
      param: "response_format.json_schema.schema",
      message:
        "response_format.json_schema.schema: 20000 enum values; at most 1000 (PLATFORM_MAX_SCHEMA_ENUM_VALUES), passed at /properties/pick/enum",
    });
    expect(refusal(format(nested(60)))?.message).toMatch(
      /^response_format\.json_schema\.schema: 60 levels of nesting; at most 10 \(PLATFORM_MAX_SCHEMA_DEPTH\), passed at \/properties\/l1\/properties\/l2\/.*\/properties\/l10$/,
    );
    const wide = Object.fromEntries(values(5001).map((name) => [name, { type: "integer" }]));
    expect(refusal(format({ type: "object", properties: wide }))?.message).toBe(
      "response_format.json_schema.schema: 5001 object properties; at most 5000 (PLATFORM_MAX_SCHEMA_PROPERTIES), passed at /properties",
    );
    const longNames = Object.fromEntries(values(1000, 121).map((name) => [name, { type: "string" }]));
    expect(refusal(format({ type: "object", properties: longNames }))?.message).toMatch(
      /^response_format\.json_schema\.schema: 121000 characters of property names, definition names, enum and const values; at most 120000 \(PLATFORM_MAX_SCHEMA_CHARS\), passed at \/properties\/v991-x+$/,
    );
    expect(refusal(format({ enum: values(251, 60) }))?.message).toBe(
      "response_format.json_schema.schema: 15060 characters in one string enum of more than 250 values; at most 15000 (PLATFORM_MAX_SCHEMA_LARGE_ENUM_CHARS), passed at /enum",
    );
    const tools = Array.from({ length: 9 }, (_, i) => tool(`t${i}`, { type: "object" }));
    expect(refusal({ tools }, { ...limits, tools: 8 })).toMatchObject({
      param: "tools",
      message: "tools: 9 tools; at most 8 (PLATFORM_MAX_TOOLS)",
    });
  });

  it("accepts a schema at every limit", () => {
    // 10 levels; 5,000 properties; 1,000 enum values (one string enum of 15,000 characters); names and values within 120,000 characters.
    let schema: object = { type: "string", enum: values(1000, 15) };
    for (let level = 10; level > 0; level--) {
      const leaves = values(level === 1 ? 491 : 499, 19).map((name) => [`${level}${name}`, { type: "integer" }]);
      schema = { type: "object", properties: Object.fromEntries([[`n${level}`, schema], ...leaves]) };
    }
    expect(refusal(format(schema))).toBeUndefined();
    expect(
      refusal({ tools: Array.from({ length: 128 }, (_, i) => tool(`t${i}`, { type: "object" })) }),
    ).toBeUndefined();
    // 250 values is not "more than 250": only the total bounds their characters.
    expect(refusal(format({ enum: values(250, 100) }))).toBeUndefined();
  });

  it("counts response_format and every tool's parameters together, naming the schema where the total is passed", () => {
    const enumOf = (n: number) => ({ type: "object", properties: { a: { enum: values(n) } } });
    const request = { ...format(enumOf(400)), tools: [tool("one", enumOf(400)), tool("two", enumOf(400))] };
    expect(refusal(request)).toMatchObject({
      param: "tools[1].function.parameters",
      message:
        "tools[1].function.parameters: 1200 enum values; at most 1000 (PLATFORM_MAX_SCHEMA_ENUM_VALUES), passed at /properties/a/enum",
    });
  });

  it("counts a value's level once, whatever combines its schemas; annotations hold no schema", () => {
    // Each level an array of (an object or null): the anyOf adds no level of its own.
    let schema: object = { type: "string" };
    for (let i = 0; i < 5; i++)
      schema = {
        type: "array",
        items: { anyOf: [{ type: "object", properties: { x: schema } }, { type: "null" }] },
      };
    expect(refusal(format(schema))).toBeUndefined();
    expect(refusal(format(schema), { ...limits, depth: 9 })?.message).toMatch(/10 levels of nesting; at most 9/);
    const examples = Object.fromEntries(values(6000).map((name) => [name, 1]));
    expect(
      refusal(format({ type: "object", default: { properties: examples }, examples: [examples] })),
    ).toBeUndefined();
  });

  it("writes where as a JSON pointer (~ and / escaped); definitions count their names", () => {
    const schema = { type: "object", properties: { "a/b~c": { enum: values(1001) } } };
    expect(refusal(format(schema))?.message).toMatch(/passed at \/properties\/a~1b~0c\/enum$/);
    const defs = { $defs: Object.fromEntries(values(10, 12_001).map((name) => [name, { type: "string" }])) };
    expect(refusal(format(defs))?.message).toMatch(/^[^:]+: 120010 characters .* passed at \/\$defs\/v9-x+$/);
  });

  it("refuses a batch line over a limit as an error line when it is read, naming the limit under body.", () => {
    const spec = { id: "batch_1", created: Date.now(), version: "v1" } as BatchSpec;
    const openai: OpenAiSpec = {
      endpoint: "/v1/chat/completions",
      served_model: "m",
      input_file_id: "file-1",
      completion_window: "24h",
      metadata: null,
    };
    const lines = openAiFormat(spec, openai, { ...limits, enumValues: 3 });
    const line = (body: object) => {
      const text = JSON.stringify({ custom_id: "c1", method: "POST", url: "/v1/chat/completions", body });
      return lines.parse({ lineNumber: 1, start: 0, end: text.length + 1, text });
    };
    const body = { model: "m", messages: [{ role: "user", content: "hi" }] };
    expect(line({ ...body, ...format({ enum: values(4) }) })).toEqual({
      ok: false,
      line: 1,
      id: "c1",
      code: "schema_too_large",
      message:
        "line 1: body.response_format.json_schema.schema: 4 enum values; at most 3 (PLATFORM_MAX_SCHEMA_ENUM_VALUES), passed at /enum",
    });
    expect(line({ ...body, ...format({ enum: values(3) }) })).toMatchObject({ ok: true, id: "c1" });
  });
});
