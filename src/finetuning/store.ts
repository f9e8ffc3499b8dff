/**
 * Fine-tuning job records in Redis: one hash per job (a field per concern, so the trainer's
 * progress and a user's cancel never overwrite each other), a zset per organization for listing
 * (bounded: the oldest ended jobs go first), a capped stream of events and a capped list of
 * checkpoints per job.
 */
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { updateIfActive as updateActiveHash } from "../redis/stored.ts";
import type { ObjectStore } from "../storage/store.ts";
import {
  FINAL_STATUSES,
  type FineTuneCheckpoint,
  type FineTuneError,
  type FineTuneEvent,
  type FineTuneSpec,
  type FineTuneStatus,
  type FineTuningJob,
} from "./record.ts";

/** Events kept per job (the oldest are trimmed): a long run logs a step event per step. */
export const MAX_EVENTS = 2000;
/** Checkpoint records kept per job, newest first. */
export const MAX_CHECKPOINTS = 10;

const requeue = new LuaScript(import.meta.url, "requeue");

export type FineTuneProgress = {
  status?: Exclude<FineTuneStatus, "validating_files">;
  started_at?: number;
  finished_at?: number;
  trained_tokens?: number;
  estimated_finish?: number;
  fine_tuned_model?: string;
  result_version?: string;
  error?: FineTuneError;
  restarts?: number;
  /** When a trainer last took the job (each take differs: a requeue read before it changes nothing). */
  taken_at?: number;
};

export async function createRecord(ctl: Control, spec: FineTuneSpec): Promise<void> {
  await ctl.redis
    .multi()
    .hset(ctl.keys.fineTuningJob(spec.id), { spec: JSON.stringify(spec), status: "queued" })
    .zadd(ctl.keys.fineTuningJobs(spec.org), spec.created_at, spec.id)
    .exec();
}

/**
 * Drops the organization's oldest ended jobs beyond `keep`: records, events, checkpoint records, and
 * (given the artifact store) the checkpoints' files. A registered result is a model version: it stays.
 */
export async function trimJobs(ctl: Control, org: string, keep: number, artifacts?: ObjectStore): Promise<void> {
  const count = await ctl.redis.zcard(ctl.keys.fineTuningJobs(org));
  if (count <= keep) return;
  const oldest = await ctl.redis.zrange(ctl.keys.fineTuningJobs(org), 0, count - keep - 1);
  for (const id of oldest) {
    const status = await ctl.redis.hget(ctl.keys.fineTuningJob(id), "status");
    if (status !== null && !FINAL_STATUSES.includes(status as FineTuneStatus)) continue;
    if (artifacts)
      for (const c of await listCheckpoints(ctl, id))
        if (c.key)
          for await (const o of artifacts.list(`${c.key}/`)) await artifacts.delete(o.key).catch(() => undefined);
    await ctl.redis
      .multi()
      .del(ctl.keys.fineTuningJob(id), ctl.keys.fineTuningCheckpoints(id))
      .zrem(ctl.keys.fineTuningJobs(org), id)
      .exec();
    await ctl.redis.del(ctl.keys.fineTuningEvents(id));
  }
}

export type StoredJob = { spec: FineTuneSpec; fields: Record<string, string> };

export async function readJob(ctl: Control, id: string): Promise<StoredJob | undefined> {
  const fields = await ctl.redis.hgetall(ctl.keys.fineTuningJob(id));
  if (!fields.spec) return undefined;
  return { spec: JSON.parse(fields.spec) as FineTuneSpec, fields };
}

/**
 * Returns false when the job has already ended (nothing was written): a trainer that lost its
 * job, or lags behind a cancel, must not bring an ended job back.
 */
export async function updateIfActive(ctl: Control, id: string, progress: FineTuneProgress): Promise<boolean> {
  return updateActiveHash(ctl.redis, ctl.keys.fineTuningJob(id), { field: "status", final: FINAL_STATUSES }, progress);
}

/** A running job back to `queued` (its trainer died), unless a trainer took it after `takenAt` was read. */
export async function requeueIfUntaken(ctl: Control, id: string, takenAt: string | undefined): Promise<boolean> {
  return (await requeue.run(ctl.redis, [ctl.keys.fineTuningJob(id)], [takenAt ?? ""])) === 1;
}

export async function isEnded(ctl: Control, id: string): Promise<boolean> {
  const status = await ctl.redis.hget(ctl.keys.fineTuningJob(id), "status");
  return status === null || FINAL_STATUSES.includes(status as FineTuneStatus);
}

export async function addEvent(
  ctl: Control,
  id: string,
  level: FineTuneEvent["level"],
  message: string,
  data: Record<string, unknown> | null = null,
): Promise<void> {
  await ctl.redis.xadd(
    ctl.keys.fineTuningEvents(id),
    "MAXLEN",
    "~",
    MAX_EVENTS,
    "*",
    "e",
    JSON.stringify({ level, message, data, type: data ? "metrics" : "message" }),
  );
}

/** Newest first, after the event `after` (exclusive), `limit` at most; and whether there are more. */
export async function listEvents(
  ctl: Control,
  id: string,
  after: string | undefined,
  limit: number,
): Promise<{ data: FineTuneEvent[]; has_more: boolean }> {
  const from = after ? `(${after.replace(/^ftevent-/, "")}` : "+";
  let rows: [string, string[]][];
  try {
    rows = (await ctl.redis.xrevrange(ctl.keys.fineTuningEvents(id), from, "-", "COUNT", limit + 1)) as [
      string,
      string[],
    ][];
  } catch {
    rows = []; // an `after` that is not an event id
  }
  const data = rows.slice(0, limit).map(([streamId, values]) => {
    const body = JSON.parse(values[1] ?? "{}") as Pick<FineTuneEvent, "level" | "message" | "data" | "type">;
    return {
      object: "fine_tuning.job.event" as const,
      id: `ftevent-${streamId}`,
      created_at: Math.floor(Number(streamId.split("-")[0]) / 1000),
      ...body,
    };
  });
  return { data, has_more: rows.length > limit };
}

/** Records a checkpoint; returns the ones dropped beyond MAX_CHECKPOINTS (their files may go). */
export async function addCheckpoint(ctl: Control, checkpoint: FineTuneCheckpoint): Promise<FineTuneCheckpoint[]> {
  const key = ctl.keys.fineTuningCheckpoints(checkpoint.fine_tuning_job_id);
  await ctl.redis.lpush(key, JSON.stringify(checkpoint));
  const beyond = await ctl.redis.lrange(key, MAX_CHECKPOINTS, -1);
  if (beyond.length > 0) await ctl.redis.ltrim(key, 0, MAX_CHECKPOINTS - 1);
  return beyond.map((raw) => JSON.parse(raw) as FineTuneCheckpoint);
}

/** Newest first. */
export async function listCheckpoints(ctl: Control, id: string): Promise<FineTuneCheckpoint[]> {
  return (await ctl.redis.lrange(ctl.keys.fineTuningCheckpoints(id), 0, -1)).map(
    (raw) => JSON.parse(raw) as FineTuneCheckpoint,
  );
}

/** Job ids of an organization, newest first, after `after` (exclusive). */
export async function listIds(ctl: Control, org: string, after: string | undefined, count: number): Promise<string[]> {
  let start = 0;
  if (after !== undefined) {
    const rank = await ctl.redis.zrevrank(ctl.keys.fineTuningJobs(org), after);
    if (rank === null) return [];
    start = rank + 1;
  }
  return ctl.redis.zrevrange(ctl.keys.fineTuningJobs(org), start, start + count - 1);
}

/** `waitingFor`: what a queued job waits for beyond a free trainer (jobs.ts knows; the record does not). */
export function toJob({ spec, fields }: StoredJob, waitingFor: "gpu_trainer" | null = null): FineTuningJob {
  const num = (name: string) => (fields[name] === undefined ? null : Number(fields[name]));
  const hp = spec.hyperparameters;
  return {
    id: spec.id,
    object: "fine_tuning.job",
    model: `${spec.base.name}@${spec.base.version}`,
    created_at: Math.floor(spec.created_at / 1000),
    finished_at: num("finished_at") === null ? null : Math.floor((num("finished_at") as number) / 1000),
    fine_tuned_model: fields.fine_tuned_model ?? null,
    organization_id: spec.org,
    result_files: [],
    status: (fields.status ?? "queued") as FineTuneStatus,
    validation_file: spec.validation_file,
    training_file: spec.training_file,
    hyperparameters: hp,
    method: { type: "supervised", supervised: { hyperparameters: hp }, training: spec.method, lora: spec.lora },
    trained_tokens: num("trained_tokens"),
    error: fields.error ? (JSON.parse(fields.error) as FineTuneError) : null,
    seed: spec.seed,
    estimated_finish: num("estimated_finish") === null ? null : Math.floor((num("estimated_finish") as number) / 1000),
    integrations: [],
    metadata: spec.metadata,
    user_provided_suffix: spec.result_name,
    dataset_sha256: spec.dataset_sha256,
    result_version: fields.result_version ?? null,
    resources: { gpu: spec.gpu },
    waiting_for: waitingFor,
  };
}
