/**
 * LoRA adapters in the registry (docs/adapters.md): a PEFT directory (adapter_config.json +
 * adapter_model.safetensors) registered as a version of its own name, tied to the base version it
 * adapts. Registration reads the adapter and checks it against the base's weights (their names and
 * shapes, read from the base's safetensors headers or GGUF tensor infos) so that an adapter no
 * replica could apply is refused with the reason, before anything is stored.
 */
import { randomUUID } from "node:crypto";
import { readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { PlatformError } from "../contracts/errors.ts";
import type { ObjectStore } from "../storage/store.ts";
import { LLAMA_FAMILY } from "../formats/convert/llama.ts";
import { ggufWeightName, hfWeightName, LoraError, type LoraPair, pairTensors } from "../formats/convert/lora.ts";
import { SafetensorsCheckpoint, SafetensorsError } from "../formats/convert/safetensors.ts";
import { readGgufInfo } from "../formats/gguf/index.ts";
import { localArtifact } from "./materialize.ts";
import type { AdapterSummary, RegisteredVersion, VersionRef } from "./record.ts";

/** The files an adapter version is made of; anything else in its directory (README, tokenizer copies) stays behind. */
export const ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"] as const;

/** What adapter_config.json and the tensors say, checked for what the engines can apply. */
export type AdapterLayout = {
  peftType: string;
  rank: number;
  alpha: number;
  /** The alpha llama.cpp is given (it scales by alpha / rank): rsLoRA's alpha/√r becomes alpha·√r. */
  ggufAlpha: number;
  pairs: (LoraPair & { in: number; out: number })[];
  parameters: number;
  /** adapter_config.json's `base_model_name_or_path`: advisory, reported, never trusted. */
  baseNamed: string | null;
};

function refuse(message: string, param = "source"): PlatformError {
  return new PlatformError(400, "invalid_adapter", `adapter: ${message}`, param);
}

/** Reads and checks the adapter in `dir` (its files already confined and copied there). */
export async function readAdapter(dir: string): Promise<AdapterLayout> {
  const path = join(dir, "adapter_config.json");
  if ((await stat(path)).size > 1024 * 1024) throw refuse("adapter_config.json is larger than 1 MiB");
  let config: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(await readFile(path, "utf8"));
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error();
    config = parsed as Record<string, unknown>;
  } catch {
    throw refuse("adapter_config.json is not a JSON object");
  }
  const peftType = typeof config.peft_type === "string" ? config.peft_type : "";
  if (peftType !== "LORA")
    throw refuse(
      `peft_type is ${JSON.stringify(String(config.peft_type ?? "missing").slice(0, 40))}; only LORA adapters are served`,
    );
  const rank = config.r;
  if (typeof rank !== "number" || !Number.isSafeInteger(rank) || rank <= 0)
    throw refuse("adapter_config.json: r must be a positive integer");
  const alpha = config.lora_alpha ?? rank;
  if (typeof alpha !== "number" || !Number.isFinite(alpha))
    throw refuse("adapter_config.json: lora_alpha must be a number");
  if (config.use_dora === true)
    throw refuse("use_dora: DoRA adapters are not served (llama.cpp and vLLM apply plain LoRA)");
  const patterned = (v: unknown) => typeof v === "object" && v !== null && Object.keys(v).length > 0;
  if (patterned(config.alpha_pattern))
    throw refuse("alpha_pattern: per-module alphas are not served; one lora_alpha for every module");
  if (Array.isArray(config.modules_to_save) && config.modules_to_save.length > 0)
    throw refuse("modules_to_save: full copies of modules are not served; only LoRA pairs");
  if (config.bias !== undefined && config.bias !== "none")
    throw refuse(
      `bias "${String(config.bias).slice(0, 20)}": adapters that train biases are not served; use bias "none"`,
    );
  const rslora = config.use_rslora === true;
  let checkpoint: SafetensorsCheckpoint;
  try {
    checkpoint = await SafetensorsCheckpoint.open(dir, "adapter_model.safetensors");
  } catch (e) {
    throw refuse(e instanceof SafetensorsError ? e.message : "adapter_model.safetensors cannot be read");
  }
  try {
    let pairs: LoraPair[];
    try {
      pairs = pairTensors(checkpoint.tensors.keys());
    } catch (e) {
      if (e instanceof LoraError) throw refuse(e.message);
      throw e;
    }
    if (pairs.length === 0) throw refuse("adapter_model.safetensors holds no lora_A/lora_B pairs");
    let parameters = 0;
    const shaped = pairs.map((p) => {
      const a = checkpoint.info(p.a);
      const b = checkpoint.info(p.b);
      for (const t of [a, b])
        if (!["F32", "F16", "BF16"].includes(t.dtype))
          throw refuse(`${t.name}: dtype ${t.dtype}; adapter weights must be F32, F16 or BF16`);
      if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[0] !== b.shape[1])
        throw refuse(
          `${p.base}: lora_A is [${a.shape.join(", ")}] and lora_B [${b.shape.join(", ")}]; they must be [r, in] and [out, r] with the same r`,
        );
      parameters += a.shape[0]! * (a.shape[1]! + b.shape[0]!);
      return { ...p, rank: a.shape[0]!, in: a.shape[1]!, out: b.shape[0]! };
    });
    return {
      peftType,
      rank,
      alpha,
      ggufAlpha: rslora ? alpha * Math.sqrt(rank) : alpha,
      pairs: shaped,
      parameters,
      baseNamed:
        typeof config.base_model_name_or_path === "string" ? config.base_model_name_or_path.slice(0, 200) : null,
    };
  } finally {
    await checkpoint.close();
  }
}

/** The base's weights as an adapter is checked against them: transformers names, PyTorch shapes ([out, in]). */
export type BaseWeights = { architecture: string | null; shapes: ReadonlyMap<string, readonly number[]> };

/**
 * Checks every pair against the base: the weight exists, lora_A is [r, in] and lora_B [out, r] for
 * its [out, in]; and on llama.cpp, that the base is a family the GGUF adapter converter knows and
 * that each weight is one llama.cpp takes LoRA pairs for.
 */
export function checkAgainstBase(layout: AdapterLayout, base: RegisteredVersion, weights: BaseWeights): void {
  const ref = `${base.name}@${base.version}`;
  if (base.framework === "llamacpp") {
    const arch = weights.architecture;
    const known = arch !== null && (Object.hasOwn(LLAMA_FAMILY, arch) || arch === "llama" || arch === "qwen2");
    if (!known)
      throw refuse(
        `the base ${ref} is a ${arch ?? "model of unknown architecture"}; llama.cpp adapters are served on llama-family bases (${Object.keys(LLAMA_FAMILY).join(", ")}, or GGUF llama/qwen2)`,
        "base",
      );
  }
  for (const p of layout.pairs) {
    const shape = weights.shapes.get(p.base);
    if (!shape) {
      const module = /\.([a-z_]+)\.weight$/.exec(p.base)?.[1] ?? p.base;
      throw refuse(
        `target module ${module} (${p.base}) does not exist in the base ${ref}; is this adapter for another model?`,
        "base",
      );
    }
    if (base.framework === "llamacpp" && !ggufWeightName(p.base))
      throw refuse(`${p.base}: llama.cpp takes LoRA pairs for the attention and MLP projections only`, "base");
    if (shape.length !== 2 || shape[0] !== p.out || shape[1] !== p.in) {
      throw refuse(
        `${p.base}: the adapter's lora_A is [${p.rank}, ${p.in}] and lora_B [${p.out}, ${p.rank}], but the base ${ref}'s weight is [${shape.join(", ")}] (lora_A must be [r, in], lora_B [out, r]); is this adapter for another model?`,
        "base",
      );
    }
  }
}

/** The record's summary of an adapter checked against `base`. */
export function adapterSummary(layout: AdapterLayout, base: VersionRef): AdapterSummary {
  const modules = new Set(layout.pairs.map((p) => /\.([a-z_]+)\.weight$/.exec(p.base)?.[1] ?? p.base));
  return {
    base: { name: base.name, version: base.version },
    peft_type: layout.peftType,
    rank: layout.rank,
    alpha: layout.alpha,
    target_modules: [...modules].sort(),
    parameters: layout.parameters,
  };
}

/**
 * The base's weight names and shapes: a checkpoint's from its safetensors headers (read from the
 * store's first bytes of each shard, never the weights), a GGUF file's from its tensor infos
 * (mapped back to transformers names). `cacheDir`: where a GGUF base from a remote store is copied for the read.
 */
export async function readBaseWeights(
  store: ObjectStore,
  cacheDir: string,
  base: RegisteredVersion,
): Promise<BaseWeights> {
  const shapes = new Map<string, number[]>();
  if (base.kind === "hf") {
    for (const f of base.manifest ?? []) {
      if (!f.path.endsWith(".safetensors")) continue;
      const header = await readSafetensorsHeader(store, `${base.artifact}/${f.path}`);
      for (const [name, entry] of Object.entries(header)) {
        const shape = (entry as { shape?: unknown }).shape;
        if (name !== "__metadata__" && Array.isArray(shape)) shapes.set(name, shape as number[]);
      }
    }
    return { architecture: base.checkpoint?.architecture ?? null, shapes };
  }
  // A remote store's GGUF is copied to a directory of its own for the read, then removed: the gateway keeps no model files.
  const temp = store.localPath(base.artifact) ? undefined : join(cacheDir, randomUUID());
  let info: Awaited<ReturnType<typeof readGgufInfo>>;
  try {
    info = await readGgufInfo(await localArtifact(store, temp ?? cacheDir, base)).catch(() => {
      throw refuse(`the base ${base.name}@${base.version} is not a GGUF file whose tensors can be read`, "base");
    });
  } finally {
    if (temp) await rm(temp, { recursive: true, force: true });
  }
  for (const t of info.tensors) {
    const name = hfWeightName(t.name);
    if (name) shapes.set(name, [...t.dims].reverse());
  }
  return { architecture: base.gguf?.architecture ?? null, shapes };
}

/** A safetensors file's JSON header from the store, reading only its first 8 + N bytes. */
async function readSafetensorsHeader(store: ObjectStore, key: string): Promise<Record<string, unknown>> {
  const stream: Readable = await store.get(key);
  const chunks: Buffer[] = [];
  let have = 0;
  let need = 8;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      have += chunk.length;
      if (need === 8 && have >= 8) {
        const length = Number(Buffer.concat(chunks).readBigUInt64LE(0));
        if (length > 100 * 1024 * 1024) break;
        need = 8 + length;
      }
      if (need > 8 && have >= need) break;
    }
  } finally {
    stream.destroy();
  }
  const bytes = Buffer.concat(chunks);
  if (need <= 8 || bytes.length < need) throw new Error(`${key}: not a safetensors file`);
  try {
    return JSON.parse(bytes.subarray(8, need).toString("utf8")) as Record<string, unknown>;
  } catch {
    throw new Error(`${key}: the safetensors header is not valid JSON`);
  }
}
