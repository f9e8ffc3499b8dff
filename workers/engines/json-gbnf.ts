/**
 * A JSON schema as GBNF text, every step in plain JavaScript, so all of it runs on the grammar
 * pool's threads (grammar-pool.ts), never on the replica's. The schema is first checked against
 * what the grammar can enforce: a keyword it cannot hold the model to (a numeric range, a regex
 * pattern) is refused with a 400 naming it and where it is, rather than ignored, since the answer
 * might then not validate. Annotations are dropped, `anyOf` is enforced as `oneOf` (any value of
 * one branch satisfies it), the integer bounds zod writes for `.int()` (±2^53) are no bound at all
 * in practice, and an integer range of at most MAX_ENUMERATED_RANGE values becomes the enum of its
 * values, which a grammar can hold. The text is node-llama-cpp's JSON-schema grammar generator's
 * (its `llama`-free part, which the library does not export on its own), with numbers every JSON
 * client reads exactly and choices among literals written as trees (`factorLiterals`).
 */
import type { GbnfJsonSchema } from "node-llama-cpp";
import { PlatformError } from "../../src/contracts/errors.ts";

type Generate = (schema: GbnfJsonSchema) => string;

/** The generator, loaded on first use: the file LlamaJsonSchemaGrammar calls, beside the package's entry point. */
let generator: Promise<Generate> | undefined;
function loadGenerator(): Promise<Generate> {
  generator ??= import(
    new URL("utils/gbnfJson/getGbnfGrammarForGbnfJsonSchema.js", import.meta.resolve("node-llama-cpp")).href
  ).then((module: { getGbnfGrammarForGbnfJsonSchema: Generate }) => module.getGbnfGrammarForGbnfJsonSchema);
  return generator;
}

/** Loads the generator ahead of the first schema (a thread's start-up is not a schema's cost). */
export async function prepareJsonGbnf(): Promise<void> {
  await loadGenerator();
}

/**
 * The GBNF of a schema written as JSON; `param` names it in the request. Throws the 400 for a
 * keyword it cannot enforce or a schema the generator refuses.
 */
export async function jsonSchemaGbnf(json: string, param: string): Promise<string> {
  const schema = enforceable(JSON.parse(json), param, "");
  let grammar: string;
  try {
    grammar = (await loadGenerator())(schema as GbnfJsonSchema);
  } catch (e) {
    throw new PlatformError(
      400,
      "invalid_request",
      `${param}: this JSON schema cannot be enforced (${(e as Error).message})`,
      param,
    );
  }
  return factorLiterals(boundedNumbers(grammar));
}

const ENFORCED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "enum",
  "const",
  "oneOf",
  "anyOf",
  "$ref",
  "$defs",
  "definitions",
  "minLength",
  "maxLength",
  "format",
  "minProperties",
  "maxProperties",
]);
const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$comment",
  "title",
  "description",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "strict",
]);
const SAFE_BOUND = Number.MAX_SAFE_INTEGER;
const MAX_ENUMERATED_RANGE = 1000;

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
    if (
      (key === "minimum" && typeof value === "number" && value <= -SAFE_BOUND) ||
      (key === "maximum" && typeof value === "number" && value >= SAFE_BOUND)
    )
      continue;
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
      const entries = Object.entries((value ?? {}) as Record<string, unknown>).map(([name, s]) => [
        name,
        enforceable(s, param, `${at}/${name}`),
      ]);
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
  const low =
    typeof minimum === "number"
      ? Math.ceil(minimum)
      : typeof exclusiveMinimum === "number"
        ? Math.floor(exclusiveMinimum) + 1
        : undefined;
  const high =
    typeof maximum === "number"
      ? Math.floor(maximum)
      : typeof exclusiveMaximum === "number"
        ? Math.ceil(exclusiveMaximum) - 1
        : undefined;
  if (low === undefined || high === undefined || high < low || high - low >= MAX_ENUMERATED_RANGE) return undefined;
  return { min: low, max: high };
}

/**
 * node-llama-cpp's number rules allow 16 digits and an exponent of 16 more, so 1e999 (Infinity,
 * printed back as null) and integers beyond 2^53 (which zod's `.int()` refuses) were possible.
 * Integers get at most 15 digits and no exponent; other numbers an exponent of at most 2 digits.
 * The tests check this against the library's output, so a change in how it writes numbers is noticed.
 */
export function boundedNumbers(grammar: string): string {
  return grammar
    .replace(/^integer-number-rule ::= .*$/m, 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14})')
    .replaceAll('[eE] [-+]? ("0" | [1-9] [0-9]{0,15})', '[eE] [-+]? ("0" | [1-9] [0-9]?)');
}

/**
 * Each choice among literals (an `enum`, a `oneOf` of `const`s) as a tree of their common
 * prefixes. The generator writes `( "\"alpha\"" | "\"alpine\"" | ... )`: llama.cpp then follows
 * one parse stack per alternative still matching, and checks every candidate token against each,
 * so sampling cost grew faster than the number of values (a 20,000-value enum: ~300 ms a token),
 * and the batch of every other sequence on the replica waited for it. As a tree, the stacks alive
 * at any point are the branches there (a few dozen at most); the language is the same.
 */
export function factorLiterals(grammar: string): string {
  const rules = grammar.split("\n").map((line) => {
    const at = line.indexOf(" ::= ");
    return at < 0 ? { name: "", body: line } : { name: line.slice(0, at), body: line.slice(at + 5) };
  });
  // Rules that are one literal (`val0 ::= "\"alpha\""`, `null-rule ::= "null"`), by name.
  const literals = new Map<string, string>();
  for (const rule of rules) {
    const tokens = tokenize(rule.body);
    if (rule.name && tokens.length === 1 && tokens[0]?.startsWith('"')) literals.set(rule.name, tokens[0]);
  }
  for (const rule of rules) {
    const choices = literalChoices(tokenize(rule.body), literals);
    if (choices) rule.body = prefixTree(choices);
  }
  // Literal rules no choice names any more are left out (fewer rules for llama.cpp to parse).
  const used = new Set(rules.flatMap((rule) => tokenize(rule.body).filter((t) => /^[a-zA-Z0-9-]+$/.test(t))));
  return rules
    .filter((rule) => !literals.has(rule.name) || used.has(rule.name))
    .map((rule) => (rule.name ? `${rule.name} ::= ${rule.body}` : rule.body))
    .join("\n");
}

/** A rule body's tokens: literals and character classes whole (escapes inside them too), names, punctuation. */
const TOKEN = /"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[a-zA-Z0-9-]+|\S/g;

function tokenize(body: string): string[] {
  return body.match(TOKEN) ?? [];
}

/** `( a | b | ... )` whose alternatives are all literals (or rules that are one), as the literals; else undefined. */
function literalChoices(tokens: string[], literals: Map<string, string>): string[] | undefined {
  if (tokens.length < 5 || tokens[0] !== "(" || tokens[tokens.length - 1] !== ")") return undefined;
  const choices: string[] = [];
  for (let i = 1; i < tokens.length - 1; i += 2) {
    const token = tokens[i] as string;
    const literal = token.startsWith('"') ? token : literals.get(token);
    if (literal === undefined || (tokens[i + 1] !== "|" && i + 1 !== tokens.length - 1)) return undefined;
    choices.push(literal);
  }
  return choices.length > 1 ? choices : undefined;
}

type Node = { next: Map<string, Node>; end: boolean };

/** The literals as nested choices on their common prefixes; each literal's characters (escapes whole) are the steps. */
function prefixTree(literals: string[]): string {
  const root: Node = { next: new Map(), end: false };
  for (const literal of literals) {
    let node = root;
    for (const unit of units(literal.slice(1, -1))) {
      let child = node.next.get(unit);
      if (!child) {
        child = { next: new Map(), end: false };
        node.next.set(unit, child);
      }
      node = child;
    }
    node.end = true;
  }
  return choicesOf(root);
}

/** A node's continuations: each branch's run of single steps as one literal, then what follows it. */
function choicesOf(node: Node): string {
  const branches: string[] = [];
  for (const [unit, child] of node.next) {
    let run = unit;
    let at = child;
    while (!at.end && at.next.size === 1) {
      const [next, below] = at.next.entries().next().value as [string, Node];
      run += next;
      at = below;
    }
    branches.push(at.next.size === 0 ? `"${run}"` : `"${run}" ${choicesOf(at)}`);
  }
  if (branches.length === 0) return '""';
  const choice = branches.length === 1 ? (branches[0] as string) : `( ${branches.join(" | ")} )`;
  // Where a literal ends and longer ones go on, what follows is optional.
  return node.end ? `( ${choice} )?` : choice;
}

/** A literal's characters, an escape sequence (`\\"`, `\\x41`, `\\u00e9`) counting as one. */
function units(text: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; ) {
    if (text[i] !== "\\") {
      const char = String.fromCodePoint(text.codePointAt(i) as number);
      out.push(char);
      i += char.length;
      continue;
    }
    const kind = text[i + 1];
    const length = kind === "x" ? 4 : kind === "u" ? 6 : kind === "U" ? 10 : 2;
    out.push(text.slice(i, i + length));
    i += length;
  }
  return out;
}
