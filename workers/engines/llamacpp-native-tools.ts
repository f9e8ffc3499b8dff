/**
 * Tool calling in the model's own format, on llama.cpp, for chat templates that have one
 * (Qwen/Hermes `<tool_call>`, Llama 3.1, Mistral, …): node-llama-cpp reads the call syntax out of
 * the Jinja template (prefix, name, params prefix, params, suffix), and the template renders the
 * tools and the earlier calls and results as the model was trained to see them. The answer is held
 * to that syntax by a grammar made here: the call's literal parts around each function's
 * JSON-schema grammar. With `tool_choice: "auto"` the model writes freely until it starts a call
 * (the syntax's prefix), and only the call itself is constrained — llama-server's lazy grammar.
 */
import type { ChatHistoryItem, ChatModelFunctions, JinjaTemplateChatWrapper, LlamaGrammar } from "node-llama-cpp";
import { LlamaGrammar as Grammar } from "node-llama-cpp";
import type { ChatMessage, FunctionTool, ToolCall } from "../../src/contracts/job.ts";
import type { ChatTools } from "./engine.ts";
import { readJsonPrefix } from "./json-prefix.ts";
import { enforceable, type GrammarCache } from "./llamacpp-grammar.ts";
import { MAX_PARALLEL_CALLS, parseOr, toolCall } from "./tool-format.ts";

export type CallSyntax = { prefix: string; paramsPrefix: string; suffix: string; betweenCalls: string };

/** The template's own call syntax, when node-llama-cpp found one in it. */
export function callSyntaxOf(wrapper: JinjaTemplateChatWrapper | undefined): CallSyntax | undefined {
  if (!wrapper?.usingJinjaFunctionCallTemplate) return undefined;
  const { call, parallelism } = wrapper.settings.functions;
  return {
    prefix: String(call.prefix),
    paramsPrefix: String(call.paramsPrefix),
    suffix: String(call.suffix),
    betweenCalls: String(parallelism?.call.betweenCalls ?? ""),
  };
}

/** The functions the model may call, as node-llama-cpp hands them to the template. */
export function functionsOf(request: ChatTools): ChatModelFunctions {
  return Object.fromEntries(
    request.tools.map((t, i) => [
      t.function.name,
      {
        description: t.function.description,
        params: enforceable(
          t.function.parameters ?? { type: "object" },
          `tools[${i}].function.parameters`,
          "",
        ) as never,
      },
    ]),
  );
}

/** The history with assistant tool calls and their results as the template's function-call items. */
export function nativeHistory(messages: ChatMessage[]): ChatHistoryItem[] {
  const results = new Map(
    messages.filter((m) => m.role === "tool" && m.tool_call_id).map((m) => [m.tool_call_id, m.content]),
  );
  const answered = new Set<string>();
  const items: ChatHistoryItem[] = [];
  for (const m of messages) {
    if (m.role === "system") items.push({ type: "system", text: m.content });
    else if (m.role === "user") items.push({ type: "user", text: m.content });
    else if (m.role === "assistant") {
      const calls = (m.tool_calls ?? []).map((c) => {
        answered.add(c.id);
        return {
          type: "functionCall" as const,
          name: c.function.name,
          params: parseOr(c.function.arguments),
          result: results.get(c.id) ?? "",
        };
      });
      items.push({ type: "model", response: [...(m.content ? [m.content] : []), ...calls] });
    } else if (!m.tool_call_id || !answered.has(m.tool_call_id)) {
      // A result whose call is not in the history: said in words, as the generic format does.
      items.push({ type: "user", text: `Result of tool call ${m.tool_call_id ?? ""}: ${m.content}` });
    }
  }
  return items;
}

/**
 * The grammar of one or more calls in the template's syntax, each function's params held to its
 * schema. `afterPrefix`: the model already wrote the first call's prefix (tool_choice auto).
 */
export async function callsGrammar(
  grammars: GrammarCache,
  syntax: CallSyntax,
  tools: FunctionTool[],
  parallel: boolean,
  afterPrefix: boolean,
): Promise<LlamaGrammar> {
  const rules: string[] = [];
  const alternatives: string[] = [];
  for (const [i, tool] of tools.entries()) {
    const schema = enforceable(tool.function.parameters ?? { type: "object" }, `tools[${i}].function.parameters`, "");
    const params = await grammars.text(schema, `tools[${i}].function.parameters`);
    // node-llama-cpp ends a JSON grammar with forced newlines, its way of stopping; here the call's suffix follows.
    rules.push(
      renameRules(params.grammar, `f${i}-`).replace(/^(f\d+-root ::= .*?)\s*"\\n\\n\\n\\n" \[\\n\]\*\s*$/m, "$1"),
    );
    alternatives.push(`${literal(tool.function.name)} ${literal(syntax.paramsPrefix)} f${i}-root`);
  }
  const body = `( ${alternatives.join(" | ")} ) ${literal(syntax.suffix)}`;
  const more = parallel
    ? ` ( ${literal(syntax.betweenCalls)} ${literal(syntax.prefix)} call-body ){0,${MAX_PARALLEL_CALLS - 1}}`
    : "";
  const root = `root ::= ${afterPrefix ? "" : literal(syntax.prefix)} call-body${more}`;
  return new Grammar(grammars.llama, { grammar: [root, `call-body ::= ${body}`, ...rules].join("\n") });
}

/**
 * The calls in a constrained answer (`afterPrefix` as for the grammar); undefined unless every call
 * is whole. `cut`: the answer was cut short (max_tokens, a stop string) and is read as far as it
 * goes: the last call once its name is known — written whole, or the only name it can still
 * become (a named tool_choice at once) — with its params as far as they were generated.
 */
export function parseNativeCalls(
  text: string,
  syntax: CallSyntax,
  names: string[],
  afterPrefix: boolean,
  cut = false,
): ToolCall[] | undefined {
  const calls: ToolCall[] = [];
  let rest = afterPrefix
    ? text
    : text.startsWith(syntax.prefix)
      ? text.slice(syntax.prefix.length)
      : cut && syntax.prefix.startsWith(text)
        ? ""
        : undefined;
  while (rest !== undefined) {
    const name = names.filter((n) => rest?.startsWith(n + syntax.paramsPrefix)).sort((a, b) => b.length - a.length)[0];
    if (name === undefined) {
      if (!cut) return undefined;
      const open = names.filter((n) => (n + syntax.paramsPrefix).startsWith(rest as string));
      if (open.length === 1) calls.push(toolCall(open[0] as string, ""));
      break;
    }
    rest = rest.slice(name.length + syntax.paramsPrefix.length);
    const end = paramsEnd(rest, syntax.suffix);
    if (end === undefined) {
      if (!cut) return undefined;
      // Up to where the params' JSON ends, should the suffix have begun after it.
      const params = readJsonPrefix(rest);
      calls.push(toolCall(name, params ? rest.slice(params.start, params.end) : ""));
      break;
    }
    calls.push(toolCall(name, rest.slice(0, end).trim()));
    rest = rest.slice(end + syntax.suffix.length);
    const next = syntax.betweenCalls + syntax.prefix;
    rest = rest.trim() === "" ? undefined : rest.startsWith(next) ? rest.slice(next.length) : undefined;
  }
  return calls.length > 0 ? calls : undefined;
}

/** Where the params' JSON ends: the first suffix before which the text parses. */
function paramsEnd(text: string, suffix: string): number | undefined {
  for (let at = text.indexOf(suffix); at >= 0; at = text.indexOf(suffix, at + 1)) {
    try {
      JSON.parse(text.slice(0, at));
      return at;
    } catch {
      // The suffix's characters inside a string value: look further.
    }
  }
  return undefined;
}

/** A GBNF string literal. */
function literal(text: string): string {
  return text === "" ? '""' : JSON.stringify(text);
}

/** Prefixes every rule name of a GBNF grammar, leaving string literals and character classes alone. */
export function renameRules(grammar: string, prefix: string): string {
  const names = new Set([...grammar.matchAll(/^([a-zA-Z0-9-]+)\s*::=/gm)].map((m) => m[1] as string));
  let out = "";
  let i = 0;
  while (i < grammar.length) {
    const c = grammar[i] as string;
    if (c === '"' || c === "[") {
      const close = c === '"' ? '"' : "]";
      let j = i + 1;
      while (j < grammar.length && grammar[j] !== close) j += grammar[j] === "\\" ? 2 : 1;
      out += grammar.slice(i, j + 1);
      i = j + 1;
    } else if (/[a-zA-Z0-9-]/.test(c)) {
      let j = i;
      while (j < grammar.length && /[a-zA-Z0-9-]/.test(grammar[j] as string)) j++;
      const word = grammar.slice(i, j);
      out += names.has(word) ? prefix + word : word;
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}
