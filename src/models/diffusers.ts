/**
 * Registering a diffusers pipeline directory (docs/images.md): the import's scratch copy (fetched by
 * registry/import.ts from any source) is checked — model_index.json names a pipeline class and its
 * components, each component folder holds what it needs (a config, safetensors weights, a
 * scheduler config, tokenizer files) — summarised (pipeline class, default size, sizes taken,
 * scheduler, dtype) and stored as an "hf" directory version with task "image", served by the
 * diffusers engine.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { SafetensorsCheckpoint, SafetensorsError } from "../formats/convert/safetensors.ts";
import { invalid } from "./checkpoint.ts";
import { type ImportDeps, type ImportRequest, requireKind, saveVersion, storeFetched } from "./save.ts";
import type { PipelineSummary, RegisteredVersion } from "./record.ts";

const DTYPES: Record<string, string> = { F32: "float32", F16: "float16", BF16: "bfloat16", F64: "float64" };

export async function importPipeline(
  deps: ImportDeps,
  req: ImportRequest,
  dir: string,
  files: ReadonlyMap<string, { size: number; sha256: string }>,
): Promise<RegisteredVersion> {
  // llamacpp is the registration default: a pipeline goes to the engine that runs pipelines. vLLM is a choice.
  if (req.framework === "vllm")
    throw invalid(
      "vLLM does not run diffusers pipelines (model_index.json); register it with --framework diffusers",
      "framework",
    );
  if (req.base !== undefined)
    throw invalid("only an adapter has a base; a diffusers pipeline is registered without --base", "base");
  if (req.task !== undefined && req.task !== "image")
    throw invalid(`a diffusers pipeline makes images: --task ${req.task} cannot serve it (use --task image)`, "task");
  await requireKind(deps, req.name, "model");
  const names = [...files.keys()];
  const pipeline = await summarizePipeline(dir, names);
  return saveVersion(
    deps.ctl,
    { ...req, framework: "diffusers" },
    { ...(await storeFetched(deps, req, dir, files, names)), pipeline, task: "image" },
  );
}

type Json = Record<string, unknown>;

/** Checks the directory (its files `names`, relative to `dir`) makes a loadable pipeline, and reads what it is. */
export async function summarizePipeline(dir: string, names: readonly string[]): Promise<PipelineSummary> {
  const index = await readJson(dir, "model_index.json");
  const pipelineClass = index._class_name;
  if (typeof pipelineClass !== "string" || !/^[A-Za-z0-9_]{1,100}$/.test(pipelineClass))
    throw invalid("model_index.json has no _class_name naming the pipeline class");
  const components: [string, string][] = [];
  for (const [name, value] of Object.entries(index)) {
    if (name.startsWith("_") || !Array.isArray(value)) continue;
    const [library, cls] = value as unknown[];
    if (typeof library === "string" && typeof cls === "string") components.push([name, cls]);
  }
  const have = new Set(names);
  const inFolder = (c: string) => names.filter((n) => n.startsWith(`${c}/`));
  for (const [name, cls] of components) {
    const folder = inFolder(name);
    if (folder.length === 0)
      throw invalid(`model_index.json names the component ${name} (${cls}), but the directory has no ${name}/ folder`);
    if (/Scheduler$/.test(cls)) {
      if (!have.has(`${name}/scheduler_config.json`)) throw invalid(`${name}/ has no scheduler_config.json`);
    } else if (/Tokenizer/.test(cls)) {
      if (!folder.some((n) => /\/(tokenizer\.json|vocab\.json|spiece\.model|tokenizer\.model)$/.test(n)))
        throw invalid(`${name}/ has no tokenizer files (tokenizer.json, vocab.json or a .model)`);
    } else if (!/(FeatureExtractor|ImageProcessor)$/.test(cls)) {
      if (!have.has(`${name}/config.json`)) throw invalid(`${name}/ has no config.json`);
      if (!folder.some((n) => n.endsWith(".safetensors")))
        throw invalid(
          `${name}/ has no safetensors weights (PyTorch .bin weights are not taken: save the pipeline with safe_serialization=True)`,
        );
    }
  }
  const denoiser = components.find(([n]) => n === "unet" || n === "transformer")?.[0];
  if (denoiser === undefined) throw invalid("model_index.json names no unet or transformer component");
  if (!components.some(([n]) => n === "vae")) throw invalid("model_index.json names no vae component");
  const denoiserConfig = await readJson(dir, `${denoiser}/config.json`);
  const vaeConfig = await readJson(dir, "vae/config.json");
  const schedulerName = components.find(([n]) => n === "scheduler")?.[1] ?? null;

  const vaeBlocks = Array.isArray(vaeConfig.block_out_channels) ? vaeConfig.block_out_channels.length : 4;
  const vaeScale = 2 ** Math.max(0, vaeBlocks - 1);
  const downBlocks = Array.isArray(denoiserConfig.down_block_types) ? denoiserConfig.down_block_types.length : 0;
  const patch = Number.isSafeInteger(denoiserConfig.patch_size) ? (denoiserConfig.patch_size as number) : 2;
  const multiple = vaeScale * (denoiser === "unet" ? 2 ** Math.max(0, downBlocks - 1) : patch);
  const sample = denoiserConfig.sample_size;
  const [sh, sw] = Array.isArray(sample) ? sample : [sample, sample];
  const side = (v: unknown) =>
    Number.isSafeInteger(v) && (v as number) > 0 ? (v as number) * vaeScale : denoiser === "unet" ? 512 : 1024;
  const width = side(sw);
  const height = side(sh);

  let parameters = 0;
  let dtype: string | null = null;
  for (const file of names.filter((n) => n.endsWith(".safetensors"))) {
    let weights: SafetensorsCheckpoint | undefined;
    try {
      weights = await SafetensorsCheckpoint.open(dir, file);
      for (const t of weights.tensors.values()) {
        parameters += t.shape.reduce((a, d) => a * d, 1);
        if (dtype === null && file.startsWith(`${denoiser}/`)) dtype = DTYPES[t.dtype] ?? t.dtype.toLowerCase();
      }
    } catch (e) {
      if (e instanceof SafetensorsError) throw invalid(e.message);
      throw e;
    } finally {
      await weights?.close();
    }
  }
  return {
    pipeline_class: pipelineClass,
    default_width: width,
    default_height: height,
    size_multiple: multiple,
    max_side: 2 * Math.max(width, height),
    scheduler: schedulerName,
    dtype,
    components: components.map(([n]) => n).sort(),
    parameters: parameters > 0 ? parameters : null,
  };
}

async function readJson(dir: string, name: string): Promise<Json> {
  const path = join(dir, name);
  const info = await stat(path).catch(() => undefined);
  if (!info) throw invalid(`the pipeline has no ${name}`);
  if (info.size > 16 * 1024 * 1024) throw invalid(`${name} is larger than 16 MiB`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(path, "utf8"));
  } catch {
    throw invalid(`${name} is not valid JSON`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw invalid(`${name} is not a JSON object`);
  return parsed as Json;
}
