/**
 * The `vllm serve` command line a deployment asks for: pure, so the mapping in docs/engines.md
 * ("How deployment fields map to `vllm serve` flags") is tested without a GPU. The fields it
 * maps are the ones `VLLM` in src/contracts/engines.ts declares applied; `status` reports the rest.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import type { DeploymentConfig, Resources, Runtime } from "../../src/contracts/deployment.ts";
import { DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, notAppliedBy, VLLM } from "../../src/contracts/engines.ts";

export type VllmArgsOptions = {
  /** A Hugging Face style model directory (or anything `vllm serve` accepts as its model). */
  modelPath: string;
  runtime: Runtime;
  resources: Resources;
  /** The name vLLM answers to; requests carry it as `model`. */
  servedName: string;
  port: number;
  /** The checkpoint's own quantization (see `checkpointQuantization`); when set, `runtime.quantization` is not passed. */
  checkpointQuantization?: string;
  /** Enable LoRA even without `runtime.max_loras`: adapters of this version are registered (workers/adapters.ts `hasAdapters`). */
  lora?: boolean;
};

/** The ranks vLLM's --max-lora-rank accepts; a deployment's runtime.max_lora_rank is rounded up to one. */
export const VLLM_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512] as const;

/**
 * `runtime.quantization` → `--quantization`. Both are vLLM's in-flight methods,
 * the only ones that work on an unquantized checkpoint without a calibration
 * step: `fp8` (8-bit weights, W8A8 on Ada/Hopper, weight-only FP8 on
 * Turing/Ampere) and `bitsandbytes` (4-bit NF4 weights). vLLM's integer INT8
 * and INT4 (W8A8, AWQ, GPTQ) need checkpoints quantized beforehand, which
 * vLLM recognises from their config.json by itself.
 */
export const VLLM_QUANTIZATION = { int8: "fp8", int4: "bitsandbytes" } as const;

export function vllmArgs(options: VllmArgsOptions): string[] {
  const { runtime: r, resources } = options;
  // `vllm serve <model>`: the bare `vllm <model>` form is refused as an unknown subcommand.
  const args = [
    "serve",
    options.modelPath,
    "--host",
    "127.0.0.1",
    "--port",
    String(options.port),
    "--served-model-name",
    options.servedName,
  ];
  if (r.max_model_len !== undefined) args.push("--max-model-len", String(r.max_model_len));
  if (r.gpu_memory_utilization !== undefined) args.push("--gpu-memory-utilization", String(r.gpu_memory_utilization));
  const tp = tensorParallelSize(r, resources);
  if (tp !== undefined) args.push("--tensor-parallel-size", String(tp));
  if (r.dtype !== undefined) args.push("--dtype", r.dtype);
  // Asking vLLM to quantize an already quantized checkpoint is an error at start-up.
  if (r.quantization !== undefined && options.checkpointQuantization === undefined) {
    args.push("--quantization", VLLM_QUANTIZATION[r.quantization]);
  }
  if (r.speculative_model !== undefined) {
    // No "method": vLLM detects EAGLE/Medusa/MLP heads from the draft's config and otherwise uses it as a draft model.
    const speculative: Record<string, unknown> = { model: r.speculative_model };
    if (r.num_speculative_tokens !== undefined) speculative.num_speculative_tokens = r.num_speculative_tokens;
    args.push("--speculative-config", JSON.stringify(speculative));
  }
  // LoRA adapters (docs/adapters.md), loaded through /v1/load_lora_adapter on first use.
  if (options.lora || r.max_loras !== undefined || r.max_lora_rank !== undefined) {
    const rank = r.max_lora_rank ?? DEFAULT_MAX_LORA_RANK;
    const allowed = VLLM_LORA_RANKS.find((v) => v >= rank) ?? VLLM_LORA_RANKS.at(-1)!;
    args.push(
      "--enable-lora",
      "--max-loras",
      String(r.max_loras ?? DEFAULT_MAX_LORAS),
      "--max-lora-rank",
      String(allowed),
    );
  }
  // The worker never sends more than `parallel` requests at once; vLLM's larger default only reserves memory for nothing.
  args.push("--max-num-seqs", String(resources.parallel));
  // Prefix-affine dispatch sends a conversation's turns to this replica (src/queue/lanes.ts): vLLM's
  // own prefix cache reuses them; a job's priority band reaches vLLM's scheduler (src/queue/fair-share.ts).
  args.push("--enable-prefix-caching", "--scheduling-policy", "priority");
  // The health poll and every request would otherwise print an access-log line. (Request logging is off by default in current vLLM, and its old --disable-log-requests flag is gone.)
  args.push("--disable-uvicorn-access-log");
  return args;
}

/**
 * `runtime.tensor_parallel_size` when set; otherwise every GPU of the replica
 * (`resources.gpu` > 1), since a replica that was given several GPUs and used
 * one would waste the rest.
 */
export function tensorParallelSize(runtime: Runtime, resources: Resources): number | undefined {
  if (runtime.tensor_parallel_size !== undefined) return runtime.tensor_parallel_size;
  if (resources.gpu !== undefined && resources.gpu > 1) return resources.gpu;
  return undefined;
}

/** The fields a vLLM replica does not apply itself, for `status` to report. */
export function notAppliedByVllm(config: DeploymentConfig): string[] {
  return notAppliedBy(VLLM, config);
}

const HfConfig = z.object({
  quantization_config: z.looseObject({ quant_method: z.string().optional() }).optional(),
});

/**
 * The quantization a checkpoint already carries ("gguf", "awq", …), or undefined for full-precision
 * weights. The one input to the flags that is read from disk, kept apart from `vllmArgs` so that stays pure.
 */
export async function checkpointQuantization(modelPath: string): Promise<string | undefined> {
  if (modelPath.toLowerCase().endsWith(".gguf")) return "gguf";
  let text: string;
  try {
    text = await readFile(join(modelPath, "config.json"), "utf8");
  } catch {
    return undefined; // not a local directory (e.g. a hub id): vLLM decides
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = HfConfig.safeParse(json);
  const q = parsed.success ? parsed.data.quantization_config : undefined;
  return q === undefined ? undefined : (q.quant_method ?? "unknown");
}
