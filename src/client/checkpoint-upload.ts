/**
 * A local checkpoint directory as a client uploads it (`platform training submit --source <dir>`):
 * the files the registry takes from it, and how many bytes their tar stream (src/models/tar.ts) will be.
 */
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { PlatformError } from "../contracts/errors.ts";
import { isCheckpointFile, isModuleDirectory } from "../models/checkpoint.ts";
import { isPipelineComponent, isPipelineFile } from "../models/pipeline-files.ts";

export type UploadFile = { name: string; size: number };

/**
 * The directory's files, as the registry takes them (config, tokenizer, safetensors,
 * sentence-transformers modules' `<n>_<Name>/config.json`; the rest, such as README.md or .git,
 * stays behind). Links are followed: the directory is the user's own (a Hugging Face cache
 * snapshot is all links). Neither a checkpoint nor an adapter: a 400 naming the directory.
 */
export function checkpointFiles(dir: string): UploadFile[] {
  const files: UploadFile[] = [];
  for (const entry of readdirSync(dir).sort()) {
    // A diffusers pipeline's component folder (unet/, vae/, ...): its files (pipeline-files.ts).
    if (isPipelineComponent(entry) && statSync(join(dir, entry), { throwIfNoEntry: false })?.isDirectory()) {
      for (const inner of readdirSync(join(dir, entry)).sort()) {
        const info = statSync(join(dir, entry, inner), { throwIfNoEntry: false });
        if (isPipelineFile(`${entry}/${inner}`) && info?.isFile())
          files.push({ name: `${entry}/${inner}`, size: info.size });
      }
      continue;
    }
    const name = isModuleDirectory(entry) ? `${entry}/config.json` : entry;
    if (!isCheckpointFile(name)) continue;
    const info = statSync(join(dir, name), { throwIfNoEntry: false });
    if (info?.isFile()) files.push({ name, size: info.size });
  }
  // A PEFT adapter directory goes as its two files (a training output's tokenizer copies and README stay behind).
  if (files.some((f) => f.name === "adapter_config.json")) {
    return files.filter((f) => f.name === "adapter_config.json" || f.name === "adapter_model.safetensors");
  }
  if (files.some((f) => f.name === "model_index.json")) return files;
  if (!files.some((f) => f.name === "config.json"))
    throw new PlatformError(
      400,
      "invalid_checkpoint",
      `${dir}: a directory must be a Hugging Face-style checkpoint (config.json, tokenizer.json or tokenizer.model, *.safetensors) or a PEFT adapter (adapter_config.json, adapter_model.safetensors); it has neither config.json nor adapter_config.json`,
    );
  return files;
}

/** The tar stream's length: each file's 512-byte header and its data padded to 512-byte blocks, then two zero blocks. */
export function tarSize(files: readonly UploadFile[]): number {
  return files.reduce((n, f) => n + 512 + Math.ceil(f.size / 512) * 512, 1024);
}
