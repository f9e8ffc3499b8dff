/**
 * Converting a Hugging Face-style checkpoint directory (config.json, tokenizer, safetensors) to one
 * GGUF file llama.cpp loads. Each supported family has its converter beside this file; this module
 * picks one by `config.json`'s `architectures[0]` and refuses the others, naming those it knows.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { PlatformError } from "../../contracts/errors.ts";
import type { ConversionResult, Converter } from "./converter.ts";

export type { ConversionResult } from "./converter.ts";

/** architectures[0] → converter. Each family registers its names here. */
const CONVERTERS: Record<string, () => Promise<Converter>> = {
  ...Object.fromEntries(
    ["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM"].map((a) => [
      a,
      () => import("./llama.ts").then((m) => m.llamaConverter),
    ]),
  ),
  BertModel: async () => (await import("./bert.ts")).convertBert,
  BertForMaskedLM: async () => (await import("./bert.ts")).convertBert,
};

export function supportedArchitectures(): string[] {
  return Object.keys(CONVERTERS).sort();
}

/**
 * Converts the checkpoint in `dir` to a GGUF file at `outPath`. A 400 `unsupported_architecture`
 * names the supported ones; a checkpoint that cannot be read is a 400 `invalid_artifact` saying why.
 */
export async function convertCheckpoint(dir: string, outPath: string): Promise<ConversionResult> {
  const config = await readConfig(dir);
  const architecture =
    Array.isArray(config.architectures) && typeof config.architectures[0] === "string"
      ? config.architectures[0]
      : undefined;
  requireConvertible(architecture);
  return (await CONVERTERS[architecture]!())(dir, config, outPath);
}

/**
 * Throws the 400 `unsupported_architecture` naming the supported ones unless a checkpoint of
 * `architecture` (config.json's `architectures[0]`) can be converted: the registry asks before it
 * stores a checkpoint for llama.cpp, so that no version is registered that no replica could load.
 */
export function requireConvertible(architecture: string | null | undefined): asserts architecture is string {
  if (architecture != null && Object.hasOwn(CONVERTERS, architecture)) return;
  throw new PlatformError(
    400,
    "unsupported_architecture",
    `config.json: ${architecture == null ? "no architectures[0]" : `the architecture "${architecture.slice(0, 80)}"`} cannot be converted to GGUF for llama.cpp; supported: ${supportedArchitectures().join(", ")} (or bring a GGUF file, or register it with --framework vllm)`,
    "source",
  );
}

async function readConfig(dir: string): Promise<Record<string, unknown>> {
  const text = await readFile(join(dir, "config.json"), "utf8").catch(() => {
    throw new PlatformError(
      400,
      "invalid_artifact",
      "the checkpoint has no config.json (a Hugging Face-style directory needs one)",
      "source",
    );
  });
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new PlatformError(400, "invalid_artifact", "config.json is not a JSON object", "source");
}
