/**
 * A fine-tuning job's files on the trainer's side: checkpoints the child writes, uploaded to the
 * artifact store (so any trainer can resume the job) and fetched back to resume from; datasets
 * copied in and hashed, to check they are the bytes validated at submit.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { FineTuneCheckpoint, FineTuneSpec } from "../../src/finetuning/record.ts";
import { addCheckpoint, addEvent } from "../../src/finetuning/store.ts";
import type { Control } from "../../src/redis/connection.ts";
import { openObject, type S3Settings } from "../../src/storage/index.ts";
import type { ObjectStore } from "../../src/storage/store.ts";
import type { TrainerLine } from "./child.ts";

const CHECKPOINT_FILES = ["weights.safetensors", "trainer_state.pt", "state.json"];

/** Uploads a checkpoint the child wrote and records it; older ones beyond the bound lose their files. */
export async function saveCheckpoint(
  deps: { ctl: Control; artifacts: ObjectStore },
  spec: FineTuneSpec,
  line: TrainerLine,
): Promise<void> {
  const step = Number(line.step);
  const dir = String(line.path);
  const key = `fine-tuning/${spec.org}/${spec.id}/checkpoints/step-${String(step).padStart(8, "0")}`;
  for (const f of CHECKPOINT_FILES) await deps.artifacts.put(`${key}/${f}`, createReadStream(join(dir, f)));
  const fineTuned = spec.method === "lora" ? `${spec.base.name}:${spec.result_name}` : spec.result_name;
  const checkpoint: FineTuneCheckpoint = {
    object: "fine_tuning.job.checkpoint",
    id: `ftckpt-${createHash("sha256").update(`${spec.id}:${step}`).digest("hex").slice(0, 24)}`,
    created_at: Math.floor(Date.now() / 1000),
    fine_tuned_model_checkpoint: `${fineTuned}:ckpt-step-${step}`,
    fine_tuning_job_id: spec.id,
    step_number: step,
    metrics: {
      step,
      train_loss: typeof line.train_loss === "number" ? line.train_loss : null,
      valid_loss: typeof line.valid_loss === "number" ? line.valid_loss : null,
      full_valid_loss: typeof line.valid_loss === "number" ? line.valid_loss : null,
    },
    key,
  };
  const dropped = await addCheckpoint(deps.ctl, checkpoint);
  for (const old of dropped)
    if (old.key)
      for (const f of CHECKPOINT_FILES) await deps.artifacts.delete(`${old.key}/${f}`).catch(() => undefined);
  await addEvent(deps.ctl, spec.id, "info", `Checkpoint saved at step ${step}`, { step, checkpoint: checkpoint.id });
  // Older local checkpoints are in the store already; the child may be writing the next one (a .tmp) meanwhile.
  const parent = join(dir, "..");
  for (const name of await readdir(parent)) {
    const m = /^step-(\d+)$/.exec(name);
    if (m && Number(m[1]) < step) await rm(join(parent, name), { recursive: true, force: true });
  }
}

export async function downloadCheckpoint(
  artifacts: ObjectStore,
  checkpoint: FineTuneCheckpoint,
  work: string,
): Promise<string> {
  const dir = join(work, "resume", `step-${checkpoint.step_number}`);
  await mkdir(dir, { recursive: true });
  for (const f of CHECKPOINT_FILES) await artifacts.download(`${checkpoint.key}/${f}`, join(dir, f));
  return dir;
}

/** Copies a dataset to `dest`; returns its SHA-256. */
export async function fetchChecked(uri: string, dest: string, s3: S3Settings): Promise<string> {
  const { store, key } = openObject(uri, s3);
  try {
    const hash = createHash("sha256");
    const source = await store.get(key);
    source.on("data", (chunk: Buffer) => hash.update(chunk));
    await pipeline(source, createWriteStream(dest));
    return hash.digest("hex");
  } finally {
    store.close();
  }
}
