/**
 * JSON schemas as llama.cpp grammars (node-llama-cpp's GBNF JSON-schema support), so every answer
 * parses and validates. A schema is first checked against what the grammar can enforce: a keyword
 * it cannot hold the model to (a numeric range, a regex pattern) is refused with a 400 naming it
 * and where it is, rather than ignored, since the answer might then not validate. Annotations are
 * dropped, `anyOf` is enforced as `oneOf` (any value of one branch satisfies it), the integer
 * bounds zod writes for `.int()` (±2^53) are no bound at all in practice, and an integer range of
 * at most MAX_ENUMERATED_RANGE values becomes the enum of its values, which a grammar can hold.
 */
import type { Llama, LlamaGrammar } from "node-llama-cpp";
import { LlamaGrammar as Grammar } from "node-llama-cpp";
import type { JsonSchema } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/errors.ts";

const ENFORCED = new Set([
  "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
  "enum", "const", "oneOf", "anyOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "format", "minProperties", "maxProperties",
]);
const ANNOTATIONS = new Set(["$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "strict"]);
const SAFE_BOUND = Number.MAX_SAFE_INTEGER;
const MAX_ENUMERATED_RANGE = 1000;

/** Grammars are compiled once per schema and kept, a few dozen at most. */
const CACHE_SIZE = 64;

export class GrammarCache {
  readonly llama: Llama;
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(llama: Llama) {
    this.llama = llama;
  }

  /** Any JSON value of the object kind (`response_format: json_object`). */
  json(): Promise<LlamaGrammar> {
    return this.cached("json", () => Grammar.getFor(this.llama, "json"));
  }

  /** `param` names the schema's place in the request, for the 400. */
  schema(schema: JsonSchema, param: string): Promise<LlamaGrammar> {
    const prepared = enforceable(schema, param, "");
    return this.cached(JSON.stringify(prepared), async () => {
      const made = await jsonSchemaGrammarText(this.llama, prepared, param);
      return new Grammar(this.llama, { grammar: made.grammar, stopGenerationTriggers: made.stopGenerationTriggers, trimWhitespaceSuffix: made.trimWhitespaceSuffix });
    });
  }

  /** Any grammar, made once per key. */
  cached(key: string, make: () => Promise<LlamaGrammar>): Promise<LlamaGrammar> {
    let grammar = this.grammars.get(key);
    if (!grammar) {
      grammar = make();
      grammar.catch(() => this.grammars.delete(key));
      if (this.grammars.size >= CACHE_SIZE) this.grammars.delete(this.grammars.keys().next().value as string);
      this.grammars.set(key, grammar);
    }
    return grammar;
  }
}

/**
 * node-llama-cpp's GBNF for a (checked) schema, with numbers every JSON client reads exactly: its
 * number rules allow 16 digits and an exponent of 16 more, so 1e999 (Infinity, printed back as
 * null) and integers beyond 2^53 (which zod's `.int()` refuses) were possible. Integers get at
 * most 15 digits and no exponent; other numbers an exponent of at most 2 digits. `boundedNumbers`
 * is checked against the library's output by the tests, so a change in how it writes numbers is
 * noticed.
 */
export async function jsonSchemaGrammarText(llama: Llama, schema: unknown, param: string): Promise<{ grammar: string; stopGenerationTriggers: LlamaGrammar["stopGenerationTriggers"]; trimWhitespaceSuffix: boolean }> {
  try {
    const made = await llama.createGrammarForJsonSchema(schema as never);
    return { grammar: boundedNumbers(made.grammar), stopGenerationTriggers: made.stopGenerationTriggers, trimWhitespaceSuffix: made.trimWhitespaceSuffix };
  } catch (e) {
    throw new PlatformError(400, "invalid_request", `${param}: this JSON schema cannot be enforced (${(e as Error).message})`, param);
  }
}

export function boundedNumbers(grammar: string): string {
  return grammar
    .replace(/^integer-number-rule ::= .*$/m, 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14})')
    .replaceAll('[eE] [-+]? ("0" | [1-9] [0-9]{0,15})', '[eE] [-+]? ("0" | [1-9] [0-9]?)');
}

/** The schema with annotations dropped and `anyOf` as `oneOf`; throws on what a grammar cannot hold. */
export function enforceable(schema: unknown, param: string, path: string): unknown {
  if (Array.isArray(schema)) return schema.map((s, i) => enforceable(s, param, `${path}/${i}`));
  if (typeof schema !== "object" || schema === null) return schema;
  const range = integerRange(schema as Record<string, unknown>);
  if (range) return { enum: Array.from({ length: range.max - range.min + 1 }, (_, i) => range.min + i) };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    const at = `${path}/${key}`;
    if (ANNOTATIONS.has(key)) continue;
    if ((key === "minimum" && typeof value === "number" && value <= -SAFE_BOUND) || (key === "maximum" && typeof value === "number" && value >= SAFE_BOUND)) continue;
    if (!ENFORCED.has(key)) {
      throw new PlatformError(
        400,
        "invalid_request",
        `${param}: the keyword "${key}" at ${at} cannot be enforced by constrained decoding on the llama.cpp engine; remove it (enforced: ${[...ENFORCED].join(", ")})`,
        param,
      );
    }
    if (key === "enum" || key === "const") out[key] = value;
    else if (key === "properties" || key === "$defs" || key === "definitions") {
      // Names here are the user's, not keywords: only their schemas are walked.
      const entries = Object.entries((value ?? {}) as Record<string, unknown>).map(([name, s]) => [name, enforceable(s, param, `${at}/${name}`)]);
      out[key === "definitions" ? "$defs" : key] = Object.fromEntries(entries);
    } else if (key === "$ref" && typeof value === "string") out.$ref = value.replace("#/definitions/", "#/$defs/");
    else out[key === "anyOf" ? "oneOf" : key] = enforceable(value, param, at);
  }
  return out;
}

/** `{type: "integer", minimum, maximum}` (or the exclusive forms) spanning few enough values to list. */
function integerRange(schema: Record<string, unknown>): { min: number; max: number } | undefined {
  const { type, minimum, maximum, exclusiveMinimum, exclusiveMaximum, ...rest } = schema;
  if (type !== "integer" || Object.keys(rest).some((k) => !ANNOTATIONS.has(k))) return undefined;
  const low = typeof minimum === "number" ? Math.ceil(minimum) : typeof exclusiveMinimum === "number" ? Math.floor(exclusiveMinimum) + 1 : undefined;
  const high = typeof maximum === "number" ? Math.floor(maximum) : typeof exclusiveMaximum === "number" ? Math.ceil(exclusiveMaximum) - 1 : undefined;
  if (low === undefined || high === undefined || high < low || high - low >= MAX_ENUMERATED_RANGE) return undefined;
  return { min: low, max: high };
}
