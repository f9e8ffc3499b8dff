/**
 * Tool calls in a chat template's own syntax on llama.cpp (workers/engines/llamacpp-native-tools.ts):
 * the syntax node-llama-cpp reads from a Hermes-style template, the grammar built around each
 * function's schema (whole, and from after the call's prefix, as `tool_choice: "auto"` continues
 * once the model has started a call) decoded on the real engine with the tiny model, and the
 * calls read back.
 */
import { getLlama, JinjaTemplateChatWrapper, LlamaLogLevel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FunctionTool } from "../../src/contracts/job.ts";
import { decode } from "../../workers/engines/llamacpp-decode.ts";
import { GrammarCache } from "../../workers/engines/llamacpp-grammar.ts";
import {
  type CallSyntax,
  callSyntaxOf,
  callsGrammar,
  nativeHistory,
  parseNativeCalls,
  renameRules,
} from "../../workers/engines/llamacpp-native-tools.ts";
import { HERMES_STYLE_TEMPLATE } from "../fixtures/chat-templates.ts";
import { tinyModelPath } from "../helpers/models.ts";

const weather: FunctionTool = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 3 } },
      required: ["city", "days"],
    },
  },
};
const time: FunctionTool = {
  type: "function",
  function: {
    name: "get_time",
    parameters: {
      type: "object",
      properties: { zone: { type: "string", enum: ["utc", "local"] } },
      required: ["zone"],
    },
  },
};
const wrapper = new JinjaTemplateChatWrapper({ template: HERMES_STYLE_TEMPLATE });
const syntax = callSyntaxOf(wrapper) as CallSyntax;

describe("the template's call syntax", () => {
  it("is read from the template", () => {
    expect(syntax).toEqual({
      prefix: '<tool_call>\n{"name": "',
      paramsPrefix: '", "arguments": ',
      suffix: "}\n</tool_call>",
      betweenCalls: "\n",
    });
    expect(
      callSyntaxOf(new JinjaTemplateChatWrapper({ template: "{% for m in messages %}{{ m.content }}{% endfor %}" })),
    ).toBeUndefined();
  });

  it("reads calls back, a suffix inside a string value included, and refuses what is not complete", () => {
    const text =
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a}\\n</tool_call>b", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>';
    const calls = parseNativeCalls(text, syntax, ["get_weather", "get_time"], false);
    expect(calls?.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ["get_weather", { city: "a}\n</tool_call>b", days: 2 }],
      ["get_time", { zone: "utc" }],
    ]);
    expect(
      parseNativeCalls('get_time", "arguments": {"zone": "local"}}\n</tool_call>', syntax, ["get_time"], true)?.[0]
        ?.function.arguments,
    ).toBe('{"zone": "local"}');
    expect(
      parseNativeCalls('<tool_call>\n{"name": "get_time", "arguments": {"zone": "lo', syntax, ["get_time"], false),
    ).toBeUndefined();
    expect(
      parseNativeCalls('<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', syntax, ["get_time"], false),
    ).toBeUndefined();
  });

  it("reads an answer cut short as far as it goes: the last call once its name is known, its params so far", () => {
    const names = ["get_weather", "get_time"];
    const cut = (text: string, only = names, afterPrefix = false) =>
      parseNativeCalls(text, syntax, only, afterPrefix, true)?.map((c) => [c.function.name, c.function.arguments]);
    const whole = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>';
    expect(cut(`${whole}\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "a}\\n</tool_call>`)).toEqual([
      ["get_time", '{"zone": "utc"}'],
      ["get_weather", '{"city": "a}\\n</tool_call>'],
    ]);
    // The params whole and the suffix begun: the params and nothing after them.
    expect(cut('<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool')).toEqual([
      ["get_time", '{"zone": "utc"}'],
    ]);
    // Inside the name or the syntax around it: known once only one name fits (a named tool_choice at once).
    expect(cut('<tool_call>\n{"name": "get_t')).toEqual([["get_time", ""]]);
    expect(cut('<tool_call>\n{"name": "get_time", "argu')).toEqual([["get_time", ""]]);
    expect(cut('<tool_call>\n{"name": "get_')).toBeUndefined();
    expect(cut("<tool_c", ["get_weather"])).toEqual([["get_weather", ""]]);
    expect(cut('get_weather", "arguments": {"ci', ["get_weather"], true)).toEqual([["get_weather", '{"ci']]);
    // A further call is left out until its name is known.
    expect(cut(`${whole}\n<tool_call>\n{"na`)).toEqual([["get_time", '{"zone": "utc"}']]);
  });

  it("renders earlier calls with their results for the template", () => {
    const history = nativeHistory([
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "c1", type: "function", function: { name: "get_time", arguments: '{"zone":"utc"}' } }],
      },
      { role: "tool", content: "12:00", tool_call_id: "c1" },
      { role: "tool", content: "orphan", tool_call_id: "c9" },
    ]);
    expect(history).toEqual([
      { type: "user", text: "Weather?" },
      {
        type: "model",
        response: [{ type: "functionCall", name: "get_time", params: { zone: "utc" }, result: "12:00" }],
      },
      { type: "user", text: "Result of tool call c9: orphan" },
    ]);
  });

  it("prefixes rule names only, never text inside literals or character classes", () => {
    const grammar = 'root ::= "root" rule0 [root]\nrule0 ::= "\\"rule0\\"" | root';
    expect(renameRules(grammar, "f0-")).toBe(
      'f0-root ::= "root" f0-rule0 [root]\nf0-rule0 ::= "\\"rule0\\"" | f0-root',
    );
  });
});

describe("the calls' grammar on the real engine", () => {
  it("numbers in node-llama-cpp's JSON grammar are bounded so every client reads them exactly", async () => {
    const made = await (await grammarsPromise).text(
      { type: "object", properties: { a: { type: "integer" }, b: { type: "number" } } },
      "p",
    );
    expect(made.grammar).toMatch(/^integer-number-rule ::= "-"\? \("0" \| \[1-9\] \[0-9\]\{0,14\}\)$/m);
    expect(made.grammar).toMatch(/^fractional-number-rule ::= .*\[eE\] \[-\+\]\? \("0" \| \[1-9\] \[0-9\]\?\)/m);
    expect(made.grammar).not.toMatch(/\[eE\][^\n]*\{0,15\}/);
  });

  const llamaPromise = getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const grammarsPromise = llamaPromise.then((llama) => new GrammarCache(llama, { timeoutMs: 10_000 }));
  let model: Awaited<ReturnType<Awaited<typeof llamaPromise>["loadModel"]>>;
  let context: Awaited<ReturnType<typeof model.createContext>>;

  beforeAll(async () => {
    const llama = await llamaPromise;
    model = await llama.loadModel({ modelPath: await tinyModelPath({ contextLength: 2048 }) });
    context = await model.createContext({ sequences: 1, contextSize: 2048, threads: 1 });
  });
  afterAll(async () => {
    await (await grammarsPromise).close();
    await context?.dispose();
    await model?.dispose();
  });

  const generate = async (
    grammarOf: (grammars: GrammarCache) => ReturnType<typeof callsGrammar>,
    prompt: string,
    seed: number,
  ) => {
    const grammar = await grammarOf(await grammarsPromise);
    const sequence = context.getSequence();
    try {
      return await decode(model, sequence, model.tokenize(prompt), {
        maxTokens: 400,
        stopStrings: [],
        grammar,
        sampling: { temperature: 1, seed },
      });
    } finally {
      sequence.dispose();
    }
  };

  it("holds a whole answer to the syntax and each function's schema, one call or up to four", async () => {
    for (const seed of [1, 2, 3]) {
      const one = await generate(
        (grammars) => callsGrammar(grammars, syntax, [weather, time], false, false),
        "Once upon a time",
        seed,
      );
      expect(one.stop).toBe("eog");
      const calls = parseNativeCalls(one.text, syntax, ["get_weather", "get_time"], false);
      expect(calls).toHaveLength(1);
      for (const call of calls ?? []) {
        const args = JSON.parse(call.function.arguments);
        if (call.function.name === "get_weather") expect([1, 2, 3]).toContain(args.days);
        else expect(["utc", "local"]).toContain(args.zone);
      }
      const many = await generate(
        (grammars) => callsGrammar(grammars, syntax, [time], true, false),
        "Once upon a time",
        seed,
      );
      const parallel = parseNativeCalls(many.text, syntax, ["get_time"], false);
      expect(parallel?.length).toBeGreaterThanOrEqual(1);
      expect(parallel?.length).toBeLessThanOrEqual(4);
    }
  });

  it("continues a call the model started (tool_choice auto) from after its prefix", async () => {
    const rest = await generate(
      (grammars) => callsGrammar(grammars, syntax, [weather], false, true),
      `Once upon a time${syntax.prefix}`,
      5,
    );
    expect(rest.text.startsWith('get_weather", "arguments": ')).toBe(true);
    const calls = parseNativeCalls(rest.text, syntax, ["get_weather"], true);
    expect(calls).toHaveLength(1);
    expect(JSON.parse(calls?.[0]?.function.arguments ?? "").city.length).toBeLessThanOrEqual(12);
  });
});
