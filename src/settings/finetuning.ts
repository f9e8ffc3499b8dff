/**
 * The fine-tuning section (docs/fine-tuning.md): the trainer's Python, the admission bound per
 * organization, how many job records are kept, how often a killed trainer child is restarted, how
 * long a silent trainer keeps its job, and the dataset bounds.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { optional } from "./parse.ts";

const count = (fallback: number) =>
  z.coerce.number({ message: "expected a positive whole number" }).int().positive().default(fallback);

export const fineTuningShape = {
  /** The interpreter that runs workers/trainer/train.py (torch, transformers, peft). */
  PLATFORM_TRAINER_PYTHON: optional(z.string().min(1)),
  PLATFORM_FINETUNE_MAX_ACTIVE: count(4),
  PLATFORM_FINETUNE_MAX_JOBS: count(500),
  PLATFORM_FINETUNE_MAX_RESTARTS: count(3),
  PLATFORM_TRAINER_HEARTBEAT_MS: count(30_000),
  PLATFORM_FINETUNE_MAX_DATASET_BYTES: count(256 * 1024 * 1024),
  PLATFORM_FINETUNE_MAX_DATASET_LINES: count(1_000_000),
};

export type FineTuningSettings = {
  /** The interpreter that runs workers/trainer/train.py (torch, transformers, peft). */
  python: string;
  /** Queued plus running jobs one organization may have; more are refused with 429. */
  maxActivePerOrg: number;
  /** Job records kept per organization (the oldest ended ones are dropped). */
  maxJobsPerOrg: number;
  /** Times a trainer child killed by a signal is restarted from its last checkpoint. */
  maxRestarts: number;
  /**
   * How long a trainer may be silent before its job is taken back: it renews its hold on each job
   * twice in this time, and a job held by none is found within a second more (src/finetuning/trainers.ts).
   */
  heartbeatMs: number;
  dataset: { maxBytes: number; maxLines: number; maxLineBytes: number };
};

/** The one command that makes the trainer's Python (scripts/setup-python.sh): every message about a missing one names it. */
export const SETUP_PYTHON = "npm run setup:python";

/** How to give the trainer a Python with torch, transformers and peft: the fix those messages give. */
export const TRAINER_PYTHON_FIX = `run \`${SETUP_PYTHON}\` in the platform's checkout (it makes .venv-ref, which the trainer finds by itself) or set PLATFORM_TRAINER_PYTHON to a Python with torch, transformers and peft`;

/** The reference venv of a source checkout (`npm run setup:python`), when there is one. */
const CHECKOUT_VENV = join(fileURLToPath(new URL("../../", import.meta.url)), ".venv-ref", "bin", "python");

/** A Python the platform runs (the trainer's, the image engine's): the one set, else the checkout's .venv-ref, else python3. */
export function pythonOf(set: string | undefined): string {
  return set ?? (existsSync(CHECKOUT_VENV) ? CHECKOUT_VENV : "python3");
}

export function fineTuningSettings(e: z.infer<z.ZodObject<typeof fineTuningShape>>): FineTuningSettings {
  return {
    python: pythonOf(e.PLATFORM_TRAINER_PYTHON),
    maxActivePerOrg: e.PLATFORM_FINETUNE_MAX_ACTIVE,
    maxJobsPerOrg: e.PLATFORM_FINETUNE_MAX_JOBS,
    maxRestarts: e.PLATFORM_FINETUNE_MAX_RESTARTS,
    heartbeatMs: e.PLATFORM_TRAINER_HEARTBEAT_MS,
    dataset: {
      maxBytes: e.PLATFORM_FINETUNE_MAX_DATASET_BYTES,
      maxLines: e.PLATFORM_FINETUNE_MAX_DATASET_LINES,
      maxLineBytes: 1024 * 1024,
    },
  };
}
