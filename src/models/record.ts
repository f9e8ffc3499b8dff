/** A registered model version: its artifact, what it serves, and what its files say about it. */
import { z } from "zod";
import { Framework, ModelName, ModelVersion } from "../contracts/deployment.ts";
import { OrgId } from "../contracts/orgs.ts";
import { GgufSummary } from "../formats/gguf/summary.ts";

/**
 * A SHA-256 in lowercase hex. Checked on the way out of Redis too: a version's digest names cache
 * files and store keys (its download, conversion, quantized copies), so a malformed one fails
 * where the record is read and never becomes a path.
 */
export const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, "expected a lowercase hex SHA-256");

/** One file of a directory artifact: its path relative to the directory, its size and its SHA-256. */
export const ArtifactFile = z.object({
  path: z.string(),
  size: z.number().int().nonnegative(),
  sha256: Sha256,
});
export type ArtifactFile = z.infer<typeof ArtifactFile>;

/** What a Hugging Face-style checkpoint directory says about itself (config.json, tokenizer files, safetensors headers). */
export const CheckpointSummary = z.object({
  /** config.json's `architectures[0]` ("LlamaForCausalLM"). */
  architecture: z.string().nullable(),
  /** config.json's `model_type` ("llama"). */
  model_type: z.string().nullable(),
  /** Elements of every tensor, summed over the safetensors headers. */
  parameters: z.number().int().nullable(),
  context_length: z.number().int().nullable(),
  /** `torch_dtype` (or `dtype`) of config.json: "bfloat16", "float16", ... */
  dtype: z.string().nullable(),
  /** `quantization_config.quant_method` ("awq", "gptq", "fp8"), null for full-precision weights. */
  quantization: z.string().nullable(),
  /** tokenizer_config.json's `tokenizer_class`, else which tokenizer file there is ("tokenizer.json", "tokenizer.model"). */
  tokenizer: z.string().nullable(),
  chat_template: z.boolean(),
});
export type CheckpointSummary = z.infer<typeof CheckpointSummary>;

/**
 * "gguf": one file at `artifact`; "hf": a Hugging Face-style directory, its files listed in
 * `manifest`; "adapter": a PEFT LoRA adapter directory (adapter_config.json,
 * adapter_model.safetensors), listed in `manifest` too, served on its base (`adapter.base`).
 */
export const ArtifactKind = z.enum(["gguf", "hf", "adapter"]);
export type ArtifactKind = z.infer<typeof ArtifactKind>;

/** What a diffusers pipeline directory says about itself (model_index.json and its components' configs): src/models/diffusers.ts. */
export const PipelineSummary = z.object({
  /** model_index.json's `_class_name` ("StableDiffusionPipeline"). */
  pipeline_class: z.string(),
  /** The size it was trained at: the denoiser's sample_size times the VAE's scale factor. */
  default_width: z.number().int().positive(),
  default_height: z.number().int().positive(),
  /** Width and height must be multiples of this (the VAE's scale factor times the denoiser's downsampling). */
  size_multiple: z.number().int().positive(),
  /** The largest width or height taken: twice the default. */
  max_side: z.number().int().positive(),
  /** The scheduler's class ("DDIMScheduler"). */
  scheduler: z.string().nullable(),
  /** The denoiser's weights' dtype ("float32", "float16"), from its safetensors header. */
  dtype: z.string().nullable(),
  /** The pipeline's component folders, sorted ("scheduler", "text_encoder", "tokenizer", "unet", "vae"). */
  components: z.array(z.string()),
  /** Elements of every tensor of every component. */
  parameters: z.number().int().nullable(),
});
export type PipelineSummary = z.infer<typeof PipelineSummary>;

/** A model version by name: `<name>@<version>`'s parts. */
export const VersionRef = z.object({ name: ModelName, version: ModelVersion });
export type VersionRef = z.infer<typeof VersionRef>;

/** What a LoRA adapter version is (its adapter_config.json, checked against its base at registration). */
export const AdapterSummary = z.object({
  /** The base model version it was trained on: the endpoint that serves the base serves it as `<endpoint>:<adapter name>`. */
  base: VersionRef,
  /** adapter_config.json's `peft_type` ("LORA"). */
  peft_type: z.string(),
  /** `r`. */
  rank: z.number().int().positive(),
  /** `lora_alpha`. */
  alpha: z.number(),
  /** The module names it adapts ("q_proj", "v_proj", ...), sorted. */
  target_modules: z.array(z.string()),
  /** Elements of its tensors. */
  parameters: z.number().int().nonnegative(),
});
export type AdapterSummary = z.infer<typeof AdapterSummary>;

/** How a version was trained by a fine-tuning job (docs/fine-tuning.md). */
export const TrainingSummary = z.object({
  job_id: z.string(),
  method: z.enum(["lora", "full"]),
  base: VersionRef,
  /** SHA-256 of the training file's bytes, and of the validation file's. */
  dataset_sha256: Sha256,
  validation_sha256: Sha256.nullable(),
  hyperparameters: z.record(z.string(), z.union([z.number(), z.string(), z.boolean(), z.null()])),
  trained_tokens: z.number().int().nonnegative(),
  final_train_loss: z.number().nullable(),
  final_validation_loss: z.number().nullable(),
});
export type TrainingSummary = z.infer<typeof TrainingSummary>;

/**
 * What a model version serves: text generation (chat, completions, generate, batches),
 * embeddings (/v1/embeddings) or images (/v1/images/generations). The gateway refuses the other
 * routes with a 400 saying so.
 */
export const ModelTask = z.enum(["generate", "embed", "image"]);
export type ModelTask = z.infer<typeof ModelTask>;

/** GGUF `general.architecture`s of encoder-only models: llama.cpp runs them for embeddings only. */
export const ENCODER_ARCHITECTURES: readonly string[] = [
  "bert",
  "nomic-bert",
  "nomic-bert-moe",
  "jina-bert-v2",
  "jina-bert-v3",
  "modern-bert",
  "neo-bert",
  "eurobert",
  "t5encoder",
];

/** The task a model has unless its registration says otherwise: encoders embed, everything else generates. */
export function defaultTask(gguf: Pick<GgufSummary, "architecture"> | null | undefined): ModelTask {
  return gguf?.architecture != null && ENCODER_ARCHITECTURES.includes(gguf.architecture) ? "embed" : "generate";
}

/** config.json `model_type`s of encoder-only checkpoints (the BERT family): embedding models. */
export const ENCODER_MODEL_TYPES: readonly string[] = [
  "bert",
  "roberta",
  "xlm-roberta",
  "distilbert",
  "mpnet",
  "electra",
  "nomic_bert",
  "modernbert",
  "jina_bert",
];

/** The default task of a checkpoint directory, from its config.json `model_type`, as `defaultTask` for a GGUF file. */
export function defaultCheckpointTask(checkpoint: Pick<CheckpointSummary, "model_type"> | null | undefined): ModelTask {
  return checkpoint?.model_type != null && ENCODER_MODEL_TYPES.includes(checkpoint.model_type) ? "embed" : "generate";
}

/** A version's task; records written before tasks existed get their model's default. */
export function taskOf(record: Pick<RegisteredVersion, "task" | "gguf" | "checkpoint">): ModelTask {
  return record.task ?? (record.checkpoint ? defaultCheckpointTask(record.checkpoint) : defaultTask(record.gguf));
}

// Names are checked on the way out of Redis too: a record written by hand or by an older
// version must not smuggle a name into queue names and keys.
export const RegisteredVersion = z.object({
  name: ModelName,
  version: ModelVersion,
  framework: Framework,
  /** Where the user said it came from (path, file://, https://, hf://, s3://). */
  source: z.string(),
  /** Where the platform keeps its copy, relative to the artifact store root: the file, or for "hf" the directory (its files lie below it). */
  artifact: z.string(),
  /** The file's SHA-256, or for "hf" the manifest's digest (src/models/checkpoint.ts `manifestDigest`). */
  sha256: Sha256,
  /** The file's size, or for "hf" the sum of its files' sizes. */
  size_bytes: z.number().int(),
  gguf: GgufSummary.nullable(),
  /** What it serves (`taskOf` reads it); absent on records registered before tasks existed. */
  task: ModelTask.optional(),
  created: z.number().int(),
  /** Absent on versions registered before directories were supported: a single file. */
  kind: ArtifactKind.optional(),
  /** "hf" only: every file of the directory, sorted by path. */
  manifest: z.array(ArtifactFile).optional(),
  /** "hf" only: the checkpoint's metadata. */
  checkpoint: CheckpointSummary.optional(),
  /** A diffusers pipeline directory ("hf" with model_index.json, task "image"): what it is. */
  pipeline: PipelineSummary.optional(),
  /** "adapter" only: what it adapts. */
  adapter: AdapterSummary.optional(),
  /** Versions a fine-tuning job made: how. */
  training: TrainingSummary.optional(),
  /**
   * The organization that made it (a fine-tuning job's result): listed and served only to it and
   * the operator (src/models/owners.ts). Absent: the operator's, install-wide.
   */
  owner: OrgId.optional(),
});
export type RegisteredVersion = z.infer<typeof RegisteredVersion>;
