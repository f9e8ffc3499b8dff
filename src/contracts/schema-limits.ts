/**
 * Bounds on the JSON schemas one request may carry (`response_format` and every tool's
 * `parameters`, counted together), OpenAI's structured-output limits by default. A schema is
 * turned into a grammar on the replica, and what that costs grows with its size: every schema is
 * refused here, naming the limit, where it is passed and the setting that changes it, before the
 * request is queued (the gateway), when a batch line is read, and by the replica itself (a
 * producer may enqueue directly). The numbers come from the settings (src/settings/structured.ts);
 * docs/chat.md lists them.
 */
import { PlatformError } from "./errors.ts";
import type { FunctionTool, ResponseFormat } from "./job.ts";

/** An enum of more values than this is held to `largeEnumCharacters` (OpenAI's rule). */
export const LARGE_ENUM_VALUES = 250;

/** Each limit: its setting, OpenAI's number as the default, and what it counts, for the 400. */
export const SCHEMA_LIMITS = {
  depth: { setting: "PLATFORM_MAX_SCHEMA_DEPTH", fallback: 10, counts: "levels of nesting" },
  properties: { setting: "PLATFORM_MAX_SCHEMA_PROPERTIES", fallback: 5000, counts: "object properties" },
  enumValues: { setting: "PLATFORM_MAX_SCHEMA_ENUM_VALUES", fallback: 1000, counts: "enum values" },
  characters: {
    setting: "PLATFORM_MAX_SCHEMA_CHARS",
    fallback: 120_000,
    counts: "characters of property names, definition names, enum and const values",
  },
  largeEnumCharacters: {
    setting: "PLATFORM_MAX_SCHEMA_LARGE_ENUM_CHARS",
    fallback: 15_000,
    counts: `characters in one string enum of more than ${LARGE_ENUM_VALUES} values`,
  },
  tools: { setting: "PLATFORM_MAX_TOOLS", fallback: 128, counts: "tools" },
} as const;

export type SchemaLimits = { [K in keyof typeof SCHEMA_LIMITS]: number };

export const DEFAULT_SCHEMA_LIMITS = Object.fromEntries(
  Object.entries(SCHEMA_LIMITS).map(([name, limit]) => [name, limit.fallback]),
) as SchemaLimits;

/** Maps whose keys are names the client chose (counted as characters), each naming a schema. */
const NAMED_SCHEMAS = new Set(["properties", "$defs", "definitions", "patternProperties", "dependentSchemas"]);
/** Keywords through which one value nests inside another: each object or array on the way is a level. */
const NESTING = new Set(["properties", "patternProperties", "additionalProperties", "items", "prefixItems"]);
/** Annotations hold data, not schemas: nothing in them is counted. */
const ANNOTATIONS = new Set(["default", "examples", "description", "title", "$comment"]);

/** What a request holds schemas in: the same fields on a request body and on a queued job. */
export type SchemaCarrier = { response_format?: ResponseFormat | null; tools?: FunctionTool[] | null };

type Place = { param: string; pointer: string };
/** Where a schema is: its parent and its key there (the pointer is written only for a 400). */
type At = { param: string; parent?: At; key?: string };
type Visit = { at: At; schema: unknown; levels: number; counted: boolean };

/** Throws schemaLimitError's 400. */
export function checkSchemaLimits(request: SchemaCarrier, limits: SchemaLimits): void {
  const error = schemaLimitError(request, limits);
  if (error) throw error;
}

/**
 * The 400 `schema_too_large` for the first limit the request's schemas pass, if any. Totals run
 * over all of them together, response_format first, then the tools in order; the message gives
 * the total and where the limit was passed.
 */
export function schemaLimitError(request: SchemaCarrier, limits: SchemaLimits): PlatformError | undefined {
  const tools = request.tools ?? [];
  if (tools.length > limits.tools) return tooLarge("tools", tools.length, limits, { param: "tools", pointer: "" });
  const roots: Visit[] = [];
  const root = (param: string, schema: unknown) => roots.push({ at: { param }, schema, levels: 0, counted: false });
  const format = request.response_format;
  if (format?.type === "json_schema" && format.json_schema.schema)
    root("response_format.json_schema.schema", format.json_schema.schema);
  for (const [i, tool] of tools.entries())
    if (tool.function.parameters) root(`tools[${i}].function.parameters`, tool.function.parameters);
  const tally = new Tally(limits);
  // A stack, not recursion: a body's nesting is bounded only by its size. Taken back to front,
  // so schemas are walked (and totals passed) in the order they are written.
  const stack = roots.reverse();
  for (let visit = stack.pop(); visit; visit = stack.pop()) tally.visit(visit, stack);
  return tally.error();
}

class Tally {
  private readonly limits: SchemaLimits;
  private readonly totals = { depth: 0, properties: 0, enumValues: 0, characters: 0 };
  /** Where each total first passed its limit. */
  private readonly passed: Partial<Record<keyof Tally["totals"], At>> = {};
  /** The first string enum over `largeEnumCharacters`: a limit on one enum, not on a total. */
  private largeEnum: PlatformError | undefined;

  constructor(limits: SchemaLimits) {
    this.limits = limits;
  }

  visit(visit: Visit, stack: Visit[]): void {
    const { schema, at } = visit;
    if (Array.isArray(schema)) {
      // anyOf, oneOf, allOf, prefixItems: each element is a schema of the same value.
      for (let i = schema.length - 1; i >= 0; i--)
        stack.push({ ...visit, at: { param: at.param, parent: at, key: String(i) }, schema: schema[i] });
      return;
    }
    if (typeof schema !== "object" || schema === null) return;
    const object = schema as Record<string, unknown>;
    // A value's level counts once, however many of its combined schemas say it is an object or an array.
    let { levels, counted } = visit;
    if (!counted && isContainer(object)) {
      levels++;
      counted = true;
      this.add("depth", levels, at, true);
    }
    const children: Visit[] = [];
    for (const [key, value] of Object.entries(object)) {
      if (ANNOTATIONS.has(key)) continue;
      const here: At = { param: at.param, parent: at, key };
      // Through these the schema describes another value; a combinator's branches describe this one.
      const child = { levels, counted: !NESTING.has(key) && counted };
      if (key === "enum" && Array.isArray(value)) this.enumValues(value, here);
      else if (key === "const") this.add("characters", charactersOf(value), here);
      else if (NAMED_SCHEMAS.has(key) && typeof value === "object" && value !== null && !Array.isArray(value)) {
        const named = Object.entries(value);
        if (key === "properties") this.add("properties", named.length, here);
        for (const [name, sub] of named) {
          const place: At = { param: at.param, parent: here, key: name };
          this.add("characters", name.length, place);
          children.push({ ...child, at: place, schema: sub });
        }
      } else if (typeof value === "object" && value !== null) children.push({ ...child, at: here, schema: value });
    }
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i] as Visit);
  }

  private enumValues(values: unknown[], at: At): void {
    this.add("enumValues", values.length, at);
    let characters = 0;
    for (const v of values) characters += charactersOf(v);
    this.add("characters", characters, at);
    const large = values.length > LARGE_ENUM_VALUES && values.every((v) => typeof v === "string");
    if (large && characters > this.limits.largeEnumCharacters)
      this.largeEnum ??= tooLarge("largeEnumCharacters", characters, this.limits, placeOf(at));
  }

  /** `max`: the total is the largest value seen (depth), not a sum. */
  private add(name: keyof Tally["totals"], n: number, at: At, max = false): void {
    this.totals[name] = max ? Math.max(this.totals[name], n) : this.totals[name] + n;
    if (this.totals[name] > this.limits[name]) this.passed[name] ??= at;
  }

  error(): PlatformError | undefined {
    for (const name of ["depth", "properties", "enumValues", "characters"] as const) {
      const at = this.passed[name];
      if (at) return tooLarge(name, this.totals[name], this.limits, placeOf(at));
    }
    return this.largeEnum;
  }
}

/** The schema's param and its JSON pointer inside it. */
function placeOf(at: At): Place {
  const keys: string[] = [];
  for (let a: At | undefined = at; a?.key !== undefined; a = a.parent) keys.push(a.key);
  return {
    param: at.param,
    pointer: keys
      .reverse()
      .map((k) => `/${k.replaceAll("~", "~0").replaceAll("/", "~1")}`)
      .join(""),
  };
}

/** A schema whose value holds others: an object or an array. */
function isContainer(schema: Record<string, unknown>): boolean {
  const type = schema.type;
  const types = Array.isArray(type) ? type : [type];
  return (
    types.includes("object") ||
    types.includes("array") ||
    "properties" in schema ||
    "items" in schema ||
    "prefixItems" in schema
  );
}

/** A string's own length; any other value's as JSON (a number, a literal object). */
function charactersOf(value: unknown): number {
  return typeof value === "string" ? value.length : (JSON.stringify(value)?.length ?? 0);
}

function tooLarge(name: keyof SchemaLimits, n: number, limits: SchemaLimits, place: Place): PlatformError {
  const limit = SCHEMA_LIMITS[name];
  const where = place.pointer === "" ? "" : `, passed at ${place.pointer}`;
  return new PlatformError(
    400,
    "schema_too_large",
    `${place.param}: ${n} ${limit.counts}; at most ${limits[name]} (${limit.setting})${where}`,
    place.param,
  );
}
