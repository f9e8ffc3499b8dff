/**
 * What each engine does with a deployment's fields, one entry per engine. The gateway needs it
 * (`status` reports what a replica will not apply, the prompt bound needs the default context)
 * and so do the drivers in workers/engines/, which build on their own entry. It lives here, not
 * beside the drivers, so the gateway never loads an engine (node-llama-cpp) to know this.
 */
import { createHash } from "node:crypto";
import type { DeploymentConfig, Framework, Resources, Runtime } from "./deployment.ts";
import { queueName } from "./naming.ts";

/**
 * The deployment fields an engine is given. replicas, the queue limits and autoscaling are the
 * platform's own and always apply, whichever engine serves.
 */
export type EngineField =
  | `runtime.${keyof Runtime & string}`
  | `resources.${keyof Pick<Resources, "gpu" | "gpu_type" | "memory" | "cpu" | "parallel"> & string}`;

/** true: applied; false: stored but not applied; a function: whether this config's value is applied. */
export type Applies = boolean | ((config: DeploymentConfig) => boolean);

export type EngineDescriptor = {
  readonly framework: Framework;
  /**
   * Every engine field, so a field added to the schema cannot be forgotten by an engine (the
   * type demands an answer). Listed in the order `status` reports those not applied; a field
   * the deployment leaves unset is never reported.
   */
  readonly fields: Readonly<Record<EngineField, Applies>>;
  /** Context per sequence when `runtime.max_model_len` is unset: the model's trained length, capped at this (none: uncapped). */
  readonly defaultContextCap?: number;
};

/**
 * node-llama-cpp (workers/engines/llamacpp.ts): the GGUF fixes precision, except that `runtime.quantization` has
 * the replica load the platform's own Q8_0/Q4_0 copy of it (src/formats/quantize/); GPU memory sizing has no
 * counterpart there.
 */
export const LLAMACPP: EngineDescriptor = {
  framework: "llamacpp",
  fields: {
    "runtime.gpu_memory_utilization": false,
    "runtime.max_model_len": true,
    // One process, one context: a single "shard" is what it does anyway.
    "runtime.tensor_parallel_size": (c) => c.runtime.tensor_parallel_size === 1,
    // The GGUF's own weights are used; "auto" asks for nothing more, float32 for a float32 KV cache and attention.
    "runtime.dtype": (c) => ["auto", "float32", "float"].includes(c.runtime.dtype ?? "auto"),
    "runtime.quantization": true,
    // A registered draft model with the model's vocabulary (node-llama-cpp's DraftSequenceTokenPredictor).
    "runtime.speculative_model": true,
    "runtime.num_speculative_tokens": (c) => c.runtime.speculative_model !== undefined,
    // One context per loaded adapter beside the base's (workers/engines/llamacpp-adapters.ts); larger ranks refused.
    "runtime.max_loras": true,
    "runtime.max_lora_rank": true,
    // gpu > 0 asks node-llama-cpp for GPU offload (CUDA, Vulkan or Metal, whichever the node has); a replica on a
    // node without one runs on the CPU and logs that it does (workers/engines/llamacpp.ts).
    "resources.gpu": true,
    "resources.gpu_type": false,
    "resources.memory": false,
    "resources.cpu": true,
    "resources.parallel": true,
  },
  // The KV cache grows with context × parallel: a model's full trained context (often 32k+) would take most of a CPU node's memory.
  defaultContextCap: 4096,
};

/** `vllm serve` (workers/engines/vllm-flags.ts maps the applied fields to its flags). */
export const VLLM: EngineDescriptor = {
  framework: "vllm",
  fields: {
    "runtime.gpu_memory_utilization": true,
    "runtime.max_model_len": true,
    "runtime.tensor_parallel_size": true,
    "runtime.dtype": true,
    "runtime.quantization": true,
    "runtime.speculative_model": true,
    // Only a draft model turns speculation on; a token count alone has nothing to speculate with.
    "runtime.num_speculative_tokens": (c) => c.runtime.speculative_model !== undefined,
    // --enable-lora --max-loras --max-lora-rank (workers/engines/vllm-flags.ts).
    "runtime.max_loras": true,
    "runtime.max_lora_rank": true,
    // Placement, not engine settings: the Kubernetes backend turns these into requests and node selectors.
    "resources.cpu": false,
    "resources.memory": false,
    "resources.gpu_type": false,
    "resources.gpu": true,
    "resources.parallel": true,
  },
};

/**
 * Hugging Face diffusers (workers/engines/diffusers.ts): a Python child that runs the pipeline with torch.
 * Text-model fields have no counterpart in a diffusion pipeline.
 */
export const DIFFUSERS: EngineDescriptor = {
  framework: "diffusers",
  fields: {
    "runtime.gpu_memory_utilization": false,
    "runtime.max_model_len": false,
    "runtime.tensor_parallel_size": (c) => c.runtime.tensor_parallel_size === 1,
    // torch_dtype of from_pretrained: auto is float16 on a GPU, float32 on the CPU.
    "runtime.dtype": true,
    "runtime.quantization": false,
    "runtime.speculative_model": false,
    "runtime.num_speculative_tokens": false,
    "runtime.max_loras": false,
    "runtime.max_lora_rank": false,
    // gpu > 0: CUDA through torch where the node has it, else the CPU (the replica logs which).
    "resources.gpu": true,
    "resources.gpu_type": false,
    "resources.memory": false,
    // torch's intra-op threads.
    "resources.cpu": true,
    // Images one replica holds at once; the child makes them one pipeline call at a time (PLATFORM_IMAGES_MAX_BATCH).
    "resources.parallel": true,
  },
};

export const ENGINES: Readonly<Record<Framework, EngineDescriptor>> = {
  llamacpp: LLAMACPP,
  vllm: VLLM,
  diffusers: DIFFUSERS,
};

/** The fields this deployment sets that `engine` does not honour, for `status` to report. */
export function notAppliedBy(engine: EngineDescriptor, config: DeploymentConfig): string[] {
  const out: string[] = [];
  for (const [field, applies] of Object.entries(engine.fields) as [EngineField, Applies][]) {
    if (fieldValue(config, field) === undefined) continue;
    if (!(typeof applies === "function" ? applies(config) : applies)) out.push(field);
  }
  return out;
}

/** Fields the endpoint's engine cannot honour here, for `status` to report. */
export function notApplied(framework: Framework, config: DeploymentConfig): string[] {
  return notAppliedBy(ENGINES[framework], config);
}

function fieldValue(config: DeploymentConfig, field: EngineField): unknown {
  const dot = field.indexOf(".");
  const section = field.slice(0, dot) as "runtime" | "resources";
  return (config[section] as Record<string, unknown>)[field.slice(dot + 1)];
}

/**
 * What sets an endpoint's replicas apart from other endpoints of the same model version in how they
 * answer: the weights they load (`runtime.quantization`), their precision (`runtime.dtype`), the
 * longest request they take (`runtime.max_model_len`) and how they decode (a draft model for
 * speculative decoding). Endpoints that differ in it get queues of their own (naming.ts
 * `queueName`), so one endpoint's requests are never answered by another's replicas; "" (the
 * default queue of the version) when none is set.
 */
export function servingVariant(config: DeploymentConfig): string {
  const r = config.runtime;
  // The draft is a name, a path or a Hugging Face id: hashed, so no character of it reaches a Redis key.
  const draft =
    r.speculative_model === undefined
      ? ""
      : `draft${createHash("sha256")
          .update(`${r.speculative_model}\n${r.num_speculative_tokens ?? ""}`)
          .digest("hex")
          .slice(0, 8)}`;
  const parts = [
    r.quantization !== undefined ? r.quantization : "",
    r.dtype !== undefined && r.dtype !== "auto" ? r.dtype : "",
    r.max_model_len !== undefined ? `ctx${r.max_model_len}` : "",
    draft,
  ];
  return parts.filter((p) => p !== "").join("-");
}

/** Adapters a replica keeps loaded when `runtime.max_loras` is unset (vLLM's default is 1; more suits small adapters). */
export const DEFAULT_MAX_LORAS = 4;
/** The largest adapter rank taken when `runtime.max_lora_rank` is unset (vLLM's default is 16; 64 covers common fine-tunes). */
export const DEFAULT_MAX_LORA_RANK = 64;

/** The queue an endpoint's replicas serve and its requests go to. */
export function endpointQueueName(endpoint: { config: DeploymentConfig; version: string }): string {
  return queueName(endpoint.config.model.name, endpoint.version, servingVariant(endpoint.config));
}
