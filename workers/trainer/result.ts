/**
 * A finished run's result registered as a model version with its training metadata (an adapter of
 * the base for `lora`, a new checkpoint for `full`; src/finetuning/register.ts), and the job marked
 * succeeded with its `fine_tuned_model`.
 */
import { join } from "node:path";
import { registerTrainedAdapter, registerTrainedModel } from "../../src/finetuning/register.ts";
import { fineTunedModelName } from "../../src/finetuning/served.ts";
import type { FineTuneSpec } from "../../src/finetuning/record.ts";
import { isEnded, updateIfActive } from "../../src/finetuning/store.ts";
import type { Control } from "../../src/redis/connection.ts";
import { resolveModelVersion } from "../../src/models/versions.ts";
import type { ObjectStore } from "../../src/storage/store.ts";
import type { TrainerLine } from "./child.ts";

export async function registerResult(
  deps: { ctl: Control; artifacts: ObjectStore; dataDir: string },
  spec: FineTuneSpec,
  done: TrainerLine,
  out: string,
  event: (m: string, d?: Record<string, unknown> | null) => Promise<void>,
): Promise<"succeeded" | "cancelled"> {
  const base = await resolveModelVersion(deps.ctl, spec.base.name, spec.base.version);
  const num = (v: unknown) => (typeof v === "number" ? v : null);
  const training = {
    job_id: spec.id,
    method: spec.method,
    base: spec.base,
    dataset_sha256: spec.dataset_sha256,
    validation_sha256: spec.validation_sha256,
    hyperparameters: {
      n_epochs: spec.hyperparameters.n_epochs,
      batch_size: spec.hyperparameters.batch_size,
      learning_rate_multiplier: spec.hyperparameters.learning_rate_multiplier,
      learning_rate: spec.learning_rate,
      seed: spec.seed,
      ...(spec.lora
        ? { lora_rank: spec.lora.rank, lora_alpha: spec.lora.alpha, target_modules: spec.lora.target_modules.join(",") }
        : {}),
    },
    trained_tokens: Number(done.trained_tokens ?? 0),
    final_train_loss: num(done.final_train_loss),
    final_validation_loss: num(done.final_valid_loss),
  };
  // A cancel that came while the result was written wins: nothing is registered.
  if (await isEnded(deps.ctl, spec.id)) return "cancelled";
  const registerDeps = { ctl: deps.ctl, artifacts: deps.artifacts, scratchDir: join(deps.dataDir, "tmp") };
  const req = { name: spec.result_name, base, dir: out, source: `fine-tuning://${spec.id}`, training, owner: spec.org };
  const record =
    spec.method === "lora"
      ? await registerTrainedAdapter(registerDeps, req)
      : await registerTrainedModel(registerDeps, req);
  // `<endpoint>:<adapter>`: the endpoint serving the base now, or the base's name (deploying it serves it).
  const fineTuned =
    spec.method === "lora"
      ? await fineTunedModelName(deps.ctl, spec.base, record.name)
      : `${record.name}@${record.version}`;
  await updateIfActive(deps.ctl, spec.id, {
    status: "succeeded",
    finished_at: Date.now(),
    fine_tuned_model: fineTuned,
    result_version: `${record.name}@${record.version}`,
    trained_tokens: training.trained_tokens,
  });
  await event(`Registered ${spec.method === "lora" ? "adapter" : "model"} ${record.name}@${record.version}`, {
    final_train_loss: training.final_train_loss,
    final_valid_loss: training.final_validation_loss,
  });
  await event("The job has successfully completed");
  return "succeeded";
}
