/**
 * Sequences generating at once decode their next tokens in one batch (workers/engines/llamacpp-lockstep.ts):
 * counted at llama.cpp's own batch calls on stories260K. Without lockstep node-llama-cpp dispatched
 * each batch before the last sequence had asked for its next token (4 × 64 tokens: about 86 batches
 * of 3 instead of 64 of 4).
 */
import type { LlamaContext } from "node-llama-cpp";
import { afterAll, describe, expect, it } from "vitest";
import type { Engine } from "../../workers/engines/engine.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { sharedModelPath } from "../helpers/models.ts";

const shared = sharedModelPath();
const TOKENS = 64;

/** Counts the tokens of each batch the context hands to llama.cpp (its native calls, wrapped). */
function countBatches(context: LlamaContext): number[] {
  const sizes: number[] = [];
  let current = 0;
  const holder = context as unknown as { _ctx: Record<string | symbol, unknown> };
  const native = holder._ctx;
  holder._ctx = new Proxy(native, {
    get(target, key) {
      const value = target[key];
      if (typeof value !== "function") return value;
      if (key === "addToBatch")
        return (...args: unknown[]) => {
          current += (args[2] as Uint32Array).length;
          return value.apply(target, args);
        };
      if (key === "decodeBatch")
        return (...args: unknown[]) => {
          sizes.push(current);
          current = 0;
          return value.apply(target, args);
        };
      return value.bind(target);
    },
  });
  return sizes;
}

describe.skipIf(shared === undefined)("decoding four sequences at once (stories260K)", () => {
  let engine: Engine;
  afterAll(async () => {
    await engine?.dispose();
  });

  it("puts every generating sequence's next token in the same batch", async () => {
    engine = await loadLlamaCpp({ modelPath: shared as string, parallel: 4, threads: 1 });
    // The base context, opened at load (no llama-server child: no binary settings given).
    const sizes = countBatches((engine as unknown as { opened: { context: LlamaContext } }).opened.context);
    const prompts = ["Once upon a time", "The little dog", "Lily went to the park", "A big red ball"];
    const outs = await Promise.all(
      prompts.map((prompt) =>
        engine.generate({ kind: "prompt", prompt, params: { max_tokens: TOKENS, temperature: 0 } }, {}),
      ),
    );
    const made = outs.reduce((n, o) => n + o.usage.completion_tokens, 0);
    expect(made).toBe(4 * TOKENS);
    // The prompts may share a batch with the first tokens or not; every batch after that carries a token of each.
    const decoding = sizes.filter((s) => s <= 4);
    const full = decoding.filter((s) => s === 4).length;
    expect(full).toBeGreaterThanOrEqual(TOKENS - 3);
    expect(sizes.length).toBeLessThanOrEqual(TOKENS + 3);
  });
});
