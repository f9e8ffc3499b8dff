/**
 * Fine-tuning jobs in OpenAI's shape (`fine_tuning.job`, its events and checkpoints), with the
 * platform's extensions: the training method (`lora` or `full`), LoRA's rank/alpha/target modules,
 * and the resources the trainer runs with (docs/fine-tuning.md).
 */
import { z } from "zod";
import { ModelName } from "../contracts/deployment.ts";

/** The learning rate a multiplier of 1 stands for, per method (OpenAI's hyperparameter is a multiplier). */
export const BASE_LEARNING_RATE = { lora: 1e-4, full: 1e-5 } as const;

export const FT_STATUSES = ["validating_files", "queued", "running", "succeeded", "failed", "cancelled"] as const;
export type FineTuneStatus = (typeof FT_STATUSES)[number];
export const FINAL_STATUSES: readonly FineTuneStatus[] = ["succeeded", "failed", "cancelled"];

const auto = <T extends z.ZodType>(t: T) => z.union([z.literal("auto"), t]);

export const Hyperparameters = z
  .object({
    n_epochs: auto(z.number().int().min(1).max(50)).optional(),
    batch_size: auto(z.number().int().min(1).max(256)).optional(),
    learning_rate_multiplier: auto(z.number().positive().max(100)).optional(),
  })
  .strict();

export const LoraOptions = z
  .object({
    rank: z.number().int().min(1).max(256).default(8),
    alpha: z.number().positive().max(4096).default(16),
    target_modules: z
      .array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_.]{0,63}$/, "expected a module name such as q_proj"))
      .min(1)
      .max(32)
      .default(["q_proj", "v_proj"]),
  })
  .strict();

export const CreateFineTuneRequest = z
  .object({
    /** `<base name>@<version>` (or `<base name>`: its newest version). */
    model: z.string().min(1, "expected <model>@<version>"),
    training_file: z.string().min(1),
    validation_file: z.string().min(1).nullish(),
    hyperparameters: Hyperparameters.optional(),
    method: z
      .object({
        type: z.enum(["supervised"], { message: 'only "supervised" is supported' }).default("supervised"),
        supervised: z.object({ hyperparameters: Hyperparameters.optional() }).strict().optional(),
        /** Ours: "lora" (default: an adapter of the base) or "full" (a new model version). */
        training: z.enum(["lora", "full"], { message: 'expected "lora" or "full"' }).default("lora"),
        lora: LoraOptions.optional(),
      })
      .strict()
      .optional(),
    seed: z
      .number()
      .int()
      .min(0)
      .max(2 ** 31 - 1)
      .optional(),
    /** The registered result's model name (an adapter's name; a full model's name). */
    suffix: ModelName.optional(),
    metadata: z.record(z.string(), z.string().max(512)).nullish(),
    /** Ours: steps between checkpoints (besides every epoch's end); 0: epoch ends only. */
    checkpoint_interval: z.number().int().min(0).max(1_000_000).optional(),
    /** Ours: GPUs the job needs; such a job goes only to a trainer that offers a GPU (`platform trainer --gpu`). */
    resources: z
      .object({ gpu: z.number().int().min(0).max(8).default(0) })
      .strict()
      .optional(),
  })
  .strict();
export type CreateFineTuneRequest = z.infer<typeof CreateFineTuneRequest>;

/** What training runs with, every "auto" resolved. */
export type ResolvedHyperparameters = {
  n_epochs: number;
  batch_size: number;
  learning_rate_multiplier: number;
};

/** The fields fixed at creation (stored as the record's `spec`). */
export type FineTuneSpec = {
  id: string;
  org: string;
  created_by: string | null;
  created_at: number;
  base: { name: string; version: string };
  method: "lora" | "full";
  lora: { rank: number; alpha: number; target_modules: string[] } | null;
  hyperparameters: ResolvedHyperparameters;
  /** The learning rate the multiplier stands for (the method's base rate times the multiplier). */
  learning_rate: number;
  seed: number;
  checkpoint_interval: number;
  gpu: number;
  /** The result's model name. */
  result_name: string;
  /** What the job's `fine_tuned_model` will be: `<base name>:<adapter>` or `<name>@<version>` once known. */
  training_file: string;
  validation_file: string | null;
  /** Where the files' bytes are (server-side URIs; never shown). */
  training_uri: string;
  validation_uri: string | null;
  dataset_sha256: string;
  validation_sha256: string | null;
  dataset_lines: number;
  metadata: Record<string, string> | null;
};

export type FineTuneError = { code: string; message: string; param: string | null };

export type FineTuningJob = {
  id: string;
  object: "fine_tuning.job";
  model: string;
  created_at: number;
  finished_at: number | null;
  fine_tuned_model: string | null;
  organization_id: string;
  result_files: string[];
  status: FineTuneStatus;
  validation_file: string | null;
  training_file: string;
  hyperparameters: ResolvedHyperparameters;
  method: {
    type: "supervised";
    supervised: { hyperparameters: ResolvedHyperparameters };
    training: "lora" | "full";
    lora: { rank: number; alpha: number; target_modules: string[] } | null;
  };
  trained_tokens: number | null;
  error: FineTuneError | null;
  seed: number;
  estimated_finish: number | null;
  integrations: [];
  metadata: Record<string, string> | null;
  user_provided_suffix: string | null;
  /** Ours: the digest of the training file's bytes. */
  dataset_sha256: string;
  /** Ours: the registered result (`<name>@<version>`) once succeeded. */
  result_version: string | null;
  /** Ours: what the job asked for (GPU jobs go only to trainers that offer a GPU). */
  resources: { gpu: number };
  /** Ours: `gpu_trainer` while a queued GPU job has no trainer offering a GPU to take it. */
  waiting_for: "gpu_trainer" | null;
};

export type FineTuneEvent = {
  object: "fine_tuning.job.event";
  id: string;
  created_at: number;
  level: "info" | "warn" | "error";
  message: string;
  type: "message" | "metrics";
  data: Record<string, unknown> | null;
};

export type FineTuneCheckpoint = {
  object: "fine_tuning.job.checkpoint";
  id: string;
  created_at: number;
  fine_tuned_model_checkpoint: string;
  fine_tuning_job_id: string;
  step_number: number;
  metrics: { step: number; train_loss: number | null; valid_loss: number | null; full_valid_loss: number | null };
  /** Ours: where its files lie in the artifact store (a key prefix; not shown to clients). */
  key?: string;
};
