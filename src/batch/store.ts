/**
 * Batch job records in Redis. One hash per job with a field per concern, so
 * the coordinator's progress writes and a user's cancel request never
 * overwrite each other; a zset orders the jobs for listing.
 */
import { fileURLToPath } from "node:url";
import {
  BatchCheckpoint,
  BatchJobError,
  BatchJob,
  BatchSampling,
  type BatchState,
  BatchThroughput,
  FINAL_BATCH_STATES,
} from "./record.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { updateIfActive as updateActiveHash } from "../redis/stored.ts";
import type { S3Settings } from "../storage/index.ts";
import type { StorageViewer } from "../storage/policy.ts";
import { DEFAULT_ORG } from "../contracts/orgs.ts";
import type { ApiKeyRole } from "../keys/record.ts";
import { BatchResultFiles } from "../files/store.ts";
import { type OutputLocation, outputLocation } from "./output.ts";

/** A job created through the OpenAI Batch API shape (/v1/batches): its lines are OpenAI requests. */
export type OpenAiSpec = {
  endpoint: "/v1/completions" | "/v1/chat/completions" | "/v1/responses";
  /** The name requests use as `body.model` (an endpoint name, as in /v1/completions). */
  served_model: string;
  input_file_id: string;
  completion_window: string;
  metadata: Record<string, string> | null;
};

/** The fields fixed at creation. */
export type BatchSpec = {
  id: string;
  model: string;
  version: string;
  input: string;
  output: string;
  concurrency: number;
  batch_size: number;
  sampling: BatchSampling;
  created_by: string | null;
  /** The creator's organization; absent on jobs older than organizations (and trusted callers'): the install's own. */
  org?: string;
  created: number;
  /** The model queue its records go to (engines.ts `endpointQueueName`); absent on older jobs: the version's default. */
  queue?: string;
  openai?: OpenAiSpec;
  /** A LoRA adapter of `model`@`version` every record applies (`<name>@<version>`, docs/adapters.md). */
  adapter?: string;
  /** Where the input really is (symlinks resolved); absent on jobs older than storage confinement: `input`. */
  input_uri?: string;
  /** Where the output really goes; absent: `output`. */
  output_uri?: string;
  overwrite?: boolean;
  /**
   * The key whose storage areas the client-named URIs must stay in: the
   * coordinator checks them again when it runs. Absent: server-chosen URIs.
   */
  scope?: { key_id: string; role: ApiKeyRole; org?: string; input: boolean; output: boolean };
  /** [real location prefix, name shown to the client] pairs, so messages never name a server path the client did not. */
  shown?: [string, string][];
};

/** Whose storage areas a job's client-named URIs are judged against (every run checks them again). */
export function scopeViewer(scope: NonNullable<BatchSpec["scope"]>): StorageViewer {
  return { id: scope.key_id, role: scope.role, org: scope.org ?? DEFAULT_ORG };
}

export function inputUri(spec: BatchSpec): string {
  return spec.input_uri ?? spec.input;
}

export function outputUri(spec: BatchSpec): string {
  return spec.output_uri ?? spec.output;
}

/**
 * `text` with every real location replaced by the name the client knows it
 * by, in either form a message may carry it: the file:// URL or the plain
 * server path it stands for (Node's own errors quote paths).
 */
export function showPaths(spec: BatchSpec, text: string): string {
  const pairs: [string, string][] = [];
  for (const [real, shown] of spec.shown ?? []) {
    pairs.push([real, shown]);
    const path = plainPath(real);
    if (path !== undefined) pairs.push([path, shown]);
  }
  let out = text;
  for (const [real, shown] of pairs.sort((a, b) => b[0].length - a[0].length)) out = out.split(real).join(shown);
  return out;
}

function plainPath(uri: string): string | undefined {
  if (!uri.startsWith("file:")) return undefined;
  try {
    const path = fileURLToPath(uri);
    return uri.endsWith("/") && !path.endsWith("/") ? `${path}/` : path;
  } catch {
    return undefined;
  }
}

/**
 * A job failure whose cause may name server paths, Redis addresses or
 * library text: the cause is logged under the job id, and the record gets a
 * fixed message pointing there (as online requests do with their request id).
 */
export function hiddenFailure(jobId: string, code: string, summary: string, cause: unknown): BatchJobError {
  console.error(`[batch ${jobId}] ${code}:`, cause);
  return { code, message: `${summary}; job id ${jobId}, the gateway log has the details` };
}

/**
 * What a failed job keeps: the parts its checkpoint counts (not yet assembled
 * into the result), as the record's `partial` and counts. `out`: the job's
 * open output location, if the caller has one. Empty when nothing is kept or
 * the checkpoint cannot be read (the failure is recorded either way).
 */
export async function keptPartial(
  ctl: Control,
  spec: BatchSpec,
  out?: OutputLocation,
  s3: S3Settings = {},
): Promise<Pick<BatchProgress, "partial" | "succeeded" | "failed">> {
  const raw = await ctl.redis.get(ctl.keys.batchCheckpoint(spec.id));
  let checkpoint: BatchCheckpoint | undefined;
  try {
    checkpoint = raw ? BatchCheckpoint.parse(JSON.parse(raw)) : undefined;
  } catch {
    console.error(`[batch ${spec.id}] the checkpoint does not parse; the failure is recorded without what was kept`);
    return {};
  }
  if (!checkpoint || checkpoint.parts === 0 || checkpoint.assembled) return {};
  const location = out ?? outputLocation(outputUri(spec), spec.id, s3);
  try {
    return {
      partial: { records: checkpoint.succeeded + checkpoint.failed, parts_uri: location.partsUri },
      succeeded: checkpoint.succeeded,
      failed: checkpoint.failed,
    };
  } finally {
    if (!out) location.store.close();
  }
}

/** Failures resuming cannot fix, and why (the rest — model, storage, output — can be fixed and the job resumed). */
export const NOT_RESUMABLE: Record<string, string> = {
  input_changed: "the input changed after the job started, so its completed records no longer match it",
  output_exists: "an object already exists at the output and the job may not replace it",
  output_is_input: "the output names the input itself",
};

/** What the coordinator writes as the job advances (all optional). */
export type BatchProgress = {
  state?: Exclude<BatchState, "cancelling">;
  resolved_version?: string;
  output_file?: string;
  total?: number;
  succeeded?: number;
  failed?: number;
  in_flight?: number;
  throughput?: BatchThroughput | null;
  error?: BatchJobError;
  started?: number;
  finished?: number;
  /** Records kept in parts when the job failed, and where (a real location; shown through showPaths). */
  partial?: { records: number; parts_uri: string };
  resumable?: boolean;
  /** A /v1/batches job's output and error files, set with its final state (completed or cancelled with results). */
  openai_files?: BatchResultFiles;
};

export async function createRecord(ctl: Control, spec: BatchSpec): Promise<void> {
  await ctl.redis
    .multi()
    .hset(ctl.keys.batch(spec.id), {
      spec: JSON.stringify(spec),
      state: "queued",
      total: 0,
      succeeded: 0,
      failed: 0,
      in_flight: 0,
    })
    .zadd(ctl.keys.batches, spec.created, spec.id)
    .exec();
}

export async function readSpec(ctl: Control, id: string): Promise<BatchSpec | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.batch(id), "spec");
  return raw ? (JSON.parse(raw) as BatchSpec) : undefined;
}

export async function readRecord(ctl: Control, id: string): Promise<BatchJob | undefined> {
  const fields = await ctl.redis.hgetall(ctl.keys.batch(id));
  return fields.spec ? toRecord(fields) : undefined;
}

/**
 * The files a /v1/batches job ended with; undefined for other jobs, jobs not
 * ended, and jobs that ended before error files existed (one result file).
 */
export async function readResultFiles(ctl: Control, id: string): Promise<BatchResultFiles | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.batch(id), "openai_files");
  if (!raw) return undefined;
  const parsed = BatchResultFiles.safeParse(JSON.parse(raw));
  if (!parsed.success) throw new Error(`batch ${id}: its stored openai_files does not parse`);
  return parsed.data;
}

/**
 * Returns false when the job is already final (nothing was written): writes from a coordinator
 * that lost its job (or lags behind a cancel) must not resurrect a finished job.
 */
export async function updateIfActive(ctl: Control, id: string, progress: BatchProgress): Promise<boolean> {
  return updateActiveHash(ctl.redis, ctl.keys.batch(id), { field: "state", final: FINAL_BATCH_STATES }, progress);
}

// Only a failed job goes back to the queue; what it wrote and its checkpoint stay.
const reopen = new LuaScript(import.meta.url, "reopen-failed");

/** Returns false when the job is no longer failed. */
export async function reopenFailed(ctl: Control, id: string): Promise<boolean> {
  return (await reopen.run(ctl.redis, [ctl.keys.batch(id)], [])) === 1;
}

export async function requestCancel(ctl: Control, id: string): Promise<void> {
  await ctl.redis.hset(ctl.keys.batch(id), "cancel_requested", "1");
}

export async function cancelRequested(ctl: Control, id: string): Promise<boolean> {
  return (await ctl.redis.hget(ctl.keys.batch(id), "cancel_requested")) === "1";
}

export function isFinal(state: BatchState): boolean {
  return FINAL_BATCH_STATES.includes(state);
}

/** Job ids, newest first, starting after `after` (exclusive); `count` at most. */
export async function listIds(ctl: Control, after: string | undefined, count: number): Promise<string[]> {
  let start = 0;
  if (after !== undefined) {
    const rank = await ctl.redis.zrevrank(ctl.keys.batches, after);
    if (rank === null) return [];
    start = rank + 1;
  }
  return ctl.redis.zrevrange(ctl.keys.batches, start, start + count - 1);
}

function toRecord(fields: Record<string, string>): BatchJob {
  const spec = JSON.parse(fields.spec as string) as BatchSpec;
  const stored = (fields.state ?? "queued") as BatchState;
  const cancelling = fields.cancel_requested === "1" && (stored === "queued" || stored === "running");
  const num = (name: string) => Number(fields[name] ?? 0);
  const optionalNum = (name: string) => (fields[name] === undefined ? null : Number(fields[name]));
  return BatchJob.parse({
    object: "batch_job",
    id: spec.id,
    model: spec.model,
    ...(spec.adapter ? { adapter: spec.adapter } : {}),
    version: spec.version,
    resolved_version: fields.resolved_version ?? null,
    input: spec.input,
    output: spec.output,
    output_file: fields.output_file ? showPaths(spec, fields.output_file) : null,
    concurrency: spec.concurrency,
    batch_size: spec.batch_size,
    sampling: BatchSampling.parse(spec.sampling),
    state: cancelling ? "cancelling" : stored,
    counts: {
      total: num("total"),
      succeeded: num("succeeded"),
      failed: num("failed"),
      in_flight: isFinal(stored) ? 0 : num("in_flight"),
    },
    throughput:
      stored === "running" && fields.throughput
        ? BatchThroughput.nullable().parse(JSON.parse(fields.throughput))
        : null,
    error: fields.error ? shownError(spec, BatchJobError.parse(JSON.parse(fields.error))) : null,
    overwrite: spec.overwrite ?? false,
    partial: fields.partial
      ? shownPartial(spec, JSON.parse(fields.partial) as { records: number; parts_uri: string })
      : null,
    resumable: stored === "failed" && fields.resumable === "true",
    created_by: spec.created_by,
    org: spec.org ?? DEFAULT_ORG,
    created: spec.created,
    started: optionalNum("started"),
    finished: optionalNum("finished"),
  });
}

function shownError(spec: BatchSpec, error: BatchJobError): BatchJobError {
  return { code: error.code, message: showPaths(spec, error.message) };
}

function shownPartial(
  spec: BatchSpec,
  partial: { records: number; parts_uri: string },
): { records: number; parts_uri: string } {
  return { records: partial.records, parts_uri: showPaths(spec, partial.parts_uri) };
}
