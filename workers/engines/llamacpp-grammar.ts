/**
 * JSON schemas as llama.cpp grammars, so every answer parses and validates. The schema is checked
 * and its grammar's text made on worker threads (grammar-pool.ts, json-gbnf.ts, which says what is
 * enforced and how); what stays on the replica's thread is writing the schema as JSON (the cache's
 * key) and llama.cpp's parse of the text, once per distinct schema, kept in GrammarCache.
 */
import type { Llama, LlamaGrammar, LlamaModel } from "node-llama-cpp";
import { LlamaGrammar as Grammar, LlamaGrammarEvaluationState, LlamaText } from "node-llama-cpp";
import type { JsonSchema } from "../../src/contracts/job.ts";
import { GrammarPool } from "./grammar-pool.ts";

export { enforceable } from "./json-gbnf.ts";

/**
 * Built grammars are kept, the least recently used dropped first past either bound. What one
 * costs is its GBNF text and llama.cpp's parsed rules (the template its sequences' states are
 * cloned from): 5–8 bytes per character of GBNF measured, counted as 8. The largest schema the
 * default limits allow makes ~440 KB of GBNF (~3.5 MiB); most make a few KB.
 */
export const GRAMMAR_CACHE = { entries: 64, bytes: 32 * 1024 ** 2, bytesPerCharacter: 8 } as const;

/** What a JSON grammar is besides its rules: node-llama-cpp's (LlamaJsonSchemaGrammar) stop text and trimming. */
const JSON_STOP = { stopGenerationTriggers: [LlamaText(["\n".repeat(4)])], trimWhitespaceSuffix: true };

/** A JSON schema's grammar text, as made by the pool's threads, with how generation under it ends. */
export type GrammarText = { grammar: string } & typeof JSON_STOP;

type Cached = { grammar: Promise<LlamaGrammar>; bytes: number };

export class GrammarCache {
  readonly llama: Llama;
  private readonly pool: GrammarPool;
  private readonly bounds: { entries: number; bytes: number };
  /** In order of use, the most recent last. */
  private readonly grammars = new Map<string, Cached>();
  private bytes = 0;

  /** `timeoutMs`: how long one schema's conversion may take (PLATFORM_GRAMMAR_TIMEOUT_MS); `bounds`: GRAMMAR_CACHE's. */
  constructor(llama: Llama, options: { timeoutMs: number; bounds?: { entries: number; bytes: number } }) {
    this.llama = llama;
    this.pool = new GrammarPool({ timeoutMs: options.timeoutMs });
    this.bounds = options.bounds ?? GRAMMAR_CACHE;
  }

  /** Any JSON value of the object kind (`response_format: json_object`). */
  json(): Promise<LlamaGrammar> {
    return this.cached("json", () => Grammar.getFor(this.llama, "json"));
  }

  /** `param` names the schema's place in the request, for the 400s. */
  schema(schema: JsonSchema, param: string): Promise<LlamaGrammar> {
    const json = JSON.stringify(schema);
    return this.cached(json, async () => new Grammar(this.llama, await this.textOf(json, param)));
  }

  /** A schema's grammar text, made on the pool's threads; a grammar of calls builds on it. */
  text(schema: unknown, param: string): Promise<GrammarText> {
    return this.textOf(JSON.stringify(schema), param);
  }

  private async textOf(json: string, param: string): Promise<GrammarText> {
    return { grammar: await this.pool.gbnf(json, param), ...JSON_STOP };
  }

  /** Any grammar, made once per key. llama.cpp parses its text on this thread (~20 ms for 440 KB). */
  cached(key: string, make: () => Promise<LlamaGrammar>): Promise<LlamaGrammar> {
    const hit = this.grammars.get(key);
    if (hit) {
      this.grammars.delete(key);
      this.grammars.set(key, hit);
      return hit.grammar;
    }
    const entry: Cached = { grammar: make(), bytes: 0 };
    this.grammars.set(key, entry);
    entry.grammar.then(
      (grammar) => {
        if (this.grammars.get(key) !== entry) return;
        entry.bytes = grammar.grammar.length * GRAMMAR_CACHE.bytesPerCharacter;
        this.bytes += entry.bytes;
        this.evict();
      },
      () => this.drop(key, entry),
    );
    this.evict();
    return entry.grammar;
  }

  /** Stops the pool's threads. */
  close(): Promise<void> {
    return this.pool.close();
  }

  /** The least recently used go first; the newest stays, whatever its size, for the request that made it. */
  private evict(): void {
    for (const [key, entry] of this.grammars) {
      if (this.grammars.size <= this.bounds.entries && this.bytes <= this.bounds.bytes) return;
      if (this.grammars.size === 1) return;
      this.drop(key, entry);
    }
  }

  private drop(key: string, entry: Cached): void {
    if (this.grammars.get(key) !== entry) return;
    this.grammars.delete(key);
    this.bytes -= entry.bytes;
  }
}

/**
 * Each grammar's initial state, parsed once; every generation under the grammar starts from a copy.
 * Parsing the text again for each request (what a new state does) cost up to ~12 ms on this thread
 * for the largest schema the limits allow; a copy 0.3–2 ms. Kept as long as the grammar is.
 */
const initialStates = new WeakMap<LlamaGrammar, LlamaGrammarEvaluationState>();

export function evaluationState(model: LlamaModel, grammar: LlamaGrammar): LlamaGrammarEvaluationState {
  let initial = initialStates.get(grammar);
  if (!initial) {
    initial = new LlamaGrammarEvaluationState({ model, grammar });
    initialStates.set(grammar, initial);
  }
  return initial.clone();
}
