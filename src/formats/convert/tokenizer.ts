/**
 * A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja) as GGUF
 * `tokenizer.*` metadata, the way llama.cpp's convert_hf_to_gguf.py writes it:
 * - SentencePiece-style BPE (byte_fallback, "▁" for spaces: Llama, Mistral, Mixtral) becomes
 *   `tokenizer.ggml.model = "llama"` with tokens, scores and token types. tokenizer.json carries
 *   no SentencePiece scores; pieces are ranked by id (SentencePiece vocabularies are ordered by
 *   score, and BPE trainers add tokens in merge order), so score = -id keeps llama.cpp's
 *   highest-score-first merging in the tokenizer's own order.
 * - GPT-2 byte-level BPE (Qwen2, Llama 3) becomes `"gpt2"` with the merges and a
 *   `tokenizer.ggml.pre` llama.cpp knows, recognised from the pre-tokenizer's split pattern.
 * Special token ids, add_bos/add_eos and the chat template are carried over.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { gguf, type GgufValue } from "../gguf/index.ts";
import { parseSentencePiece } from "./sentencepiece.ts";

/** llama.cpp's token types (llama_token_type, the same numbers as SentencePiece's piece types). */
const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

/** A problem with the checkpoint's tokenizer; the converter reports it as a 400. */
export class TokenizerError extends Error {}

type AddedToken = { id: number; content: string; special?: boolean };
type TokenizerJson = {
  added_tokens?: AddedToken[];
  normalizer?: unknown;
  pre_tokenizer?: unknown;
  post_processor?: unknown;
  decoder?: unknown;
  model?: {
    type?: string;
    vocab?: Record<string, number>;
    merges?: (string | [string, string])[];
    byte_fallback?: boolean;
    unk_token?: string | null;
  };
};
type TokenizerConfig = Record<string, unknown>;

/**
 * llama.cpp pre-tokenizer names by the split regex their tokenizer.json uses (llama.cpp's
 * llama-vocab.cpp holds the same regexes). Checkpoints whose pattern is not listed get "default".
 */
const KNOWN_PRE_TOKENIZERS: [pattern: string, name: string][] = [
  [
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "qwen2",
  ],
  [
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "llama-bpe",
  ],
  ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt2"],
];

/**
 * The `tokenizer.*` metadata for the checkpoint in `dir`. `vocabSize` is the embedding's row
 * count: llama.cpp needs one token per row, so a vocabulary padded in the weights is padded here.
 */
export async function tokenizerMetadata(
  dir: string,
  config: Record<string, unknown>,
  vocabSize: number,
): Promise<Map<string, GgufValue>> {
  const json = await readJson<TokenizerJson>(dir, "tokenizer.json");
  const tokenizerConfig = (await readJson<TokenizerConfig>(dir, "tokenizer_config.json")) ?? {};
  const vocab = json !== undefined ? fromTokenizerJson(json, vocabSize) : await fromSentencePiece(dir, vocabSize);
  const { tokens, types, byContent } = vocab;
  for (let id = 0; id < vocabSize; id++) {
    if (tokens[id] === undefined) {
      tokens[id] = `[PAD${id}]`;
      types[id] = TOKEN_TYPE.unused;
    }
  }
  const meta = new Map<string, GgufValue>();
  const specialId = (field: string, configField: string): number | undefined => {
    const entry = tokenizerConfig[field];
    const content =
      typeof entry === "string"
        ? entry
        : typeof entry === "object" && entry !== null
          ? (entry as { content?: unknown }).content
          : undefined;
    if (typeof content === "string" && byContent.has(content)) return byContent.get(content);
    const fromConfig = config[configField] ?? vocab.specials?.[field];
    const id = Array.isArray(fromConfig) ? fromConfig[0] : fromConfig;
    return typeof id === "number" && Number.isSafeInteger(id) && id >= 0 && id < vocabSize ? id : undefined;
  };
  const ids = {
    bos: specialId("bos_token", "bos_token_id"),
    eos: specialId("eos_token", "eos_token_id"),
    unk: specialId("unk_token", "unk_token_id"),
    pad: specialId("pad_token", "pad_token_id"),
  };

  if (vocab.kind === "gpt2") {
    meta.set("tokenizer.ggml.model", gguf.string("gpt2"));
    meta.set("tokenizer.ggml.pre", gguf.string(vocab.pre));
    meta.set("tokenizer.ggml.tokens", gguf.strings(tokens));
    meta.set("tokenizer.ggml.token_type", gguf.int32s(types));
    meta.set("tokenizer.ggml.merges", gguf.strings(vocab.merges));
  } else {
    if (ids.unk !== undefined) types[ids.unk] = TOKEN_TYPE.unknown;
    // tokenizer.json has no scores: rank normal pieces by id (see the top of this file).
    const scores = tokens.map((_, id) => vocab.scores?.[id] ?? (types[id] === TOKEN_TYPE.normal ? -id : 0));
    meta.set("tokenizer.ggml.model", gguf.string("llama"));
    meta.set("tokenizer.ggml.tokens", gguf.strings(tokens));
    meta.set("tokenizer.ggml.scores", gguf.float32s(scores));
    meta.set("tokenizer.ggml.token_type", gguf.int32s(types));
    if (vocab.addSpacePrefix !== undefined)
      meta.set("tokenizer.ggml.add_space_prefix", gguf.bool(vocab.addSpacePrefix));
  }
  if (ids.bos !== undefined) meta.set("tokenizer.ggml.bos_token_id", gguf.uint32(ids.bos));
  if (ids.eos !== undefined) meta.set("tokenizer.ggml.eos_token_id", gguf.uint32(ids.eos));
  if (ids.unk !== undefined) meta.set("tokenizer.ggml.unknown_token_id", gguf.uint32(ids.unk));
  if (ids.pad !== undefined) meta.set("tokenizer.ggml.padding_token_id", gguf.uint32(ids.pad));
  const addBos = addsToken(tokenizerConfig, "add_bos_token", json?.post_processor, ids.bos, tokens);
  const addEos = addsToken(tokenizerConfig, "add_eos_token", json?.post_processor, ids.eos, tokens);
  // Where the tokenizer says nothing either way, llama.cpp's default for the tokenizer model applies.
  if (addBos !== undefined) meta.set("tokenizer.ggml.add_bos_token", gguf.bool(addBos));
  if (addEos !== undefined) meta.set("tokenizer.ggml.add_eos_token", gguf.bool(addEos));
  const template = await chatTemplate(dir, tokenizerConfig);
  if (template !== undefined) meta.set("tokenizer.chat_template", gguf.string(template));
  return meta;
}

type Vocab = {
  tokens: string[];
  types: number[];
  byContent: Map<string, number>;
  /** Special ids the tokenizer file itself names (tokenizer.model's trainer spec), by tokenizer_config field. */
  specials?: Record<string, number>;
} & ({ kind: "gpt2"; pre: string; merges: string[] } | { kind: "llama"; scores?: number[]; addSpacePrefix?: boolean });

function placer(vocabSize: number, file: string) {
  const tokens: string[] = [];
  const types: number[] = [];
  const place = (id: number, text: string, type: number) => {
    if (!Number.isSafeInteger(id) || id < 0)
      throw new TokenizerError(`${file}: token "${text.slice(0, 40)}" has an invalid id`);
    if (id >= vocabSize)
      throw new TokenizerError(`${file}: token id ${id} is past the model's ${vocabSize} embedding rows`);
    tokens[id] = text;
    types[id] = type;
  };
  return { tokens, types, place };
}

function fromTokenizerJson(json: TokenizerJson, vocabSize: number): Vocab {
  const model = json.model;
  if (model?.type !== "BPE" || typeof model.vocab !== "object" || model.vocab === null) {
    throw new TokenizerError(
      `tokenizer.json: the ${String(model?.type ?? "missing").slice(0, 40)} model cannot be converted; only BPE tokenizers (SentencePiece-style or byte-level) are supported`,
    );
  }
  const byteLevel = mentions(json.pre_tokenizer, "ByteLevel") || mentions(json.decoder, "ByteLevel");
  const { tokens, types, place } = placer(vocabSize, "tokenizer.json");
  for (const [text, id] of Object.entries(model.vocab)) {
    place(
      id,
      text,
      byteLevel ? TOKEN_TYPE.normal : /^<0x[0-9A-F]{2}>$/.test(text) ? TOKEN_TYPE.byte : TOKEN_TYPE.normal,
    );
  }
  const byContent = new Map<string, number>(Object.entries(model.vocab));
  for (const t of json.added_tokens ?? []) {
    place(t.id, t.content, t.special ? TOKEN_TYPE.control : TOKEN_TYPE.userDefined);
    byContent.set(t.content, t.id);
  }
  if (byteLevel) {
    const merges = (model.merges ?? []).map((m) => (Array.isArray(m) ? m.join(" ") : m));
    return { kind: "gpt2", tokens, types, byContent, pre: preTokenizerName(json.pre_tokenizer), merges };
  }
  if (!model.byte_fallback && !tokens.some((t) => t?.startsWith("\u2581"))) {
    throw new TokenizerError(
      "tokenizer.json: a BPE tokenizer that is neither byte-level nor SentencePiece-style (byte_fallback, \u2581 for spaces) cannot be converted",
    );
  }
  // Metaspace with prepend_scheme "never" (or the older add_prefix_space false) adds no leading space.
  const metaspace = findComponent(json.pre_tokenizer, "Metaspace") as
    | { prepend_scheme?: unknown; add_prefix_space?: unknown }
    | undefined;
  const addSpacePrefix =
    metaspace === undefined
      ? undefined
      : metaspace.prepend_scheme === "never" || metaspace.add_prefix_space === false
        ? false
        : undefined;
  return { kind: "llama", tokens, types, byContent, ...(addSpacePrefix === undefined ? {} : { addSpacePrefix }) };
}

/** Far beyond real SentencePiece models (Llama's is 500 KB, Gemma's 4 MB): a bound, not a limit anyone meets. */
const MAX_SENTENCEPIECE_BYTES = 64 << 20;

async function fromSentencePiece(dir: string, vocabSize: number): Promise<Vocab> {
  const path = join(dir, "tokenizer.model");
  const size = await stat(path).then(
    (s) => s.size,
    () => undefined,
  );
  if (size === undefined) {
    throw new TokenizerError(
      "the checkpoint has no tokenizer.json or tokenizer.model (save the tokenizer with the model)",
    );
  }
  if (size > MAX_SENTENCEPIECE_BYTES)
    throw new TokenizerError("tokenizer.model is too large to be a SentencePiece model");
  const sp = parseSentencePiece(
    await readFile(path).catch(() => {
      throw new TokenizerError("tokenizer.model cannot be read");
    }),
  );
  if (sp.modelType !== 2)
    throw new TokenizerError(
      "tokenizer.model: only SentencePiece BPE models (as Llama and Mistral use) can be converted; this one is unigram or another type",
    );
  const { tokens, types, place } = placer(vocabSize, "tokenizer.model");
  const scores: number[] = [];
  const byContent = new Map<string, number>();
  sp.pieces.forEach((p, id) => {
    // SentencePiece's piece types are llama.cpp's token types.
    place(id, p.piece, p.type >= 1 && p.type <= 6 ? p.type : TOKEN_TYPE.normal);
    scores[id] = p.score;
    byContent.set(p.piece, id);
  });
  const added = await readJson<Record<string, unknown>>(dir, "added_tokens.json");
  for (const [content, id] of Object.entries(added ?? {})) {
    if (typeof id !== "number") throw new TokenizerError("added_tokens.json: ids must be numbers");
    place(id, content, TOKEN_TYPE.userDefined);
    scores[id] = 0;
    byContent.set(content, id);
  }
  const specials: Record<string, number> = {};
  for (const [field, id] of [
    ["bos_token", sp.bosId],
    ["eos_token", sp.eosId],
    ["unk_token", sp.unkId],
    ["pad_token", sp.padId],
  ] as const) {
    if (id >= 0 && id < vocabSize) specials[field] = id;
  }
  return { kind: "llama", tokens, types, byContent, scores, addSpacePrefix: sp.addDummyPrefix, specials };
}

function findComponent(component: unknown, type: string): unknown {
  if (typeof component !== "object" || component === null) return undefined;
  const c = component as { type?: unknown; pretokenizers?: unknown };
  if (c.type === type) return c;
  return Array.isArray(c.pretokenizers)
    ? c.pretokenizers.map((x) => findComponent(x, type)).find((x) => x !== undefined)
    : undefined;
}

async function readJson<T>(dir: string, name: string): Promise<T | undefined> {
  const text = await readFile(join(dir, name), "utf8").catch((e: NodeJS.ErrnoException) => {
    if (e.code === "ENOENT") return undefined;
    throw new TokenizerError(`${name} cannot be read`);
  });
  if (text === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed as T;
  } catch {
    // reported below
  }
  throw new TokenizerError(`${name} is not a JSON object`);
}

/** Whether a tokenizer.json component (possibly a Sequence of them) has one of `type`. */
function mentions(component: unknown, type: string): boolean {
  if (typeof component !== "object" || component === null) return false;
  const c = component as { type?: unknown; pretokenizers?: unknown; decoders?: unknown };
  if (c.type === type) return true;
  const inner = Array.isArray(c.pretokenizers) ? c.pretokenizers : Array.isArray(c.decoders) ? c.decoders : [];
  return inner.some((x) => mentions(x, type));
}

function preTokenizerName(pre: unknown): string {
  const patterns: string[] = [];
  const collect = (c: unknown) => {
    if (typeof c !== "object" || c === null) return;
    const p = c as { type?: unknown; pattern?: { Regex?: unknown }; pretokenizers?: unknown; use_regex?: unknown };
    if (p.type === "Split" && typeof p.pattern?.Regex === "string") patterns.push(p.pattern.Regex);
    // A bare ByteLevel with its own regex is GPT-2's pre-tokenizer.
    if (p.type === "ByteLevel" && p.use_regex !== false) patterns.push(KNOWN_PRE_TOKENIZERS[2]![0]);
    if (Array.isArray(p.pretokenizers)) p.pretokenizers.forEach(collect);
  };
  collect(pre);
  for (const [pattern, name] of KNOWN_PRE_TOKENIZERS) if (patterns[0] === pattern) return name;
  return "default";
}

/** add_bos/add_eos: tokenizer_config.json's flag, else whether the post-processor's template inserts the token. */
function addsToken(
  config: TokenizerConfig,
  field: string,
  post: unknown,
  id: number | undefined,
  tokens: string[],
): boolean | undefined {
  const flag = config[field];
  if (typeof flag === "boolean") return flag;
  if (typeof post !== "object" || post === null) return undefined;
  const p = post as { type?: unknown; single?: unknown; processors?: unknown };
  if (p.type === "Sequence" && Array.isArray(p.processors)) {
    for (const inner of p.processors) {
      const found = addsToken({}, field, inner, id, tokens);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (p.type !== "TemplateProcessing" || !Array.isArray(p.single)) return undefined;
  if (id === undefined) return false;
  const pieces = p.single as { SpecialToken?: { id?: unknown }; Sequence?: unknown }[];
  const text = pieces.findIndex((piece) => piece.Sequence !== undefined);
  const at = pieces.flatMap((piece, i) => (piece.SpecialToken?.id === tokens[id] ? [i] : []));
  // BOS counts when inserted before the text, EOS after it.
  return field === "add_bos_token" ? at.some((i) => i < text) : at.some((i) => i > text);
}

/** tokenizer_config.json's `chat_template` (a string, or named templates: "default" or the first), else chat_template.jinja. */
async function chatTemplate(dir: string, config: TokenizerConfig): Promise<string | undefined> {
  const t = config.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t.filter(
      (x): x is { name: string; template: string } => typeof x?.name === "string" && typeof x?.template === "string",
    );
    return (named.find((x) => x.name === "default") ?? named[0])?.template;
  }
  const file = await readFile(join(dir, "chat_template.jinja"), "utf8").catch(() => undefined);
  return file;
}
