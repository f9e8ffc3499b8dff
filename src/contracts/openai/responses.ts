/**
 * OpenAI's Responses API (POST /v1/responses), the request side: the body as OpenAI's reference
 * and SDKs (openai's `ResponseCreateParams`) write it, and what it becomes on the queue, the same
 * chat job /v1/chat/completions makes (job.ts), so the workers serve it unchanged. What comes
 * back (the response object, its items and stream events) is responses-output.ts.
 *
 * As the chat route: a field that changes what is generated is honoured or refused with a 400
 * naming it (`param`); informational ones are kept on the response (`metadata`, `user`) or
 * ignored. docs/http-api.md ("Responses API") lists them.
 */
import { z } from "zod";
import {
  type ChatMessage,
  type FunctionTool,
  JsonSchema,
  MAX_TOOLS,
  TOO_MANY_TOOLS,
  type ResponseFormat,
  type SamplingParams,
  type ToolCall,
  type ToolChoice,
} from "../job.ts";
import { bounds, generatedTokens, openAiBody, orNull } from "./common.ts";

const DOC = "docs/http-api.md, Responses API";

/** Items of one request's `input` (and of a stored conversation): bounded like every input. */
export const MAX_INPUT_ITEMS = 2048;

/** OpenAI's own tools, which run on OpenAI's servers: named in the refusal. */
const BUILT_IN_TOOLS = new Set([
  "web_search",
  "web_search_preview",
  "web_search_2025_08_26",
  "web_search_preview_2025_03_11",
  "file_search",
  "computer",
  "computer_use_preview",
  "code_interpreter",
  "image_generation",
  "mcp",
  "local_shell",
  "shell",
  "apply_patch",
  "custom",
  "tool_search",
]);

const toolTypeMessage = (type: unknown) =>
  typeof type === "string" && BUILT_IN_TOOLS.has(type)
    ? `${type} is one of OpenAI's built-in tools, which run on OpenAI's servers; this server runs function tools only (type: "function")`
    : `expected "function": this server runs function tools only (OpenAI's built-in tools run on OpenAI's servers)`;

const functionName = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,64}$/, "a function name is 1 to 64 letters, digits, '_' or '-'");

/** A Responses function tool is flat: `{type, name, parameters}` where chat nests them under `function`. */
const ResponsesTool = z.discriminatedUnion(
  "type",
  [
    z.object({
      type: z.literal("function"),
      name: functionName,
      description: z.string().max(4096).nullish(),
      parameters: JsonSchema.nullish(),
      strict: z.boolean().nullish(),
    }),
  ],
  { error: (issue) => toolTypeMessage((issue.input as { type?: unknown } | undefined)?.type) },
);

const ResponsesToolChoice = z.union(
  [z.enum(["none", "auto", "required"]), z.object({ type: z.literal("function"), name: z.string().min(1).max(64) })],
  { error: () => 'expected "none", "auto", "required" or {"type": "function", "name": <one of the tools>}' },
);

/** `text.format`: the same constrained decoding as chat's `response_format`. */
const ResponseTextFormat = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      name: z.string().min(1).max(64),
      description: z.string().max(4096).nullish(),
      schema: JsonSchema,
      strict: z.boolean().nullish(),
    }),
  ],
  { error: () => 'expected a format of type "text", "json_object" or "json_schema"' },
);
export type ResponseTextFormat = z.infer<typeof ResponseTextFormat>;

const IMAGES_OR_FILES = "images, files and audio are not supported by this server's text models; send input_text parts";

const inputText = z.object({ type: z.literal("input_text"), text: z.string() });
/** An earlier answer sent back as input carries OpenAI's output parts. */
const outputText = z.looseObject({ type: z.literal("output_text"), text: z.string() });
const refusal = z.looseObject({ type: z.literal("refusal"), refusal: z.string() });
const contentPart = z.discriminatedUnion("type", [inputText, outputText, refusal], {
  error: (issue) =>
    ["input_image", "input_file", "input_audio"].includes(String((issue.input as { type?: unknown })?.type))
      ? IMAGES_OR_FILES
      : 'expected a content part of type "input_text" (or "output_text" in an assistant message)',
});

const itemStatus = z.enum(["in_progress", "completed", "incomplete"]).nullish();
const MessageItem = z.object({
  type: z.literal("message"),
  id: z.string().max(128).nullish(),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart).max(MAX_INPUT_ITEMS)]),
  status: itemStatus,
});
const FunctionCallItem = z.object({
  type: z.literal("function_call"),
  id: z.string().max(128).nullish(),
  call_id: z.string().min(1).max(128),
  name: z.string().min(1).max(64),
  arguments: z.string().max(1_000_000),
  status: itemStatus,
});
const FunctionCallOutputItem = z.object({
  type: z.literal("function_call_output"),
  id: z.string().max(128).nullish(),
  call_id: z.string().min(1).max(128),
  output: z.union([z.string(), z.array(inputText).max(MAX_INPUT_ITEMS)]),
  status: itemStatus,
});

/** An item without `type` but with `role` is a message (OpenAI's EasyInputMessage). */
const InputItem = z.preprocess(
  (item) =>
    item && typeof item === "object" && !("type" in item) && "role" in item ? { ...item, type: "message" } : item,
  z.discriminatedUnion("type", [MessageItem, FunctionCallItem, FunctionCallOutputItem], {
    error: (issue) => {
      const type = (issue.input as { type?: unknown } | undefined)?.type;
      return `${typeof type === "string" ? `items of type ${JSON.stringify(type)} are not supported; ` : ""}an input item is a message ({role, content}), a function_call or a function_call_output`;
    },
  }),
);
export type InputItem = z.infer<typeof InputItem>;

/** OpenAI's metadata bounds: 16 pairs, keys of 64 characters, values of 512. */
const Metadata = z
  .record(z.string().max(64, "metadata keys are at most 64 characters"), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, "metadata holds at most 16 pairs");

/** Accepted and ignored: what only changes OpenAI's own serving or reporting. */
const IGNORED = {
  stream_options: z.object({ include_obfuscation: z.boolean().nullish() }).nullish(),
  truncation: z
    .literal("disabled", { error: () => 'only "disabled" is supported (the prompt is never cut)' })
    .nullish(),
  /** Only what the answer already holds may be included. */
  include: z.array(z.string()).max(0, "is not supported; send [] or leave it out").nullish(),
  reasoning: z
    .object({ effort: z.null().optional(), summary: z.null().optional(), generate_summary: z.null().optional() })
    .nullish(),
};

export const ResponseCreateRequest = openAiBody(
  {
    model: z.string().min(1),
    input: z.union([z.string(), z.array(InputItem).max(MAX_INPUT_ITEMS)]),
    instructions: z.string().nullish(),
    max_output_tokens: generatedTokens.nullish(),
    ...orNull({ temperature: bounds.temperature, top_p: bounds.top_p, seed: bounds.seed }),
    tools: z.array(ResponsesTool).max(MAX_TOOLS, TOO_MANY_TOOLS).nullish(),
    tool_choice: ResponsesToolChoice.nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    text: z
      .object({ format: ResponseTextFormat.nullish(), verbosity: z.enum(["low", "medium", "high"]).nullish() })
      .nullish(),
    stream: z.boolean().nullish(),
    store: z.boolean().nullish(),
    previous_response_id: z.string().min(1).max(128).nullish(),
    background: z.literal(false, { error: () => "background responses are not supported; send false" }).nullish(),
    metadata: Metadata.nullish(),
    user: z.string().max(256).nullish(),
    ...IGNORED,
  },
  DOC,
).superRefine((body, ctx) => {
  const choice = body.tool_choice;
  if (choice && choice !== "none" && choice !== "auto" && !body.tools?.length)
    ctx.addIssue({ code: "custom", path: ["tool_choice"], message: "needs tools" });
  if (typeof choice === "object" && choice !== null && !body.tools?.some((t) => t.name === choice.name))
    ctx.addIssue({
      code: "custom",
      path: ["tool_choice"],
      message: `names function "${choice.name}", which is not among the tools`,
    });
  if (Array.isArray(body.input) && body.input.length === 0 && !body.previous_response_id)
    ctx.addIssue({ code: "custom", path: ["input"], message: "is an empty list; send at least one item" });
});
export type ResponseCreateRequest = z.infer<typeof ResponseCreateRequest>;

// What the request becomes on the queue.

/** The items of `input`: a string is one user message. */
export function inputItems(input: ResponseCreateRequest["input"]): InputItem[] {
  return typeof input === "string" ? [{ type: "message", role: "user", content: input }] : input;
}

const textOf = (content: string | { text?: string; refusal?: string }[]) =>
  typeof content === "string" ? content : content.map((p) => p.text ?? p.refusal ?? "").join("");

/**
 * The conversation as chat messages: a function_call joins the assistant turn before it (or
 * starts one), as chat templates expect the calls of one answer together.
 */
export function toChatMessages(items: InputItem[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  for (const item of items) {
    if (item.type === "message") {
      messages.push({ role: item.role === "developer" ? "system" : item.role, content: textOf(item.content) });
    } else if (item.type === "function_call") {
      const call: ToolCall = {
        id: item.call_id,
        type: "function",
        function: { name: item.name, arguments: item.arguments },
      };
      const last = messages.at(-1);
      if (last?.role === "assistant") last.tool_calls = [...(last.tool_calls ?? []), call];
      else messages.push({ role: "assistant", content: "", tool_calls: [call] });
    } else {
      messages.push({ role: "tool", content: textOf(item.output), tool_call_id: item.call_id });
    }
  }
  return messages;
}

/** `instructions` are this request's alone: never carried over by previous_response_id (OpenAI's rule). */
export function withInstructions(instructions: string | null | undefined, messages: ChatMessage[]): ChatMessage[] {
  return instructions ? [{ role: "system", content: instructions }, ...messages] : messages;
}

export function toChatTools(tools: ResponseCreateRequest["tools"]): FunctionTool[] | undefined {
  if (!tools?.length) return undefined;
  return tools.map((t) => ({
    type: "function",
    function: {
      name: t.name,
      ...(t.description ? { description: t.description } : {}),
      ...(t.parameters ? { parameters: t.parameters } : {}),
      ...(t.strict != null ? { strict: t.strict } : {}),
    },
  }));
}

export function toChatToolChoice(choice: ResponseCreateRequest["tool_choice"]): ToolChoice | undefined {
  if (!choice) return undefined;
  return typeof choice === "string" ? choice : { type: "function", function: { name: choice.name } };
}

export function toResponseFormat(format: ResponseTextFormat | null | undefined): ResponseFormat | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return format;
  return {
    type: "json_schema",
    json_schema: {
      name: format.name,
      schema: format.schema,
      ...(format.description ? { description: format.description } : {}),
      ...(format.strict != null ? { strict: format.strict } : {}),
    },
  };
}

/** The chat job's sampling parameters; absent fields stay absent (a batch record stores only what was set). */
export function toParams(body: ResponseCreateRequest): SamplingParams {
  const params: SamplingParams = {
    max_tokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    seed: body.seed ?? undefined,
    response_format: toResponseFormat(body.text?.format),
  };
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) as SamplingParams;
}

/** Chat's names for the request's schemas, in schema-limit errors (param and message), as the Responses body names them. */
export function responsesParam<T extends string | null>(text: T): T {
  return (text ?? null) === null
    ? text
    : ((text as string)
        .replaceAll("response_format.json_schema.schema", "text.format.schema")
        .replace(/tools\[(\d+)\]\.function\.parameters/g, "tools[$1].parameters") as T);
}
