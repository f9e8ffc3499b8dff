/**
 * BERT-family encoders (sentence-transformers checkpoints and their `BertModel`/`BertForMaskedLM`
 * bases) to a GGUF llama.cpp runs as an embedding model: `general.architecture = "bert"`, the
 * tensor and tokenizer layout of llama.cpp's own converter (convert_hf_to_gguf.py, BertModel),
 * and the pooling the checkpoint declares in sentence-transformers' `modules.json` and
 * `1_Pooling/config.json`. docs/embeddings.md lists what is read and what is refused.
 */
import { readFile } from "node:fs/promises";
import { join, normalize, sep } from "node:path";
import { PlatformError } from "../../contracts/errors.ts";
import { gguf, GGML_TYPE, type GgufValue, LLAMA_FTYPE, writeGgufFile } from "../gguf/index.ts";
import type { ConversionResult, Converter } from "./converter.ts";
import { SafetensorsCheckpoint, SafetensorsError } from "./safetensors.ts";

/** llama.cpp's `{arch}.pooling_type` values (llama.h, enum llama_pooling_type). */
export const POOLING_TYPE = { mean: 1, cls: 2, last: 3 } as const;
export type Pooling = keyof typeof POOLING_TYPE;

/**
 * A GGUF key of this platform, not llama.cpp's: the checkpoint ends in a sentence-transformers
 * `Normalize` module, so the worker L2-normalises each embedding (llama.cpp returns them raw).
 */
export const NORMALIZE_KEY = "platform.embedding.normalize";

/** GGUF token types (llama.h, enum llama_token_type). */
const TOKEN_TYPE = { normal: 1, control: 3, unused: 5 } as const;

/** What sentence-transformers declares around the transformer: how token vectors become one, and whether it is normalised. */
export type SentenceTransformersHead = { pooling: Pooling; normalize: boolean; declared: boolean };

const invalid = (message: string) => new PlatformError(400, "invalid_artifact", message, "source");

export const convertBert: Converter = async (dir, config, outPath): Promise<ConversionResult> => {
  const architecture = (config.architectures as string[])[0] as string;
  const hp = hyperparameters(config);
  const head = await readSentenceTransformersHead(dir);
  const vocab = await readVocabulary(dir, hp.vocabSize);
  let checkpoint: SafetensorsCheckpoint;
  try {
    checkpoint = await SafetensorsCheckpoint.open(dir);
  } catch (e) {
    if (e instanceof SafetensorsError) throw invalid(`the checkpoint's safetensors cannot be read: ${e.message}`);
    throw e;
  }
  try {
    const plan = tensorPlan(checkpoint, hp);
    const metadata = new Map<string, GgufValue>([
      ["general.architecture", gguf.string("bert")],
      [
        "general.name",
        gguf.string(
          typeof config._name_or_path === "string" && /^[\w./-]{1,200}$/.test(config._name_or_path)
            ? config._name_or_path
            : "bert",
        ),
      ],
      ["general.file_type", gguf.uint32(LLAMA_FTYPE.ALL_F32)],
      ["bert.context_length", gguf.uint32(hp.contextLength)],
      ["bert.embedding_length", gguf.uint32(hp.embedding)],
      ["bert.feed_forward_length", gguf.uint32(hp.feedForward)],
      ["bert.block_count", gguf.uint32(hp.blocks)],
      ["bert.attention.head_count", gguf.uint32(hp.heads)],
      ["bert.attention.layer_norm_epsilon", gguf.float32(hp.layerNormEps)],
      ["bert.attention.causal", gguf.bool(false)],
      ["bert.pooling_type", gguf.uint32(POOLING_TYPE[head.pooling])],
      [NORMALIZE_KEY, gguf.bool(head.normalize)],
      ["tokenizer.ggml.model", gguf.string("bert")],
      ["tokenizer.ggml.tokens", gguf.strings(vocab.tokens)],
      ["tokenizer.ggml.token_type", gguf.int32s(vocab.types)],
      ["tokenizer.ggml.token_type_count", gguf.uint32(hp.typeVocabSize)],
      // llama.cpp's WPM tokenizer starts each input with BOS: BERT's [CLS] is that token.
      ["tokenizer.ggml.bos_token_id", gguf.uint32(vocab.special.cls)],
      ["tokenizer.ggml.seperator_token_id", gguf.uint32(vocab.special.sep)],
      ["tokenizer.ggml.unknown_token_id", gguf.uint32(vocab.special.unk)],
      ["tokenizer.ggml.padding_token_id", gguf.uint32(vocab.special.pad)],
      ...(vocab.special.mask === undefined
        ? []
        : [["tokenizer.ggml.mask_token_id", gguf.uint32(vocab.special.mask)] as [string, GgufValue]]),
    ]);
    const headers = plan.map((t) => ({ name: t.name, dims: t.dims, type: GGML_TYPE.F32 }));
    await writeGgufFile(outPath, metadata, headers, async function* (i) {
      const values = await checkpoint.read((plan[i] as PlannedTensor).source);
      yield new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    });
  } catch (e) {
    if (e instanceof SafetensorsError) throw invalid(`the checkpoint's safetensors cannot be read: ${e.message}`);
    throw e;
  } finally {
    await checkpoint.close();
  }
  return { architecture, ggufArchitecture: "bert", task: "embed" };
};

type Hyperparameters = {
  vocabSize: number;
  embedding: number;
  feedForward: number;
  blocks: number;
  heads: number;
  contextLength: number;
  typeVocabSize: number;
  layerNormEps: number;
};

function hyperparameters(config: Record<string, unknown>): Hyperparameters {
  const int = (key: string, fallback?: number): number => {
    const v = config[key] ?? fallback;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > 1 << 24)
      throw invalid(`config.json: ${key} must be a positive integer`);
    return v;
  };
  const act = config.hidden_act ?? "gelu";
  // llama.cpp's BERT graph applies GELU; a checkpoint trained with another activation would embed differently.
  if (typeof act !== "string" || !act.startsWith("gelu"))
    throw invalid(
      `config.json: hidden_act "${String(act).slice(0, 40)}" is not supported; BERT checkpoints with GELU are`,
    );
  const position = config.position_embedding_type ?? "absolute";
  if (position !== "absolute")
    throw invalid(
      `config.json: position_embedding_type "${String(position).slice(0, 40)}" is not supported; only absolute position embeddings are`,
    );
  const hp: Hyperparameters = {
    vocabSize: int("vocab_size"),
    embedding: int("hidden_size"),
    feedForward: int("intermediate_size"),
    blocks: int("num_hidden_layers"),
    heads: int("num_attention_heads"),
    contextLength: int("max_position_embeddings"),
    typeVocabSize: int("type_vocab_size", 2),
    layerNormEps:
      typeof config.layer_norm_eps === "number" && config.layer_norm_eps > 0 ? config.layer_norm_eps : 1e-12,
  };
  if (hp.embedding % hp.heads !== 0)
    throw invalid(`config.json: hidden_size ${hp.embedding} is not a multiple of num_attention_heads ${hp.heads}`);
  return hp;
}

type PlannedTensor = { name: string; dims: number[]; source: string };

/** GGUF name → checkpoint tensor, checked for shape; `bert.`-prefixed names (BertForMaskedLM) are read the same. */
function tensorPlan(checkpoint: SafetensorsCheckpoint, hp: Hyperparameters): PlannedTensor[] {
  const prefix = checkpoint.has("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const plan: PlannedTensor[] = [];
  // ggml dims are PyTorch's shape reversed; row-major data is then the same bytes.
  const add = (name: string, source: string, shape: number[]) => {
    const full = prefix + source;
    if (!checkpoint.has(full))
      throw invalid(
        `the checkpoint has no tensor ${full}, which a ${prefix ? "BertForMaskedLM" : "BertModel"} checkpoint has`,
      );
    const actual = checkpoint.info(full).shape;
    if (actual.length !== shape.length || actual.some((d, i) => d !== shape[i])) {
      throw invalid(`tensor ${full} has shape [${actual.join(", ")}]; config.json implies [${shape.join(", ")}]`);
    }
    plan.push({ name, dims: [...shape].reverse(), source: full });
  };
  const { embedding: e, feedForward: f } = hp;
  add("token_embd.weight", "embeddings.word_embeddings.weight", [hp.vocabSize, e]);
  add("token_types.weight", "embeddings.token_type_embeddings.weight", [hp.typeVocabSize, e]);
  add("position_embd.weight", "embeddings.position_embeddings.weight", [hp.contextLength, e]);
  add("token_embd_norm.weight", "embeddings.LayerNorm.weight", [e]);
  add("token_embd_norm.bias", "embeddings.LayerNorm.bias", [e]);
  for (let i = 0; i < hp.blocks; i++) {
    const layer = `encoder.layer.${i}.`;
    for (const [to, from] of [
      ["attn_q", "attention.self.query"],
      ["attn_k", "attention.self.key"],
      ["attn_v", "attention.self.value"],
      ["attn_output", "attention.output.dense"],
    ] as const) {
      add(`blk.${i}.${to}.weight`, `${layer}${from}.weight`, [e, e]);
      add(`blk.${i}.${to}.bias`, `${layer}${from}.bias`, [e]);
    }
    add(`blk.${i}.attn_output_norm.weight`, `${layer}attention.output.LayerNorm.weight`, [e]);
    add(`blk.${i}.attn_output_norm.bias`, `${layer}attention.output.LayerNorm.bias`, [e]);
    add(`blk.${i}.ffn_up.weight`, `${layer}intermediate.dense.weight`, [f, e]);
    add(`blk.${i}.ffn_up.bias`, `${layer}intermediate.dense.bias`, [f]);
    add(`blk.${i}.ffn_down.weight`, `${layer}output.dense.weight`, [e, f]);
    add(`blk.${i}.ffn_down.bias`, `${layer}output.dense.bias`, [e]);
    add(`blk.${i}.layer_output_norm.weight`, `${layer}output.LayerNorm.weight`, [e]);
    add(`blk.${i}.layer_output_norm.bias`, `${layer}output.LayerNorm.bias`, [e]);
  }
  return plan;
}

type Vocabulary = {
  tokens: string[];
  types: number[];
  special: { cls: number; sep: number; unk: number; pad: number; mask?: number };
};

/** At most this many tokens: far above any BERT vocabulary (30,522 for bert-base), bounding what a checkpoint can make us hold. */
const MAX_VOCABULARY = 1_000_000;

/**
 * The WordPiece vocabulary from `tokenizer.json` (or `vocab.txt`), in llama.cpp's "phantom space"
 * form: a word-initial piece gets "▁" in front, a `##` continuation loses its `##`, special tokens stay.
 */
async function readVocabulary(dir: string, vocabSize: number): Promise<Vocabulary> {
  const byId: (string | undefined)[] = [];
  const special = new Set<string>();
  const tokenizerJson = await readJson(dir, "tokenizer.json");
  if (tokenizerJson !== undefined) {
    const model = (tokenizerJson as { model?: { type?: unknown; vocab?: unknown } }).model;
    if (model?.type !== "WordPiece" || typeof model.vocab !== "object" || model.vocab === null) {
      throw invalid(
        `tokenizer.json: the tokenizer is ${typeof model?.type === "string" ? `"${model.type.slice(0, 40)}"` : "of no type"}; a BERT checkpoint needs a WordPiece tokenizer`,
      );
    }
    for (const [token, id] of Object.entries(model.vocab as Record<string, unknown>)) place(byId, token, id, vocabSize);
    const added = (tokenizerJson as { added_tokens?: unknown }).added_tokens;
    if (Array.isArray(added)) {
      for (const a of added as { id?: unknown; content?: unknown; special?: unknown }[]) {
        if (typeof a?.content !== "string") continue;
        place(byId, a.content, a.id, vocabSize);
        if (a.special === true) special.add(a.content);
      }
    }
  } else {
    const text = await readFile(join(dir, "vocab.txt"), "utf8").catch(() => {
      throw invalid(
        "the checkpoint has neither tokenizer.json nor vocab.txt; a BERT checkpoint needs its WordPiece vocabulary",
      );
    });
    const lines = text.split(/\r?\n/);
    if (lines.at(-1) === "") lines.pop();
    for (const [id, token] of lines.entries()) place(byId, token, id, vocabSize);
  }
  const names = await specialTokenNames(dir);
  const idOf = (role: keyof typeof names, required: boolean): number | undefined => {
    const id = byId.indexOf(names[role]);
    if (id < 0 && required) throw invalid(`the vocabulary has no ${role} token "${names[role].slice(0, 40)}"`);
    if (id >= 0) special.add(names[role]);
    return id < 0 ? undefined : id;
  };
  const ids = {
    cls: idOf("cls", true) as number,
    sep: idOf("sep", true) as number,
    unk: idOf("unk", true) as number,
    pad: idOf("pad", false) ?? 0,
    mask: idOf("mask", false),
  };
  const tokens: string[] = [];
  const types: number[] = [];
  // The embedding matrix has vocab_size rows: ids the tokenizer never produces still need a (unique) token.
  for (let id = 0; id < vocabSize; id++) {
    const token = byId[id];
    if (token === undefined) {
      tokens.push(`[PAD${id}]`);
      types.push(TOKEN_TYPE.unused);
    } else if (special.has(token)) {
      tokens.push(token);
      types.push(TOKEN_TYPE.control);
    } else {
      tokens.push(token.startsWith("##") ? token.slice(2) : `\u2581${token}`);
      types.push(TOKEN_TYPE.normal);
    }
  }
  return { tokens, types, special: ids };
}

function place(byId: (string | undefined)[], token: string, id: unknown, vocabSize: number): void {
  if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= Math.min(vocabSize, MAX_VOCABULARY)) {
    throw invalid(
      `the tokenizer's token id ${String(id).slice(0, 20)} lies outside config.json's vocab_size ${vocabSize}`,
    );
  }
  byId[id] = token;
}

/** The special tokens' texts: tokenizer_config.json's names when it has them, BERT's own otherwise. */
async function specialTokenNames(
  dir: string,
): Promise<{ cls: string; sep: string; unk: string; pad: string; mask: string }> {
  const config = ((await readJson(dir, "tokenizer_config.json")) ?? {}) as Record<string, unknown>;
  const name = (key: string, fallback: string) => {
    const v = config[`${key}_token`];
    if (typeof v === "string") return v;
    if (typeof v === "object" && v !== null && typeof (v as { content?: unknown }).content === "string")
      return (v as { content: string }).content;
    return fallback;
  };
  return {
    cls: name("cls", "[CLS]"),
    sep: name("sep", "[SEP]"),
    unk: name("unk", "[UNK]"),
    pad: name("pad", "[PAD]"),
    mask: name("mask", "[MASK]"),
  };
}

/**
 * The pooling and normalisation sentence-transformers declares: `modules.json` lists the modules,
 * the Pooling module's `config.json` its mode. A checkpoint without `modules.json` (a plain BERT)
 * gets mean pooling, sentence-transformers' own default for such models. Modules llama.cpp
 * cannot apply (Dense projections, max pooling, several modes at once) are refused, since the
 * embeddings would silently differ from the model's.
 */
export async function readSentenceTransformersHead(dir: string): Promise<SentenceTransformersHead> {
  const modules = await readJson(dir, "modules.json");
  if (modules === undefined) return { pooling: "mean", normalize: false, declared: false };
  if (!Array.isArray(modules)) throw invalid("modules.json is not a list of modules");
  let pooling: Pooling | undefined;
  let normalize = false;
  for (const m of modules as { type?: unknown; path?: unknown }[]) {
    const type = typeof m?.type === "string" ? m.type.replace(/^sentence_transformers\.models\./, "") : "";
    if (type === "Transformer") continue;
    if (type === "Normalize") {
      normalize = true;
      continue;
    }
    if (type === "Pooling") {
      pooling = await readPooling(dir, typeof m.path === "string" ? m.path : "1_Pooling");
      continue;
    }
    throw invalid(
      `modules.json: the module "${type.slice(0, 60) || "?"}" is not supported (Transformer, Pooling and Normalize are)`,
    );
  }
  return { pooling: pooling ?? "mean", normalize, declared: true };
}

async function readPooling(dir: string, path: string): Promise<Pooling> {
  const rel = normalize(path);
  // The path comes from the checkpoint: it may not leave its directory.
  if (rel.startsWith("..") || rel.startsWith(sep) || rel.includes(`${sep}..`))
    throw invalid("modules.json: the Pooling module's path leaves the checkpoint directory");
  const config = await readJson(dir, join(rel, "config.json"));
  if (typeof config !== "object" || config === null)
    throw invalid("modules.json names a Pooling module without its config.json");
  const modes = Object.entries(config as Record<string, unknown>)
    .filter(([k, v]) => k.startsWith("pooling_mode_") && v === true)
    .map(([k]) => k.slice("pooling_mode_".length));
  const supported: Record<string, Pooling> = { mean_tokens: "mean", cls_token: "cls", lasttoken: "last" };
  const mode = modes[0];
  if (modes.length !== 1 || mode === undefined || !(mode in supported)) {
    throw invalid(
      `${join(rel, "config.json")}: pooling ${modes.length === 0 ? "mode unset" : modes.join(" + ").slice(0, 80)} is not supported; one of mean_tokens, cls_token or lasttoken is`,
    );
  }
  return supported[mode] as Pooling;
}

/** A JSON file of the checkpoint, or undefined when it has none; malformed JSON is refused. */
async function readJson(dir: string, file: string): Promise<unknown> {
  const text = await readFile(join(dir, file), "utf8").catch((e: NodeJS.ErrnoException) => {
    if (e.code === "ENOENT") return undefined;
    throw invalid(`${file} cannot be read`);
  });
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw invalid(`${file} is not valid JSON`);
  }
}
