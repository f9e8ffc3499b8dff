/**
 * One run of a batch job by one coordinator, from its checkpoint to the end
 * (or until it is cancelled, fails, or is handed to another process).
 *
 * The input is streamed from the checkpoint's byte offset. Records are grouped
 * into batches of `batch_size`; up to `concurrency` are in flight at once, and
 * a later batch may start while an earlier one finishes, but batches are
 * written strictly in order: a batch's part is written, then the checkpoint
 * moves past it. Only the few open batches are held in memory.
 *
 * What the storage policy judged is what the job uses: a local input is read
 * from one handle whose identity is the object judged, and the parts
 * directory is held open and judged again before every part written, the
 * assembly and the clean-up (a client can write in its output directory too:
 * run-checks.ts). The output is assembled from the parts at the end (run-end.ts, assemble.ts).
 */
import type { SamplingParams } from "../contracts/job.ts";
import type { SchemaLimits } from "../contracts/schema-limits.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { resolveModelVersion } from "../models/versions.ts";
import { taskOf } from "../models/record.ts";
import { isStorageError, type ObjectStore } from "../storage/index.ts";
import type { StoragePolicy } from "../storage/policy.ts";
import { formatFor } from "./formats.ts";
import { pictureFormat, placePicture } from "./picture-records.ts";
import { isBlank, readLines } from "../files/jsonl.ts";
import type { LineFormat, Outcome, Work } from "./lines.ts";
import { type OutputLocation, withStorageRetries } from "./output.ts";
import {
  BatchFailure,
  checkDeployed,
  checkInput,
  closeInput,
  countRecords,
  firstCheckpoint,
  type Input,
  openInput,
  openOutput,
  queueServing,
  readInput,
  resolveVersion,
} from "./prepare.ts";
import { RecordJobs } from "./record-jobs.ts";
import { cancelBeforeStart, failRun, finishCancelled, finishRun, type RunEnd, type RunEnding } from "./run-end.ts";
import { asFailure, checkParts, checkUris } from "./run-checks.ts";
import { BatchCheckpoint } from "./record.ts";
import {
  type BatchSpec,
  cancelRequested,
  inputUri,
  isFinal,
  NOT_RESUMABLE,
  outputUri,
  readRecord,
  readSpec,
  updateIfActive,
} from "./store.ts";
import { Changes, Meter } from "./throughput.ts";

type StopReason = "cancel" | "handoff" | "superseded" | "fatal";

type Slot = { line: number; id: string; sent: boolean; outcome?: Outcome };
type Batch = {
  index: number;
  slots: Slot[];
  pending: number;
  closed: boolean;
  lastLine: number;
  end: number;
  succeeded: number;
  failed: number;
};

const TICK_MS = 500;

// Monotonic: a coordinator that lost its job (and lags) can never move the checkpoint back.
const advanceCheckpoint = new LuaScript(import.meta.url, "advance-checkpoint");

/**
 * `storage`: the roots as configured now, against which a job's client-named URIs are checked again;
 * `schemaLimits`: the bounds on a line's JSON schemas, checked as each line is read;
 * `artifacts`: the artifact store, where replicas write an image model's PNGs (picture-records.ts).
 */
export async function runBatch(
  ctl: Control,
  batchId: string,
  handoff: AbortSignal,
  storage: StoragePolicy,
  schemaLimits: SchemaLimits,
  artifacts?: ObjectStore,
): Promise<RunEnd> {
  const spec = await readSpec(ctl, batchId);
  if (!spec) return "failed";
  return new BatchRun(ctl, spec, handoff, storage, schemaLimits, artifacts).execute();
}

class BatchRun {
  private readonly ctl: Control;
  private readonly spec: BatchSpec;
  private readonly storage: StoragePolicy;
  private format: LineFormat;
  private readonly artifacts: ObjectStore | undefined;
  private readonly changes = new Changes();
  private readonly meter = new Meter();
  private readonly open: Batch[] = [];
  private checkpoint: BatchCheckpoint = {
    next_line: 1,
    next_byte: 0,
    parts: 0,
    succeeded: 0,
    failed: 0,
    input_size: 0,
  };
  private input: Input | undefined;
  private out: OutputLocation | undefined;
  private jobs: RecordJobs | undefined;
  private sending = 0;
  private openSucceeded = 0;
  private openFailed = 0;
  private flushing = false;
  private flushAgain = false;
  private stopReason: StopReason | undefined;
  private fatalError: unknown;

  constructor(
    ctl: Control,
    spec: BatchSpec,
    handoff: AbortSignal,
    storage: StoragePolicy,
    schemaLimits: SchemaLimits,
    artifacts: ObjectStore | undefined,
  ) {
    this.ctl = ctl;
    this.artifacts = artifacts;
    this.spec = spec;
    this.storage = storage;
    this.format = formatFor(spec, schemaLimits);
    const onAbort = () => this.stop(handoff.reason === "superseded" ? "superseded" : "handoff");
    if (handoff.aborted) onAbort();
    handoff.addEventListener("abort", onAbort, { once: true });
  }

  async execute(): Promise<RunEnd> {
    const record = await readRecord(this.ctl, this.spec.id);
    if (!record) return "failed";
    if (isFinal(record.state))
      return record.state === "cancelled" ? "cancelled" : record.state === "failed" ? "failed" : "completed";
    if (await cancelRequested(this.ctl, this.spec.id)) return cancelBeforeStart(this.ending());
    await updateIfActive(this.ctl, this.spec.id, { state: "running", started: record.started ?? Date.now() });
    const ticker = this.startTicker();
    try {
      const input = await checkUris(this.spec, this.storage);
      const version = record.resolved_version ?? (await resolveVersion(this.ctl, this.spec));
      await updateIfActive(this.ctl, this.spec.id, { resolved_version: version });
      await checkDeployed(this.ctl, this.spec, version);
      await this.useImageRecords(version);
      // The object judged, by its identity: a name swapped since is input_changed.
      this.input = await openInput(
        input?.uri ?? inputUri(this.spec),
        input?.identity,
        this.spec.input,
        this.storage.s3,
      );
      this.out = await openOutput(
        outputUri(this.spec),
        this.spec.id,
        (out) => checkParts(this.spec, this.storage, out),
        this.storage.s3,
      );
      if (!(await this.loadCheckpoint(this.input))) return await this.afterStop();
      if (this.checkpoint.assembled) return await finishRun(this.ending(), "completed");
      const queue = this.spec.queue ?? (await queueServing(this.ctl, this.spec.model, version));
      this.jobs = await RecordJobs.open({
        ctl: this.ctl,
        batchId: this.spec.id,
        model: this.spec.model,
        version,
        queue,
        ...(this.spec.adapter ? { adapter: this.spec.adapter } : {}),
        usage: this.spec.created_by
          ? { key: this.spec.created_by, model: this.spec.openai?.served_model ?? this.spec.model }
          : undefined,
        writtenBefore: () => this.checkpoint.next_line,
      });
      await this.pump(this.input);
      if (this.stopReason) return await this.afterStop();
      return await finishRun(this.ending(), "completed");
    } catch (e) {
      const failure = asFailure(e);
      if (!failure) throw e; // BullMQ retries the run from the checkpoint
      if (NOT_RESUMABLE[failure.code] !== undefined) {
        await this.jobs?.cancelInFlight();
        await this.forgetOpen();
      }
      // Otherwise records in flight finish and their answers are kept for the resumed run.
      return await failRun(this.ending(), failure);
    } finally {
      clearInterval(ticker);
      await this.jobs?.close();
      if (this.input) await closeInput(this.input);
      this.input?.store.close();
      this.out?.store.close();
    }
  }

  /** An image model's records are image records (picture-records.ts), whose PNGs the artifact store holds first. */
  private async useImageRecords(version: string): Promise<void> {
    const record = await resolveModelVersion(this.ctl, this.spec.model, version);
    if (taskOf(record) !== "image") return;
    if (this.spec.openai || !this.artifacts)
      throw new BatchFailure(
        "model_not_text",
        `${this.spec.model}@${version} makes images: OpenAI batch files (/v1/batches) carry text requests; submit image records with \`platform batch\` or POST /v1/batch-jobs (docs/batch.md)`,
      );
    this.format = pictureFormat(record.pipeline);
  }

  private stop(reason: StopReason): void {
    this.stopReason ??= reason;
    this.changes.notify();
  }

  private async until(ready: () => boolean): Promise<void> {
    while (!ready() && !this.stopReason) await this.changes.next();
  }

  /** False when the run was stopped while counting the input. */
  private async loadCheckpoint(input: Input): Promise<boolean> {
    const key = this.ctl.keys.batchCheckpoint(this.spec.id);
    const raw = await this.ctl.redis.get(key);
    if (raw) {
      this.checkpoint = BatchCheckpoint.parse(JSON.parse(raw));
      if (this.checkpoint.input_size !== input.size) {
        throw new BatchFailure(
          "input_changed",
          `${this.spec.input} changed while the job ran (${this.checkpoint.input_size} bytes at the start, ${input.size} now); submit a new job`,
        );
      }
      return true;
    }
    const total = await countRecords(input, () => this.stopReason !== undefined);
    if (total === undefined) return false;
    // The total first: a checkpoint means "counted" to a resumed run.
    await updateIfActive(this.ctl, this.spec.id, { total });
    this.checkpoint = firstCheckpoint(input);
    await this.ctl.redis.set(key, JSON.stringify(this.checkpoint));
    return true;
  }

  private async pump(input: Input): Promise<void> {
    const { concurrency, batch_size } = this.spec;
    const maxOpen = Math.max(2, Math.ceil(concurrency / batch_size) + 1);
    let current: Batch | undefined;
    for await (const line of readLines(readInput(input, this.checkpoint.next_byte), {
      line: this.checkpoint.next_line,
      byte: this.checkpoint.next_byte,
    })) {
      if (this.stopReason) break;
      if (isBlank(line)) continue;
      if (!current) {
        await this.until(() => this.open.length < maxOpen);
        if (this.stopReason) break;
        current = {
          index: this.checkpoint.parts + this.open.length,
          slots: [],
          pending: 0,
          closed: false,
          lastLine: 0,
          end: 0,
          succeeded: 0,
          failed: 0,
        };
        this.open.push(current);
      }
      const record = this.format.parse(line);
      const slot: Slot = { line: line.lineNumber, id: record.id, sent: false };
      current.slots.push(slot);
      current.lastLine = line.lineNumber;
      current.end = line.end;
      if (record.ok) {
        await this.until(() => this.sending < concurrency);
        if (this.stopReason) break;
        this.send(current, slot, record.work, { ...this.spec.sampling, ...record.params });
      } else {
        this.settle(current, slot, { ok: false, code: record.code, message: record.message });
      }
      if (current.slots.length >= batch_size) {
        current.closed = true;
        current = undefined;
        this.kickFlush();
      }
    }
    if (this.stopReason) return;
    if (current) {
      current.closed = true;
      this.kickFlush();
    }
    await this.until(() => this.open.length === 0 && !this.flushing);
  }

  private send(batch: Batch, slot: Slot, work: Work, params: SamplingParams): void {
    const jobs = this.jobs as RecordJobs;
    this.sending++;
    batch.pending++;
    slot.sent = true;
    jobs
      .run(slot.line, slot.id, work, params)
      .then((outcome) => (work.kind === "image" ? this.placePicture(slot.id, outcome) : outcome))
      .then(
        (outcome) => {
          this.sending--;
          batch.pending--;
          if (this.stopReason === "cancel") return; // answers cut short by the cancel are not results
          this.settle(batch, slot, outcome);
          this.kickFlush();
        },
        (e: unknown) => {
          this.sending--;
          this.fatal(e);
        },
      );
  }

  /** An image record's PNG, from the artifact store to the output, before its line can be written. */
  private async placePicture(id: string, outcome: Outcome): Promise<Outcome> {
    const out = this.out as OutputLocation;
    await checkParts(this.spec, this.storage, out);
    try {
      return await withStorageRetries(() => placePicture(this.artifacts as ObjectStore, out, id, outcome));
    } catch (e) {
      if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
      throw e;
    }
  }

  private settle(batch: Batch, slot: Slot, outcome: Outcome): void {
    slot.outcome = outcome;
    if (outcome.ok) {
      batch.succeeded++;
      this.openSucceeded++;
      this.meter.add(1, outcome.tokens);
    } else {
      batch.failed++;
      this.openFailed++;
      this.meter.add(1, 0);
    }
    this.changes.notify();
  }

  private fatal(e: unknown): void {
    this.fatalError ??= e;
    this.stop("fatal");
  }

  /** Writes complete batches in order; one writer at a time, re-run if asked while busy. */
  private kickFlush(): void {
    if (this.flushing) {
      this.flushAgain = true;
      return;
    }
    this.flushing = true;
    void (async () => {
      try {
        do {
          this.flushAgain = false;
          for (let b = this.open[0]; b?.closed && b.pending === 0 && !this.stopReason; b = this.open[0]) {
            await this.writeBatch(b);
            this.open.shift();
            this.changes.notify();
          }
        } while (this.flushAgain && !this.stopReason);
      } catch (e) {
        this.fatal(e);
      } finally {
        this.flushing = false;
        this.changes.notify();
      }
    })();
  }

  private async writeBatch(batch: Batch): Promise<void> {
    const out = this.out as OutputLocation;
    const text = `${batch.slots.map((s) => this.format.render(s, s.outcome as Outcome)).join("\n")}\n`;
    if (this.input) await checkInput(this.input, this.spec.input);
    await checkParts(this.spec, this.storage, out);
    try {
      await withStorageRetries(() => out.store.put(out.partKey(batch.index), text));
    } catch (e) {
      if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
      throw e;
    }
    const next: BatchCheckpoint = {
      ...this.checkpoint,
      next_line: batch.lastLine + 1,
      next_byte: batch.end,
      parts: batch.index + 1,
      succeeded: this.checkpoint.succeeded + batch.succeeded,
      failed: this.checkpoint.failed + batch.failed,
    };
    const key = this.ctl.keys.batchCheckpoint(this.spec.id);
    const advanced = await advanceCheckpoint.run(this.ctl.redis, [key], [JSON.stringify(next), String(next.parts)]);
    if (advanced !== 1) {
      this.stop("superseded");
      return;
    }
    this.checkpoint = next;
    this.openSucceeded -= batch.succeeded;
    this.openFailed -= batch.failed;
    // Housekeeping: answers now in the part are no longer needed anywhere else.
    const sent = batch.slots.filter((s) => s.sent).map((s) => s.line);
    for (let i = 0; i < sent.length; i += 1000) {
      await this.ctl.redis.hdel(this.ctl.keys.batchResults(this.spec.id), ...sent.slice(i, i + 1000).map(String));
    }
    await this.jobs?.forget(sent);
    await this.jobs?.trim();
  }

  private async afterStop(): Promise<RunEnd> {
    // A part being written is finished first, so its checkpoint is not lost.
    while (this.flushing) await this.changes.next();
    switch (this.stopReason) {
      case "fatal":
        throw this.fatalError;
      case "cancel":
        await this.jobs?.cancelInFlight();
        await this.forgetOpen();
        return finishCancelled(this.ending());
      case "superseded":
        return "superseded";
      default:
        // Nothing moves until another coordinator resumes: no rate to show meanwhile.
        await this.progress();
        await updateIfActive(this.ctl, this.spec.id, { throughput: null });
        return "handed_off";
    }
  }

  private async forgetOpen(): Promise<void> {
    const lines = this.open.flatMap((b) => b.slots.filter((s) => s.sent).map((s) => s.line));
    await this.jobs?.forget(lines).catch(() => undefined);
  }

  /** What the run's ends (run-end.ts) read of it. */
  private ending(): RunEnding {
    const { ctl, spec, storage, out, input, format, checkpoint } = this;
    return { ctl, spec, storage, out, input, format, checkpoint };
  }

  private async progress(): Promise<boolean> {
    return updateIfActive(this.ctl, this.spec.id, {
      succeeded: this.checkpoint.succeeded + this.openSucceeded,
      failed: this.checkpoint.failed + this.openFailed,
      in_flight: this.jobs?.inFlight ?? 0,
      throughput: this.meter.sample(),
    });
  }

  private startTicker(): NodeJS.Timeout {
    let busy = false;
    return setInterval(() => {
      if (busy || this.stopReason) return;
      busy = true;
      void (async () => {
        try {
          if (await cancelRequested(this.ctl, this.spec.id)) this.stop("cancel");
          else if (!(await this.progress())) this.stop("superseded");
        } catch {
          // Redis blip: progress is reported on the next tick.
        } finally {
          busy = false;
        }
      })();
    }, TICK_MS);
  }
}
