/**
 * Fine-tuning's settings, read from the environment (docs/fine-tuning.md lists them): the trainer's
 * Python, the admission bound per organization, the dataset bounds and how many jobs are kept.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DatasetLimits } from "./dataset.ts";

export type FineTuningSettings = {
  /** The interpreter that runs workers/trainer/train.py (torch, transformers, peft). */
  python: string;
  /** Queued plus running jobs one organization may have; more are refused with 429. */
  maxActivePerOrg: number;
  /** Job records kept per organization (the oldest ended ones are dropped). */
  maxJobsPerOrg: number;
  /** Times a trainer child killed by a signal is restarted from its last checkpoint. */
  maxRestarts: number;
  dataset: DatasetLimits;
};

const REPO = fileURLToPath(new URL("../../", import.meta.url));

function whole(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name}: expected a positive whole number, got "${raw}"`);
  return n;
}

export function fineTuningSettings(env: NodeJS.ProcessEnv = process.env): FineTuningSettings {
  const venv = join(REPO, ".venv-ref", "bin", "python");
  return {
    python: env.PLATFORM_TRAINER_PYTHON || (existsSync(venv) ? venv : "python3"),
    maxActivePerOrg: whole(env, "PLATFORM_FINETUNE_MAX_ACTIVE", 4),
    maxJobsPerOrg: whole(env, "PLATFORM_FINETUNE_MAX_JOBS", 500),
    maxRestarts: whole(env, "PLATFORM_FINETUNE_MAX_RESTARTS", 3),
    dataset: {
      maxBytes: whole(env, "PLATFORM_FINETUNE_MAX_DATASET_BYTES", 256 * 1024 * 1024),
      maxLines: whole(env, "PLATFORM_FINETUNE_MAX_DATASET_LINES", 1_000_000),
      maxLineBytes: 1024 * 1024,
    },
  };
}
