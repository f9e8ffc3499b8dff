/**
 * The deployment configuration document (the seed's YAML) and its validation.
 * Every field of the seed is accepted; fields the chosen engine cannot honour
 * are kept and reported by `status` as not applied (which those are: engines.ts).
 */
import { z } from "zod";
import { DURATION_ERROR, parseDuration } from "./duration.ts";

/** A name (model, version, adapter) without anchors, for patterns that join several, such as `<name>@<version>`. */
export const NAME_PART = "[A-Za-z0-9][A-Za-z0-9._-]{0,62}";
export const NAME_PATTERN = new RegExp(`^${NAME_PART}$`);
/** A version is named as a model is. */
export const VERSION_PATTERN = NAME_PATTERN;

export const ModelName = z
  .string()
  .regex(NAME_PATTERN, 'expected letters, digits, ".", "_" or "-" (1-63 characters, starting with a letter or digit)');
export const ModelVersion = z.string().regex(VERSION_PATTERN, 'expected a version such as "v1", or "latest"');

export const Framework = z.enum(["llamacpp", "vllm", "diffusers"]);
export type Framework = z.infer<typeof Framework>;

const memory = z.string().regex(/^\d+(\.\d+)?(Gi|Mi)$/, 'expected "<n>Gi" (or "<n>Mi")');

export const Runtime = z
  .object({
    gpu_memory_utilization: z.number().gt(0).max(1).optional(),
    max_model_len: z.number().int().positive().optional(),
    tensor_parallel_size: z.number().int().positive().optional(),
    dtype: z.enum(["auto", "float16", "bfloat16", "float32", "half", "float"]).optional(),
    quantization: z.enum(["int8", "int4"]).optional(),
    speculative_model: z.string().optional(),
    num_speculative_tokens: z.number().int().positive().optional(),
    /**
     * LoRA adapters (docs/adapters.md) one replica keeps loaded at once, as vLLM's `--max-loras`;
     * the least recently used one without a request in flight makes room. Default 4.
     */
    max_loras: z.number().int().min(1).max(64).optional(),
    /** The largest adapter rank a replica takes, as vLLM's `--max-lora-rank`; a larger one is refused (400). Default 64. */
    max_lora_rank: z.number().int().min(1).max(1024).optional(),
  })
  .strict();
export type Runtime = z.infer<typeof Runtime>;

export const Resources = z
  .object({
    replicas: z.number().int().min(0).max(64).default(1),
    gpu: z.number().int().min(0).optional(),
    gpu_type: z.string().min(1).optional(),
    memory: memory.optional(),
    cpu: z.number().int().positive().optional(),
    /** Sequences one replica serves at once (continuous batching in one context). */
    parallel: z.number().int().min(1).max(64).default(4),
    /** Admission control: online requests waiting in the queue past which the gateway answers 429 (docs/fleet.md). */
    max_queue_depth: z.number().int().min(1).max(1_000_000).optional(),
    /**
     * Admission control: how long a request may wait for a replica to take it before a 503
     * (docs/fleet.md). Kept as written, not parsed to ms, so a stored record re-parses.
     */
    max_queue_wait: z
      .string()
      .refine((text) => parseDuration(text) !== undefined, DURATION_ERROR)
      .optional(),
  })
  .strict();
export type Resources = z.infer<typeof Resources>;

export const DeploymentConfig = z
  .object({
    endpoint: ModelName.optional(),
    model: z
      .object({
        name: ModelName,
        version: ModelVersion.default("latest"),
        framework: Framework.optional(),
      })
      .strict(),
    runtime: Runtime.default({}),
    resources: Resources.default({ replicas: 1, parallel: 4 }),
    /** Accepted here so one file can carry both; applied by `inference autoscale`. */
    autoscaling: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();
export type DeploymentConfig = z.infer<typeof DeploymentConfig>;
export type DeploymentConfigInput = z.input<typeof DeploymentConfig>;
