/**
 * One fine-tuning job, start to end, in a trainer process: fetch the base checkpoint and the
 * datasets (checked against the digests recorded at submit), resume from the newest checkpoint in
 * the artifact store if there is one, run train.py, turn its lines into events and checkpoints
 * (uploaded, so another trainer can resume), restart it from the last checkpoint when it is
 * killed (bounded), stop it on cancel, and register the result.
 */
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { TRAINER_PYTHON_FIX } from "../../src/settings/finetuning.ts";
import type { FineTuningSettings } from "../../src/settings/index.ts";
import type { FineTuneSpec } from "../../src/finetuning/record.ts";
import { addEvent, isEnded, listCheckpoints, readJob, updateIfActive } from "../../src/finetuning/store.ts";
import type { Control } from "../../src/redis/connection.ts";
import { localArtifact } from "../../src/models/materialize.ts";
import { resolveModelVersion } from "../../src/models/versions.ts";
import type { S3Settings } from "../../src/storage/index.ts";
import type { ObjectStore } from "../../src/storage/store.ts";
import { fetchChecked, downloadCheckpoint, saveCheckpoint } from "./checkpoints.ts";
import { type ChildEnd, spawnTrainer, type TrainerLine } from "./child.ts";
import { registerResult } from "./result.ts";

export type RunDeps = {
  ctl: Control;
  artifacts: ObjectStore;
  s3: S3Settings;
  dataDir: string;
  settings: FineTuningSettings;
  /** Threads torch uses (1: the same numbers on every machine size). */
  threads: number;
};

export type RunEnd = "succeeded" | "failed" | "cancelled" | "ended" | "handed_off";

export async function runFineTune(deps: RunDeps, id: string, handoff: AbortSignal): Promise<RunEnd> {
  const { ctl } = deps;
  const job = await readJob(ctl, id);
  if (!job || (await isEnded(ctl, id))) return "ended";
  const spec = job.spec;
  const event = (
    message: string,
    data: Record<string, unknown> | null = null,
    level: "info" | "warn" | "error" = "info",
  ) => addEvent(ctl, id, level, message, data);
  const fail = async (code: string, message: string) => {
    await updateIfActive(ctl, id, { status: "failed", finished_at: Date.now(), error: { code, message, param: null } });
    await event(`Job failed: ${message}`, null, "error");
    return "failed" as const;
  };
  const work = join(deps.dataDir, "trainer", id);
  await rm(work, { recursive: true, force: true });
  await mkdir(join(work, "checkpoints"), { recursive: true });
  try {
    const previous = (await listCheckpoints(ctl, id))[0];
    const now = Date.now();
    await updateIfActive(ctl, id, {
      status: "running",
      taken_at: now,
      ...(job.fields.started_at ? {} : { started_at: now }),
    });
    await event(
      previous
        ? `Trainer took over the job; resuming from the checkpoint at step ${previous.step_number}`
        : "Fine-tuning job started",
    );

    const base = await resolveModelVersion(ctl, spec.base.name, spec.base.version);
    const baseDir = await localArtifact(deps.artifacts, join(deps.dataDir, "cache", "models"), base);
    const train = join(work, "train.jsonl");
    if ((await fetchChecked(spec.training_uri, train, deps.s3)) !== spec.dataset_sha256)
      return await fail(
        "training_file_changed",
        "the training file changed after the job was submitted; submit a new job",
      );
    let valid: string | undefined;
    if (spec.validation_uri) {
      valid = join(work, "valid.jsonl");
      if ((await fetchChecked(spec.validation_uri, valid, deps.s3)) !== spec.validation_sha256)
        return await fail(
          "validation_file_changed",
          "the validation file changed after the job was submitted; submit a new job",
        );
    }

    let resume = previous ? await downloadCheckpoint(deps.artifacts, previous, work) : undefined;
    let restarts = Number(job.fields.restarts ?? 0);
    const out = join(work, "out");
    for (;;) {
      const state = {
        done: undefined as TrainerLine | undefined,
        /** What train.py said went wrong (worded for the job: no paths, no data). */
        error: undefined as { code: string; message: string } | undefined,
        lastStep: 0,
        started: Date.now(),
        firstStep: -1,
        pending: Promise.resolve(),
      };
      const args = trainerArgs(spec, {
        baseDir,
        train,
        valid,
        out,
        checkpoints: join(work, "checkpoints"),
        resume,
        threads: deps.threads,
      });
      const child = spawnTrainer(deps.settings.python, args, (line) => {
        // Lines are handled in order: a checkpoint's upload finishes before the next line is looked at.
        state.pending = state.pending
          .then(() => onLine(line))
          .catch((e: unknown) => console.error(`[fine-tuning ${id}]`, e));
      });
      const onLine = async (line: TrainerLine) => {
        switch (line.type) {
          case "plan": {
            const fallback = line.requested_device === "cuda" && line.device !== "cuda";
            await event(
              `Training ${line.total_steps} steps (${line.steps_per_epoch} per epoch) on ${line.device ?? "cpu"}${fallback ? " (a GPU was asked for, but the trainer's torch sees none)" : ""}`,
              null,
              fallback ? "warn" : "info",
            );
            break;
          }
          case "error":
            state.error = { code: String(line.code), message: String(line.message) };
            break;
          case "resumed":
            await event(`Resumed from the checkpoint at step ${line.step}`, { step: line.step });
            break;
          case "step": {
            const step = Number(line.step);
            state.lastStep = step;
            if (state.firstStep < 0) state.firstStep = step;
            const total = Number(line.total_steps);
            const perStep = (Date.now() - state.started) / Math.max(1, step - state.firstStep + 1);
            await updateIfActive(ctl, id, {
              trained_tokens: Number(line.trained_tokens),
              estimated_finish: Math.round(Date.now() + perStep * (total - step)),
            });
            await event(`Step ${step}/${total}: training loss=${Number(line.train_loss).toFixed(4)}`, {
              step,
              total_steps: total,
              epoch: line.epoch,
              train_loss: line.train_loss,
              learning_rate: line.learning_rate,
            });
            break;
          }
          case "valid":
            await event(`Step ${line.step}: validation loss=${Number(line.valid_loss).toFixed(4)}`, {
              step: line.step,
              valid_loss: line.valid_loss,
              epoch: line.epoch,
            });
            break;
          case "checkpoint":
            await saveCheckpoint(deps, spec, line);
            break;
          case "done":
            state.done = line;
            break;
        }
      };
      const end = await watch(deps, id, child, handoff);
      await state.pending;
      if (end === "handed_off") return "handed_off";
      if (end === "cancelled") return "cancelled";
      if (state.done && end.code === 0) return await registerResult(deps, spec, state.done, out, event);
      if (end.signal !== null && restarts < deps.settings.maxRestarts) {
        restarts += 1;
        await updateIfActive(ctl, id, { restarts });
        const newest = (await listCheckpoints(ctl, id))[0];
        await event(
          `The trainer process was killed (${end.signal}) after step ${state.lastStep}; ${newest ? `resuming from the checkpoint at step ${newest.step_number}` : "starting again (no checkpoint yet)"} (restart ${restarts} of ${deps.settings.maxRestarts})`,
          null,
          "warn",
        );
        resume = newest ? await downloadCheckpoint(deps.artifacts, newest, work) : undefined;
        continue;
      }
      console.error(`[fine-tuning ${id}] trainer exited (code ${end.code}, signal ${end.signal}):\n${end.stderr}`);
      if (state.error && end.signal === null) return await fail(state.error.code, state.error.message);
      if (end.spawnError || /ModuleNotFoundError/.test(end.stderr))
        return await fail(
          "trainer_unavailable",
          `this trainer's Python ${end.spawnError ? "could not be started" : "lacks torch, transformers or peft"}: ${TRAINER_PYTHON_FIX} (\`platform doctor\` checks it), then submit the job again`,
        );
      return await fail(
        "training_failed",
        end.signal !== null
          ? `the trainer process was killed (${end.signal}) ${restarts} times; job id ${id}, the trainer log has the details`
          : `the trainer exited with status ${end.code}${lastError(end.stderr)}; job id ${id}, the trainer log has the details`,
      );
    }
  } finally {
    await rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Waits for the child to end, killing it when the job is cancelled or the process hands the job off. */
async function watch(
  deps: RunDeps,
  id: string,
  child: ReturnType<typeof spawnTrainer>,
  handoff: AbortSignal,
): Promise<ChildEnd | "cancelled" | "handed_off"> {
  let stopped: "cancelled" | "handed_off" | undefined;
  const onAbort = () => {
    stopped = "handed_off";
    child.kill();
  };
  handoff.addEventListener("abort", onAbort);
  const timer = setInterval(() => {
    void isEnded(deps.ctl, id).then(
      (ended) => {
        if (ended && !stopped) {
          stopped = "cancelled";
          child.kill();
        }
      },
      () => undefined,
    );
  }, 500);
  try {
    const end = await child.ended;
    return stopped ?? end;
  } finally {
    clearInterval(timer);
    handoff.removeEventListener("abort", onAbort);
  }
}

function trainerArgs(
  spec: FineTuneSpec,
  at: {
    baseDir: string;
    train: string;
    valid?: string;
    out: string;
    checkpoints: string;
    resume?: string;
    threads: number;
  },
): string[] {
  const args = [
    "--base",
    at.baseDir,
    "--train",
    at.train,
    "--out",
    at.out,
    "--checkpoints",
    at.checkpoints,
    "--method",
    spec.method,
    "--epochs",
    String(spec.hyperparameters.n_epochs),
    "--batch-size",
    String(spec.hyperparameters.batch_size),
    "--learning-rate",
    String(spec.learning_rate),
    "--seed",
    String(spec.seed),
    "--checkpoint-every",
    String(spec.checkpoint_interval),
    "--device",
    spec.gpu > 0 ? "cuda" : "cpu",
    "--threads",
    String(at.threads),
    "--adapter-base",
    `${spec.base.name}@${spec.base.version}`,
  ];
  if (spec.lora)
    args.push(
      "--lora-rank",
      String(spec.lora.rank),
      "--lora-alpha",
      String(spec.lora.alpha),
      "--target-modules",
      spec.lora.target_modules.join(","),
    );
  if (at.valid) args.push("--valid", at.valid);
  if (at.resume) args.push("--resume", at.resume);
  return args;
}

/** The last line of a Python traceback (`ValueError: ...`) without paths, for the job's error. */
function lastError(stderr: string): string {
  const line = stderr.trim().split("\n").at(-1) ?? "";
  const m = /^([A-Za-z_.]*(Error|Exception)):/.exec(line);
  return m ? ` (${m[1]})` : "";
}
