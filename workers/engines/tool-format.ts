/**
 * The generic tool-calling format, for models whose chat template has none (as llama-server's
 * "generic" format): the tools are described in a system message, and the model is held by a
 * JSON-schema grammar to answer either `{"tool_calls": [{"name", "arguments"}]}` or, when it may
 * choose (`tool_choice: "auto"`), `{"response": "<text>"}`. Earlier calls and tool results in the
 * history are written back in the same form, so the model sees one consistent convention.
 * docs/chat.md documents it; it is engine-independent and pure, so it is unit-tested on its own.
 */
import { randomBytes } from "node:crypto";
import type { ChatMessage, JsonSchema, ToolCall } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import type { ChatTools, TextOutput } from "./engine.ts";
import { readJsonPrefix } from "./json-prefix.ts";

/**
 * Calls per answer with `parallel_tool_calls: true`; one otherwise. As llama-server's generic
 * format, one call is the default: small models given room for more tend to repeat a call until
 * max_tokens cuts the answer, leaving no call at all.
 */
export const MAX_PARALLEL_CALLS = 4;

/** The schema the answer must satisfy: calls only, or (`auto`) calls or a text response. */
export function toolAnswerSchema(request: ChatTools): JsonSchema {
  const choice = request.tool_choice ?? "auto";
  const tools =
    typeof choice === "object" ? request.tools.filter((t) => t.function.name === choice.function.name) : request.tools;
  const calls = tools.map((t) => ({
    type: "object",
    properties: { name: { const: t.function.name }, arguments: t.function.parameters ?? { type: "object" } },
    required: ["name", "arguments"],
    additionalProperties: false,
  }));
  const callList = {
    type: "object",
    properties: {
      tool_calls: {
        type: "array",
        items: calls.length === 1 ? calls[0] : { oneOf: calls },
        minItems: 1,
        maxItems: request.parallel_tool_calls === true ? MAX_PARALLEL_CALLS : 1,
      },
    },
    required: ["tool_calls"],
    additionalProperties: false,
  };
  if (choice !== "auto") return callList;
  const text = {
    type: "object",
    properties: { response: { type: "string" } },
    required: ["response"],
    additionalProperties: false,
  };
  return { oneOf: [callList, text] };
}

/** The history as plain system/user/assistant turns in the generic format, the tools described first. */
export function toolPromptMessages(messages: ChatMessage[], request: ChatTools | undefined): ChatMessage[] {
  const rendered = messages.map(renderTurn);
  if (!request) return rendered;
  const described = request.tools.map((t) => ({
    name: t.function.name,
    description: t.function.description,
    parameters: t.function.parameters ?? { type: "object" },
  }));
  const choice = request.tool_choice ?? "auto";
  const how =
    choice === "auto"
      ? 'To call tools, answer {"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}; to answer directly, answer {"response": <your answer>}.'
      : 'Answer {"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}.';
  const system = `You can call these tools:\n${JSON.stringify(described)}\n${how} Answer only with that JSON object.`;
  const [first, ...rest] = rendered;
  // One system turn: templates that allow only one, at the start, still render it.
  if (first?.role === "system") return [{ role: "system", content: `${first.content}\n\n${system}` }, ...rest];
  return [{ role: "system", content: system }, ...rendered];
}

function renderTurn(m: ChatMessage): ChatMessage {
  if (m.role === "tool") return { role: "user", content: `Result of tool call ${m.tool_call_id ?? ""}: ${m.content}` };
  if (m.role === "assistant" && m.tool_calls?.length) {
    const calls = m.tool_calls.map((c) => ({ name: c.function.name, arguments: parseOr(c.function.arguments) }));
    return { role: "assistant", content: JSON.stringify({ tool_calls: calls }) };
  }
  return { role: m.role, content: m.content };
}

/**
 * A generation in the generic format as the client sees it: its tool calls (fresh ids, each call's
 * arguments exactly as the model wrote them) or its text response. Parsed and printed again, a
 * number beyond a double's range would come back as `null`, which the schema does not allow.
 *
 * An answer cut short (max_tokens, a stop string) is read as far as it goes, never passed on as
 * the format's raw text: a call once its name is known — written whole, or the only allowed name
 * it can still become (a named tool_choice at once) — with its arguments as far as generated, or
 * the response's text so far. The finish reason stays the generation's.
 */
export function readToolAnswer(out: TextOutput, request: ChatTools): TextOutput {
  const root = readJsonPrefix(out.text);
  const first = root?.type === "object" ? root.entries[0] : undefined;
  const choice = request.tool_choice ?? "auto";
  // Under auto the first key says which answer it is once its first letter is written ("t" or "r").
  if (choice === "auto" && !(first?.key && "tool_calls".startsWith(first.key)))
    return { ...out, text: first?.value?.type === "string" ? first.value.value : "" };
  const names = typeof choice === "object" ? [choice.function.name] : request.tools.map((t) => t.function.name);
  const items = first?.value?.type === "array" ? first.value.items : [];
  const calls: ToolCall[] = [];
  // The first call is certain before anything of it is written: the grammar demands one.
  for (const item of items.length > 0 ? items : [undefined]) {
    const fields = item?.type === "object" ? item.entries : [];
    const name = fields.find((f) => f.key === "name")?.value;
    const written = name?.type === "string" ? name.value : "";
    const known = name?.complete ? [written] : names.filter((n) => n.startsWith(written));
    if (known.length !== 1) break;
    const args = fields.find((f) => f.key === "arguments")?.value;
    calls.push(toolCall(known[0] as string, args ? out.text.slice(args.start, args.end) : ""));
  }
  const whole = out.finish_reason === "stop" && root?.complete === true;
  return {
    ...out,
    text: "",
    ...(calls.length > 0 && { tool_calls: calls }),
    finish_reason: whole ? "tool_calls" : out.finish_reason,
  };
}

export function toolCall(name: string, args: string): ToolCall {
  return { id: `call_${randomBytes(12).toString("hex")}`, type: "function", function: { name, arguments: args } };
}

/** The generic format is itself constrained JSON: a second format cannot be laid over it. */
export function refuseFormatWithTools(params: { response_format?: unknown }): void {
  if (params.response_format) {
    throw new PlatformError(
      400,
      "invalid_request",
      "response_format cannot be combined with tools for a model without a tool-calling chat template: the tool format is itself constrained JSON",
      "response_format",
    );
  }
}

/** A call's arguments as a value (they are JSON text), or as the text itself when they do not parse. */
export function parseOr(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
