/**
 * Every request body's schema errors say what was expected, in the field's own name (issue 20.2):
 * each field of each route's body (chat, completions, embeddings, generate, batches, files, the
 * admin API, OpenAI batch lines) is fed values it does not take, and no message may be zod's
 * default text ("Invalid input", "Invalid option" ...). The fields are found by walking each
 * schema beside a valid example body, so a field added later is checked without a new case.
 */
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { AutoscalingConfig } from "../../src/autoscaling/config.ts";
import { RequestLine } from "../../src/batch/openai-lines.ts";
import { CreateBatchRequest } from "../../src/batch/record.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { describeIssues } from "../../src/contracts/issues.ts";
import { ChatCompletionRequest } from "../../src/contracts/openai/chat.ts";
import { CompletionRequest, GenerateRequest } from "../../src/contracts/openai/completions.ts";
import { EmbeddingRequest } from "../../src/contracts/openai/embeddings.ts";
import { RegisterBody } from "../../src/gateway/routes/admin.ts";
import { AbTestBody } from "../../src/gateway/routes/admin-abtests.ts";
import { CreateBody, UpdateBody } from "../../src/gateway/routes/admin-keys.ts";
import { CreateBatch } from "../../src/gateway/routes/openai-batches.ts";

/** Zod's own wording, which names neither the forms a field takes nor anything to act on. */
const ZOD_DEFAULTS =
  /Invalid (input|option|union|discriminator|string|key|element|number|value)|Too (small|big):|Unrecognized key/;

type Path = (string | number)[];
type Schema = z.core.$ZodType;
const defOf = (s: Schema) => s._zod.def as z.core.$ZodTypeDef & Record<string, any>;

/** Values of every kind: each field is fed the first few it refuses. */
const WRONG: unknown[] = [true, "not-one-of-its-forms", 12345, 1.5, -1, { not: "this" }, [], ["not", "this"], null];

const WRAPPERS = new Set(["optional", "nullable", "default", "prefault", "catch", "readonly", "nonoptional"]);

/** The schema under its wrappers (optional, default, a transform's input ...). */
function unwrap(s: Schema): Schema {
  const def = defOf(s);
  if (WRAPPERS.has(def.type)) return unwrap(def.innerType);
  if (def.type === "pipe") return unwrap(def.in);
  return s;
}

/** Whether the schema words its own errors (a message given where it is defined). */
function ownMessage(s: Schema): boolean {
  const def = defOf(s);
  if (def.error || def.checks?.some((c: z.core.$ZodCheck) => c._zod.def.error)) return true;
  if (WRAPPERS.has(def.type)) return ownMessage(def.innerType);
  return def.type === "pipe" && ownMessage(def.in);
}

/**
 * A field, and where its errors may be reported: at its own path, or at an enclosing union's,
 * which names the union's forms when a value fits none of them.
 */
type Field = { path: Path; schema: Schema; reportedAt: Path[] };

/** Every field of `schema` that `example` reaches, with the schema at it. */
function fields(schema: Schema, example: unknown, path: Path = [], unions: Path[] = []): Field[] {
  const def = defOf(unwrap(schema));
  const here = path.length > 0 ? [{ path, schema, reportedAt: [path, ...unions] }] : [];
  const inside = (s: Schema, value: unknown, at: Path) => fields(s, value, at, unions);
  if (def.type === "object" && example && typeof example === "object")
    return [
      ...here,
      ...Object.entries(def.shape as Record<string, Schema>).flatMap(([key, field]) =>
        inside(field, (example as Record<string, unknown>)[key], [...path, key]),
      ),
    ];
  if (def.type === "array" && Array.isArray(example) && example.length > 0)
    return [...here, ...inside(def.element, example[0], [...path, 0])];
  if (def.type === "record" && example && typeof example === "object") {
    const [key, value] = Object.entries(example)[0] ?? [];
    return key === undefined ? here : [...here, ...inside(def.valueType, value, [...path, key])];
  }
  if (def.type === "union") {
    // Into the form the example takes: a message's fields, a tool choice's function ...
    const taken = (def.options as Schema[]).find((o) => (o as z.ZodType).safeParse(example).success);
    // A discriminated union reports inside the form its tag picks; a plain one may report at itself.
    const reportedAt = def.discriminator === undefined ? [path, ...unions] : unions;
    return taken ? [...here, ...fields(taken, example, path, reportedAt).slice(1)] : here;
  }
  return here;
}

function withValue(example: unknown, path: Path, value: unknown): unknown {
  const copy = structuredClone(example) as Record<string | number, unknown>;
  let at = copy;
  for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
  at[path.at(-1) as string | number] = value;
  return copy;
}

const pathText = (path: Path) =>
  path.reduce<string>((t, k) => (typeof k === "number" ? `${t}[${k}]` : t ? `${t}.${k}` : k), "");

/** Each route's body, valid, with every optional field that has a form of its own. */
const BODIES: { name: string; schema: z.ZodType; example: unknown }[] = [
  {
    name: "POST /v1/chat/completions",
    schema: ChatCompletionRequest,
    example: {
      model: "m",
      messages: [
        { role: "system", content: "Be brief.", name: "sys" },
        { role: "user", content: [{ type: "text", text: "Weather?" }] },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{}" } }],
        },
        { role: "tool", content: "Sunny", tool_call_id: "call_1" },
      ],
      tools: [{ type: "function", function: { name: "weather", description: "d", parameters: {}, strict: true } }],
      tool_choice: { type: "function", function: { name: "weather" } },
      parallel_tool_calls: true,
      max_completion_tokens: 5,
      logprobs: true,
      top_logprobs: 2,
      stop: ["\n"],
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.5,
      top_p: 0.9,
      top_k: 5,
      min_p: 0.1,
      seed: 1,
      frequency_penalty: 0.1,
      presence_penalty: 0.1,
      logit_bias: { "5": 1 },
      response_format: { type: "json_schema", json_schema: { name: "x", schema: {}, strict: true } },
    },
  },
  {
    name: "POST /v1/completions",
    schema: CompletionRequest,
    example: {
      model: "m",
      prompt: [[1, 2]],
      echo: false,
      suffix: "",
      best_of: 1,
      logprobs: 2,
      stop: "\n",
      max_tokens: 5,
      response_format: { type: "json_object" },
    },
  },
  {
    name: "POST /v1/inference/:model/generate",
    schema: GenerateRequest,
    example: { prompt: "x", n: 1, logprobs: true, top_logprobs: 1, max_tokens: 3 },
  },
  {
    name: "POST /v1/embeddings",
    schema: EmbeddingRequest,
    example: { model: "m", input: ["a"], encoding_format: "float", dimensions: null },
  },
  {
    name: "POST /v1/batch-jobs",
    schema: CreateBatchRequest,
    example: { model: "m", version: "v1", input: "in.jsonl", output: "out/", overwrite: true, concurrency: 2 },
  },
  {
    name: "POST /v1/batches",
    schema: CreateBatch,
    example: { input_file_id: "file-1", endpoint: "/v1/completions", completion_window: "24h", metadata: { a: "b" } },
  },
  {
    name: "an OpenAI batch line",
    schema: RequestLine,
    example: { custom_id: "a", method: "POST", url: "/v1/completions" },
  },
  {
    name: "POST /admin/v1/models",
    schema: RegisterBody,
    example: { name: "m", framework: "vllm", source: "/models/m.gguf", version: "v1", task: "embed" },
  },
  {
    name: "PUT /admin/v1/endpoints/:name",
    schema: DeploymentConfig,
    example: {
      endpoint: "e",
      model: { name: "m", version: "v1", framework: "vllm" },
      runtime: { gpu_memory_utilization: 0.5, dtype: "float16", quantization: "int8", max_model_len: 128 },
      resources: { replicas: 1, gpu: 1, memory: "4Gi", cpu: 2, parallel: 2, max_queue_wait: "5s" },
      autoscaling: { enabled: true },
    },
  },
  {
    name: "PUT /admin/v1/endpoints/:name/autoscaling",
    schema: AutoscalingConfig,
    example: { endpoint: "e", autoscaling: { enabled: true, min_replicas: 1, scale_up_cooldown: "30s" } },
  },
  {
    name: "PUT /admin/v1/endpoints/:name/abtest",
    schema: AbTestBody,
    example: { split: [{ version: "v1", weight: 50 }], sticky: "key" },
  },
  {
    name: "POST /admin/v1/keys",
    schema: CreateBody,
    example: { name: "k", role: "user", limits: { rpm: 5, models: { m: { tpm: 10 } } } },
  },
  {
    name: "PATCH /admin/v1/keys/:id",
    schema: UpdateBody,
    example: { limits: { rpm: null, models: { m: { tpm: 10 } } } },
  },
];

describe("schema errors name the field and what it expects, never zod's default text", () => {
  for (const { name, schema, example } of BODIES) {
    it(name, () => {
      expect(schema.safeParse(example).success, `the example of ${name} is not valid`).toBe(true);
      const found = fields(schema, example);
      expect(found.length).toBeGreaterThan(0);
      let checked = 0;
      for (const field of found) {
        const where = pathText(field.path);
        // Values the field refuses, where the body refuses them too: one may be another form of an
        // enclosing union (a string at prompt[0]), and a field of anything (a JSON schema) refuses none.
        const refused = WRONG.filter((value) => !(field.schema as z.ZodType).safeParse(value).success)
          .map((value) => ({ value, parsed: schema.safeParse(withValue(example, field.path, value)) }))
          .filter(({ parsed }) => !parsed.success)
          .slice(0, 3);
        for (const { value, parsed } of refused) {
          const message = describeIssues((parsed as { error: z.ZodError }).error);
          const context = `${name}: ${where} = ${JSON.stringify(value)} → ${message}`;
          expect(message, context).not.toMatch(ZOD_DEFAULTS);
          const line = message
            .split("; ")
            .find((l) => field.reportedAt.some((at) => l.startsWith(`${pathText(at)}:`) || l.startsWith(`${where}`)));
          expect(line, context).toBeDefined();
          if (!ownMessage(field.schema)) expect(line, context).toMatch(/expected/);
          checked++;
        }
      }
      expect(checked).toBeGreaterThan(0);
    });
  }
});

describe("the messages themselves", () => {
  const issues = (schema: z.ZodType, body: unknown) => {
    const parsed = schema.safeParse(body);
    return parsed.success ? "" : describeIssues(parsed.error);
  };
  const chat = (more: object) => ({ model: "m", messages: [{ role: "user", content: "hi" }], ...more });

  it("list a union's forms and an enum's values", () => {
    expect(issues(ChatCompletionRequest, chat({ tool_choice: 5 }))).toBe(
      'tool_choice: expected "none", "auto", "required" or an object',
    );
    expect(issues(ChatCompletionRequest, chat({ stop: 5 }))).toBe("stop: expected a string or an array");
    expect(issues(ChatCompletionRequest, { model: "m", messages: [{ role: "wizard", content: "hi" }] })).toBe(
      'messages[0].role: expected one of "system", "developer", "user", "assistant", "tool"',
    );
    expect(issues(ChatCompletionRequest, chat({ response_format: { type: "xml" } }))).toBe(
      'response_format.type: expected one of "text", "json_object", "json_schema"',
    );
    expect(issues(EmbeddingRequest, { model: "m", input: "a", encoding_format: "hex" })).toBe(
      'encoding_format: expected one of "float", "base64"',
    );
  });

  it("say what is missing, what type was sent, and bounds with their unit", () => {
    expect(issues(ChatCompletionRequest, { messages: [{ role: "user", content: "hi" }] })).toBe(
      "model: missing; expected a string",
    );
    expect(issues(ChatCompletionRequest, chat({ temperature: "hot" }))).toBe(
      "temperature: expected a number, got a string",
    );
    expect(issues(ChatCompletionRequest, chat({ max_tokens: 0, temperature: 3, seed: 1.5 }))).toBe(
      "max_tokens: expected more than 0; temperature: expected 2 or less; seed: expected an integer",
    );
    expect(issues(ChatCompletionRequest, { model: "", messages: [{ role: "user", content: "hi" }] })).toBe(
      "model: expected at least 1 character",
    );
  });

  it("name each of /v1/completions' prompt forms", () => {
    const prompt = (p: unknown, more: object = {}) => issues(CompletionRequest, { model: "m", prompt: p, ...more });
    const forms = "expected a string, an array of strings, an array of token ids or an array of such arrays";
    for (const bad of [5, null, { a: 1 }, [1, "a"], [[1], ["a"]], [null]]) expect(prompt(bad)).toBe(`prompt: ${forms}`);
    expect(prompt(undefined)).toBe(`prompt: ${forms}`);
    expect(prompt([])).toBe("prompt: is an empty array; send at least one prompt");
    expect(prompt([[1], []])).toBe("prompt[1]: is an empty token list; a prompt needs at least one token");
    expect(prompt([1, -5])).toBe("prompt[1]: expected a token id (an integer from 0 to 2147483647)");
    expect(prompt([[1], [2 ** 31]])).toBe("prompt[1][0]: expected a token id (an integer from 0 to 2147483647)");
    expect(prompt(Array(65).fill("a"))).toBe(
      "prompt: 65 prompts; at most 64 choices (prompts × n) per request: send the prompts in several requests",
    );
    expect(prompt(Array(5).fill([1]), { n: 16 })).toMatch(/^prompt: 5 prompts with n = 16 ask for 80 choices; /);
    for (const good of ["", "a", ["a", "b"], [0, 2 ** 31 - 1], [[1], [2, 3]]]) expect(prompt(good)).toBe("");
  });
});
