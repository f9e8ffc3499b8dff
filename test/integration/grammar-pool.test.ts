/**
 * Structured outputs' grammars on llama.cpp without stalling the replica (issue 21): the schema is
 * checked and converted on the grammar pool's thread while the replica's event loop goes on, a
 * conversion past its budget fails that request alone with `schema_too_complex` and the pool goes
 * on, choices among literals are written as trees that accept exactly what the flat choices did,
 * and built grammars are kept within the cache's bounds.
 */
import { getLlama, type LlamaGrammar, LlamaLogLevel } from "node-llama-cpp";
import { afterAll, describe, expect, it } from "vitest";
import { GrammarPool } from "../../workers/engines/grammar-pool.ts";
import { factorLiterals } from "../../workers/engines/json-gbnf.ts";
import { GrammarCache } from "../../workers/engines/llamacpp-grammar.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { tinyModelPath } from "../helpers/models.ts";

const llamaPromise = getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
/**
 * Far over the default limits (the pool does not judge them): its conversion takes about a second
 * on a quiet 2-core machine (1.0 s measured; 20,000 properties took 0.19 s once the converter got
 * faster, under the 250 ms budget below), and longer on a loaded one.
 */
const huge = {
  type: "object",
  properties: Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`property_${i}`, { type: "integer" }])),
};
const small = { type: "object", properties: { a: { enum: ["x", "y"] } }, required: ["a"] };
const pools: GrammarPool[] = [];
const pool = (timeoutMs: number) => {
  const made = new GrammarPool({ timeoutMs });
  pools.push(made);
  return made;
};
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

describe("the grammar pool", () => {
  it("converts on its thread while the replica's event loop goes on turning", async () => {
    const converting = pool(60_000).gbnf(JSON.stringify(huge), "response_format.json_schema.schema");
    let turns = 0;
    let done = false;
    void converting.finally(() => (done = true));
    while (!done) {
      await new Promise((r) => setImmediate(r));
      turns++;
    }
    expect(await converting).toMatch(/^root ::= "\{"/);
    expect(turns).toBeGreaterThan(10);
  });

  it("fails a conversion past its budget with schema_too_complex, that one alone; the next is converted", async () => {
    // Far under the huge schema's conversion (about 1 s here), yet room for the small one on a
    // fresh thread of a loaded machine (50 ms was not, once in CI).
    const budgeted = pool(250);
    const param = "response_format.json_schema.schema";
    const [slow, quick] = await Promise.allSettled([
      budgeted.gbnf(JSON.stringify(huge), param),
      budgeted.gbnf(JSON.stringify(small), "tools[0].function.parameters"),
    ]);
    expect(slow.status === "rejected" && slow.reason).toMatchObject({
      status: 400,
      code: "schema_too_complex",
      param,
      message: `${param}: building a grammar for this JSON schema took longer than 250 ms (PLATFORM_GRAMMAR_TIMEOUT_MS); send a smaller or simpler schema`,
    });
    expect(quick.status === "fulfilled" && quick.value).toMatch(/^root ::= /);
  });

  it("refuses what cannot be enforced, naming the schema and where", async () => {
    const param = "tools[2].function.parameters";
    await expect(
      pool(10_000).gbnf(
        JSON.stringify({ type: "object", properties: { code: { type: "string", pattern: "^x" } } }),
        param,
      ),
    ).rejects.toMatchObject({
      status: 400,
      code: "invalid_request",
      param,
      message: expect.stringMatching(
        /^tools\[2\]\.function\.parameters: the keyword "pattern" at \/properties\/code\/pattern/,
      ),
    });
    await expect(pool(10_000).gbnf(JSON.stringify({ enum: [{ an: "object" }] }), param)).rejects.toMatchObject({
      code: "invalid_request",
      message: expect.stringMatching(/^tools\[2\]\.function\.parameters: this JSON schema cannot be enforced \(/),
    });
  });
});

describe("choices among literals as trees", () => {
  const testText = (grammar: LlamaGrammar, text: string) =>
    (grammar as unknown as { _testText(text: string): boolean })._testText(text);

  it("accepts exactly what the flat choice did", async () => {
    const llama = await llamaPromise;
    const values = ["alpha", "alpine", "al", 'quo"te', "back\\slash", "é\n", "", "beta", 5, true, null];
    const flat = [
      "root ::= rule0",
      'val0 ::= "\\"alpha\\""',
      `rule0 ::= ( ${values.map((v) => (v === "alpha" ? "val0" : JSON.stringify(JSON.stringify(v)))).join(" | ")} )`,
    ].join("\n");
    const factored = factorLiterals(flat);
    expect(factored).not.toContain("val0");
    expect(factored).toMatch(/^rule0 ::= \( "\\"" \( "al" \(/m);
    const before = await llama.createGrammar({ grammar: flat });
    const after = await llama.createGrammar({ grammar: factored });
    const texts = [...values.map((v) => JSON.stringify(v)), '"alp"', '"alphab"', '"a"', "6", "nul", '"beta', '"'];
    for (const text of texts) expect(testText(after, text), text).toBe(testText(before, text));
    expect(testText(after, '"alpine"')).toBe(true);
    expect(testText(after, '"alp"')).toBe(false);
  });
});

describe("the cache of built grammars", () => {
  it("keeps the most recently used, within its bounds in entries and bytes", async () => {
    const cache = new GrammarCache(await llamaPromise, { timeoutMs: 10_000, bounds: { entries: 2, bytes: 1e9 } });
    const schema = (name: string) => ({ type: "object", properties: { [name]: { type: "string" } } });
    const a = await cache.schema(schema("a"), "p");
    expect(await cache.schema(schema("a"), "p")).toBe(a);
    await cache.schema(schema("b"), "p");
    await cache.schema(schema("a"), "p");
    await cache.schema(schema("c"), "p"); // b is the least recently used: it goes
    expect(await cache.schema(schema("a"), "p")).toBe(a);
    const b = await cache.schema(schema("b"), "p");
    expect(await cache.schema(schema("b"), "p")).toBe(b);
    const bytes = new GrammarCache(await llamaPromise, { timeoutMs: 10_000, bounds: { entries: 64, bytes: 1 } });
    const first = await bytes.schema(schema("a"), "p");
    await bytes.schema(schema("b"), "p"); // over the bytes: only the newest stays
    expect(await bytes.schema(schema("a"), "p")).not.toBe(first);
    await Promise.all([cache.close(), bytes.close()]);
  });
});

describe("on the engine", () => {
  it("a schema past the budget fails its request alone; the replica goes on serving", async () => {
    const engine = await loadLlamaCpp({
      modelPath: await tinyModelPath(),
      parallel: 2,
      threads: 1,
      // As above: room for the small schema afterwards on a loaded machine (50 ms failed it in CI).
      grammarTimeoutMs: 250,
    });
    try {
      const [structured, plain] = await Promise.allSettled([
        engine.generate(
          {
            kind: "prompt",
            prompt: "Once",
            params: {
              max_tokens: 8,
              response_format: { type: "json_schema", json_schema: { name: "huge", schema: huge } },
            },
          },
          {},
        ),
        engine.generate({ kind: "prompt", prompt: "Once upon a time", params: { max_tokens: 8, temperature: 0 } }, {}),
      ]);
      expect(structured.status === "rejected" && structured.reason).toMatchObject({ code: "schema_too_complex" });
      expect(plain.status).toBe("fulfilled");
      const after = await engine.generate(
        {
          kind: "prompt",
          prompt: "Once",
          params: {
            max_tokens: 16,
            response_format: { type: "json_schema", json_schema: { name: "s", schema: small } },
          },
        },
        {},
      );
      expect(after.text.startsWith("{")).toBe(true);
    } finally {
      await engine.dispose();
    }
  });
});
