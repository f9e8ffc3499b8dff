/**
 * How a batch run ends (run.ts runs it): completed, its parts assembled into the output
 * (assemble.ts) and the job's files recorded; cancelled, whatever was written becoming the
 * partial output; failed, what finished kept for download and, when the cause can be fixed, a
 * resume. The job's working keys go once nothing will resume it.
 */
import type { Control } from "../redis/connection.ts";
import type { StoragePolicy } from "../storage/policy.ts";
import { OutputAssembly } from "./assemble.ts";
import type { LineFormat } from "./lines.ts";
import { type OutputLocation, outputLocation } from "./output.ts";
import { type BatchFailure, checkInput, type Input } from "./prepare.ts";
import { asFailure } from "./run-checks.ts";
import { BatchCheckpoint } from "./record.ts";
import { type BatchSpec, keptPartial, NOT_RESUMABLE, outputUri, updateIfActive } from "./store.ts";

/** handed_off: stopped for a process shutdown, to be resumed; superseded: another coordinator owns the job now. */
export type RunEnd = "completed" | "failed" | "cancelled" | "handed_off" | "superseded";

/** What an end reads of the run: its job, where it reads and writes, its format and checkpoint. */
export type RunEnding = {
  ctl: Control;
  spec: BatchSpec;
  storage: StoragePolicy;
  out: OutputLocation | undefined;
  input: Input | undefined;
  format: LineFormat;
  checkpoint: BatchCheckpoint;
};

/** Cancelled while no coordinator ran it: a previous run's parts still become the output. */
export async function cancelBeforeStart(run: RunEnding): Promise<RunEnd> {
  const raw = await run.ctl.redis.get(run.ctl.keys.batchCheckpoint(run.spec.id));
  const checkpoint = raw ? BatchCheckpoint.parse(JSON.parse(raw)) : run.checkpoint;
  const out = raw ? outputLocation(outputUri(run.spec), run.spec.id, run.storage.s3) : run.out;
  try {
    return await finishCancelled({ ...run, checkpoint, out });
  } catch (e) {
    if (!asFailure(e)) throw e;
    return await finishCancelled({ ...run, checkpoint, out: undefined });
  } finally {
    out?.store.close();
  }
}

/** Cancelled: whatever batches were written become the (partial) output. */
export async function finishCancelled(run: RunEnding): Promise<RunEnd> {
  if (run.out && run.checkpoint.parts > 0) return finishRun(run, "cancelled");
  await updateIfActive(run.ctl, run.spec.id, { state: "cancelled", finished: Date.now(), in_flight: 0 });
  await dropWorkingKeys(run);
  return "cancelled";
}

/**
 * Assembles the parts into the result, then removes them: the checkpoint
 * records the assembly first, so a run interrupted in between does not try
 * to assemble parts that are already gone.
 */
export async function finishRun(run: RunEnding, state: "completed" | "cancelled"): Promise<RunEnd> {
  const { ctl, spec } = run;
  const out = run.out as OutputLocation;
  let checkpoint = run.checkpoint;
  const saveCheckpoint = async (next: BatchCheckpoint) => {
    checkpoint = next;
    await ctl.redis.set(ctl.keys.batchCheckpoint(spec.id), JSON.stringify(next));
  };
  const parts = Array.from({ length: checkpoint.parts }, (_, i) => out.partKey(i));
  const assembly = new OutputAssembly({
    ctl,
    spec,
    storage: run.storage,
    out,
    assembling: checkpoint.assembling === true,
    markAssembling: () => saveCheckpoint({ ...checkpoint, assembling: true }),
  });
  if (!checkpoint.assembled) {
    // A cancelled job's parts are its output whatever its input became.
    if (run.input && state === "completed") await checkInput(run.input, spec.input);
    await assembly.assemble(parts, run.format.failed);
    await saveCheckpoint({ ...checkpoint, assembled: true });
  }
  // Recorded before the state that shows them, and again by a run that finishes the job again (same ids).
  const files = run.format.failed ? await assembly.registerFiles() : undefined;
  await assembly.removeParts(parts);
  await updateIfActive(ctl, spec.id, {
    state,
    output_file: out.store.uri(out.resultKey),
    succeeded: checkpoint.succeeded,
    failed: checkpoint.failed,
    in_flight: 0,
    throughput: null,
    finished: Date.now(),
    ...(files ? { openai_files: files } : {}),
  });
  await dropWorkingKeys(run);
  return state;
}

/**
 * The parts already written and the checkpoint are kept, so the user can
 * download what finished and, when the cause can be fixed, resume.
 */
export async function failRun(run: RunEnding, failure: BatchFailure): Promise<RunEnd> {
  const resumable = NOT_RESUMABLE[failure.code] === undefined;
  await updateIfActive(run.ctl, run.spec.id, {
    state: "failed",
    error: { code: failure.code, message: failure.message },
    in_flight: 0,
    finished: Date.now(),
    resumable,
    ...(await keptPartial(run.ctl, run.spec, run.out, run.storage.s3)),
  });
  if (!resumable) await dropWorkingKeys(run);
  return "failed";
}

async function dropWorkingKeys({ ctl, spec }: RunEnding): Promise<void> {
  await ctl.redis.del(ctl.keys.batchResults(spec.id), ctl.keys.batchReplies(spec.id)).catch(() => undefined);
}
