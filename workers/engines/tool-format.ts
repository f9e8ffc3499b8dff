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
import { PlatformError } from "../../src/errors.ts";
import type { ChatTools, TextOutput } from "./engine.ts";

/**
 * Calls per answer with `parallel_tool_calls: true`; one otherwise. As llama-server's generic
 * format, one call is the default: small models given room for more tend to repeat a call until
 * max_tokens cuts the answer, leaving no call at all.
 */
export const MAX_PARALLEL_CALLS = 4;

/** The schema the answer must satisfy: calls only, or (`auto`) calls or a text response. */
export function toolAnswerSchema(request: ChatTools): JsonSchema {
  const choice = request.tool_choice ?? "auto";
  const tools = typeof choice === "object" ? request.tools.filter((t) => t.function.name === choice.function.name) : request.tools;
  const calls = tools.map((t) => ({
    type: "object",
    properties: { name: { const: t.function.name }, arguments: t.function.parameters ?? { type: "object" } },
    required: ["name", "arguments"],
    additionalProperties: false,
  }));
  const callList = {
    type: "object",
    properties: {
      tool_calls: { type: "array", items: calls.length === 1 ? calls[0] : { oneOf: calls }, minItems: 1, maxItems: request.parallel_tool_calls === true ? MAX_PARALLEL_CALLS : 1 },
    },
    required: ["tool_calls"],
    additionalProperties: false,
  };
  if (choice !== "auto") return callList;
  const text = { type: "object", properties: { response: { type: "string" } }, required: ["response"], additionalProperties: false };
  return { oneOf: [callList, text] };
}

/** The history as plain system/user/assistant turns in the generic format, the tools described first. */
export function toolPromptMessages(messages: ChatMessage[], request: ChatTools | undefined): ChatMessage[] {
  const rendered = messages.map(renderTurn);
  if (!request) return rendered;
  const described = request.tools.map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters ?? { type: "object" } }));
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
 * The model's answer read back: its tool calls (with fresh ids, arguments as JSON text) or its
 * text. `undefined` when the answer is not complete JSON (cut short by max_tokens).
 */
export function parseToolAnswer(text: string): { tool_calls: ToolCall[] } | { content: string } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const answer = value as { tool_calls?: { name: string; arguments: unknown }[]; response?: string };
  if (Array.isArray(answer.tool_calls)) {
    const raw = rawArguments(text);
    return { tool_calls: answer.tool_calls.map((call, i) => toolCall(call.name, raw[i] ?? JSON.stringify(call.arguments ?? {}))) };
  }
  return typeof answer.response === "string" ? { content: answer.response } : undefined;
}

export function toolCall(name: string, args: string): ToolCall {
  return { id: `call_${randomBytes(12).toString("hex")}`, type: "function", function: { name, arguments: args } };
}

/**
 * Each call's arguments exactly as the model wrote them. Parsed and printed again, a number beyond
 * a double's range would come back as `null`, which the schema does not allow.
 */
function rawArguments(text: string): string[] {
  const found: string[] = [];
  const key = /"arguments"\s*:\s*/g;
  for (let match = key.exec(text); match; match = key.exec(text)) {
    const start = match.index + match[0].length;
    const end = jsonValueEnd(text, start);
    found.push(text.slice(start, end));
    key.lastIndex = end;
  }
  return found;
}

/** Where the JSON value starting at `start` ends (the text is known to be valid JSON). */
function jsonValueEnd(text: string, start: number): number {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      if (depth === 0) return i + 1;
    } else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
      if (depth < 0) return i;
    } else if (depth === 0 && (c === "," || c === " " || c === "\n" || c === "\t" || c === "\r")) return i;
  }
  return text.length;
}

/** A generation in the generic format as the client sees it: its tool calls, or its text response. */
export function readToolAnswer(out: TextOutput): TextOutput {
  if (out.finish_reason !== "stop") return out;
  const answer = parseToolAnswer(out.text);
  if (!answer) return out;
  return "tool_calls" in answer ? { ...out, text: "", tool_calls: answer.tool_calls, finish_reason: "tool_calls" } : { ...out, text: answer.content };
}

/** The generic format is itself constrained JSON: a second format cannot be laid over it. */
export function refuseFormatWithTools(params: { response_format?: unknown }): void {
  if (params.response_format) {
    throw new PlatformError(400, "invalid_request", "response_format cannot be combined with tools for a model without a tool-calling chat template: the tool format is itself constrained JSON", "response_format");
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
