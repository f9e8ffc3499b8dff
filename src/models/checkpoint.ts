/**
 * Hugging Face-style checkpoint directories as registry artifacts: which files of a directory (or
 * of a Hub repository) make up a model, the rules for their names, the manifest and its digest,
 * and the metadata read from config.json, tokenizer_config.json and the safetensors headers.
 * Every source (upload, local directory, s3:// prefix, hf:// repository) goes through these.
 */
import { createHash } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import type { ArtifactFile, CheckpointSummary } from "./record.ts";
import { PlatformError } from "../contracts/errors.ts";
import { SafetensorsCheckpoint, SafetensorsError } from "../formats/convert/safetensors.ts";
import { isPipelineFile } from "./pipeline-files.ts";

/** The files a checkpoint is made of, besides the weights (`*.safetensors`): configuration, tokenizer, chat template. */
const CHECKPOINT_FILES = new Set([
  "config.json",
  "generation_config.json",
  "tokenizer.json",
  "tokenizer.model",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "vocab.txt",
  "merges.txt",
  "chat_template.jinja",
  "chat_template.json",
  "model.safetensors.index.json",
  // sentence-transformers: the module list and its settings (the Pooling module's own config lies one level down).
  "modules.json",
  "sentence_bert_config.json",
  "config_sentence_transformers.json",
  // A PEFT LoRA adapter's configuration (its weights are adapter_model.safetensors): src/models/adapter.ts.
  "adapter_config.json",
  // A diffusers pipeline's index; its components' files lie in their folders (pipeline-files.ts).
  "model_index.json",
]);

/** One path segment, no leading dot: nothing that could name a parent, a hidden file or another directory. */
const SAFE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$/;

/**
 * A sentence-transformers module's directory (`1_Pooling`, `2_Normalize`): its position, "_", its name.
 * Only such a directory's `config.json` is taken from below the top level; it declares the pooling.
 */
const MODULE_DIR = /^[0-9]{1,3}_[A-Za-z][A-Za-z0-9]{0,63}$/;

/** Whether a subdirectory's name is a sentence-transformers module's, whose `config.json` belongs to the checkpoint. */
export function isModuleDirectory(name: string): boolean {
  return MODULE_DIR.test(name);
}

function isModuleConfig(path: string): boolean {
  const [dir, file, ...rest] = path.split("/");
  return rest.length === 0 && file === "config.json" && MODULE_DIR.test(dir!);
}

/** More files than any real checkpoint has (a 400B model has a few hundred shards): bounds a listing or an upload. */
export const MAX_CHECKPOINT_FILES = 1024;

/**
 * Whether a file of a directory or repository (its path relative to the top) belongs to the
 * checkpoint: a top-level configuration, tokenizer or safetensors file, or a sentence-transformers
 * module's `<n>_<Name>/config.json`. Other files (README, .git, PyTorch .bin, original/) are left out.
 */
export function isCheckpointFile(path: string): boolean {
  if (isModuleConfig(path) || isPipelineFile(path)) return true;
  return SAFE_NAME.test(path) && (CHECKPOINT_FILES.has(path) || path.endsWith(".safetensors"));
}

/**
 * An uploaded tar entry's name: its path for a checkpoint file (top-level, or a module's config.json),
 * undefined for another file inside a subdirectory (not part of a checkpoint: skipped, never written),
 * a 400 for one that escapes.
 */
export function uploadedEntryName(raw: string): string | undefined {
  const name = raw.replace(/^(\.\/)+/, "");
  if (
    name.includes("/") &&
    !name.startsWith("/") &&
    !name.split("/").includes("..") &&
    !isModuleConfig(name) &&
    !isPipelineFile(name)
  )
    return undefined;
  return checkEntryName(raw);
}

/** A client-given entry name as a checkpoint file name, or a 400 saying why it is refused (the name is quoted, shortened). */
export function checkEntryName(raw: string): string {
  const name = raw.replace(/^(\.\/)+/, "");
  const shown = JSON.stringify(raw.slice(0, 120));
  if (name.startsWith("/"))
    throw invalid(`entry ${shown} is an absolute path; a checkpoint's files are named relative to its directory`);
  if (name.split("/").includes("..")) throw invalid(`entry ${shown} climbs out of the directory ("..")`);
  if (isModuleConfig(name) || isPipelineFile(name)) return name;
  if (name.includes("/"))
    throw invalid(
      `entry ${shown} is in a subdirectory; a checkpoint's files lie at the top of its directory (or are a sentence-transformers module's <n>_<Name>/config.json)`,
    );
  if (!SAFE_NAME.test(name))
    throw invalid(`entry ${shown} is not a plain file name (letters, digits, "_", "-", ".", not starting with ".")`);
  return name;
}

/**
 * The version's digest for a directory: SHA-256 of the manifest written as `sha256sum` prints it
 * (`<sha256>  <path>\n` per file, sorted by path; a module's file as `1_Pooling/config.json`), so
 * `sha256sum <files> | LC_ALL=C sort -k2 | sha256sum` over the checkpoint's files gives the same value.
 */
export function manifestDigest(files: readonly ArtifactFile[]): string {
  const hash = createHash("sha256");
  for (const f of sortManifest(files)) hash.update(`${f.sha256}  ${f.path}\n`);
  return hash.digest("hex");
}

export function sortManifest(files: readonly ArtifactFile[]): ArtifactFile[] {
  return [...files].sort((a, b) => Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)));
}

/** A 400 `invalid_artifact` naming the field at fault (the source, unless said): every kind's checks use it. */
export function invalid(message: string, param = "source"): PlatformError {
  return new PlatformError(400, "invalid_artifact", `${param}: ${message}`, param);
}

/**
 * Checks that `names` make a loadable checkpoint (config.json, a tokenizer, safetensors weights whose
 * index names only present shards) and reads its metadata from the files in `dir`.
 */
export async function summarizeCheckpoint(dir: string, names: readonly string[]): Promise<CheckpointSummary> {
  const have = new Set(names);
  if (!have.has("config.json"))
    throw invalid("the directory has no config.json (a Hugging Face-style checkpoint needs one)");
  // vocab.txt: a WordPiece (BERT) vocabulary, which the BERT converter reads when there is no tokenizer.json.
  if (!have.has("tokenizer.json") && !have.has("tokenizer.model") && !have.has("vocab.txt"))
    throw invalid("the directory has no tokenizer.json, tokenizer.model or vocab.txt");
  if (!have.has("model.safetensors") && !have.has("model.safetensors.index.json")) {
    throw invalid(
      "the directory has no model.safetensors or model.safetensors.index.json (weights must be safetensors, single or sharded)",
    );
  }
  const config = await readJsonObject(dir, "config.json");
  if (!config) throw invalid("config.json is not a JSON object");
  const tokenizerConfig = have.has("tokenizer_config.json")
    ? await readJsonObject(dir, "tokenizer_config.json")
    : undefined;
  let parameters: number | null = null;
  let checkpoint: SafetensorsCheckpoint | undefined;
  try {
    checkpoint = await SafetensorsCheckpoint.open(dir);
    parameters = 0;
    for (const t of checkpoint.tensors.values()) parameters += t.shape.reduce((a, d) => a * d, 1);
  } catch (e) {
    // The reader's messages name checkpoint files and tensors, never bytes of them.
    if (e instanceof SafetensorsError) throw invalid(e.message);
    throw e;
  } finally {
    await checkpoint?.close();
  }
  const text = (v: unknown) => (typeof v === "string" && v !== "" ? v.slice(0, 200) : null);
  const int = (...vs: unknown[]) => {
    const v = vs.find((x) => Number.isSafeInteger(x) && (x as number) > 0);
    return v === undefined ? null : (v as number);
  };
  // Multimodal configs keep the language model's fields under text_config.
  const textConfig =
    typeof config.text_config === "object" && config.text_config !== null
      ? (config.text_config as Record<string, unknown>)
      : {};
  const quantization = config.quantization_config as { quant_method?: unknown } | undefined;
  const architectures = config.architectures;
  return {
    architecture: Array.isArray(architectures) ? text(architectures[0]) : null,
    model_type: text(config.model_type),
    parameters: parameters === null || parameters === 0 ? null : parameters,
    context_length: int(
      config.max_position_embeddings,
      textConfig.max_position_embeddings,
      config.n_positions,
      config.max_seq_len,
      config.seq_length,
    ),
    dtype: text(config.torch_dtype) ?? text(config.dtype) ?? text(textConfig.torch_dtype),
    quantization:
      quantization && typeof quantization === "object" ? (text(quantization.quant_method) ?? "unknown") : null,
    tokenizer:
      text(tokenizerConfig?.tokenizer_class) ??
      ["tokenizer.json", "tokenizer.model", "vocab.txt"].find((f) => have.has(f)) ??
      null,
    chat_template:
      tokenizerConfig?.chat_template !== undefined || have.has("chat_template.jinja") || have.has("chat_template.json"),
  };
}

async function readJsonObject(dir: string, name: string): Promise<Record<string, unknown> | undefined> {
  const path = join(dir, name);
  // Configuration files are small; a huge one is not a configuration file.
  if ((await stat(path)).size > 64 * 1024 * 1024) throw invalid(`${name} is larger than 64 MiB`);
  try {
    const parsed: unknown = JSON.parse(await readFile(path, "utf8"));
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    throw invalid(`${name} is not valid JSON`);
  }
}
