/**
 * Evaluation records and results in Redis. Records: one JSON string per job, indexed per
 * organization and trimmed to the newest MAX_KEPT finished ones (with their per-item scores).
 * Results: per evaluated target (`<model>@<version>`, or an adapter's `<name>@<version>`), the
 * latest of each metric per organization.
 */
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { parseStored } from "../redis/stored.ts";
import { EvaluationRecord, type ItemScore, ItemScore as ItemScoreSchema, StoredResult } from "./record.ts";

// Compare-and-set: coordinators' progress ticks, their final word and cancels race on one record.
const swap = new LuaScript(import.meta.url, "swap");

/** Records kept per organization; the oldest finished ones go first. */
export const MAX_KEPT = 200;
/** A finished evaluation's per-item scores (what a paired comparison needs) are kept this long. */
export const SCORES_TTL_S = 14 * 86_400;

export async function saveRecord(ctl: Control, record: EvaluationRecord): Promise<void> {
  await ctl.redis.set(ctl.keys.evaluation(record.id), JSON.stringify(record));
  await ctl.redis.zadd(ctl.keys.evaluations(record.org), record.created, record.id);
  await trim(ctl, record.org);
}

export async function readRecord(ctl: Control, id: string): Promise<EvaluationRecord | undefined> {
  const raw = await ctl.redis.get(ctl.keys.evaluation(id));
  if (!raw) return undefined;
  const parsed = parseStored(EvaluationRecord, raw, "evaluation", ctl.keys.evaluation(id));
  return parsed.ok ? parsed.value : undefined;
}

/** Changes a record that has not finished; undefined when it has (or is gone). */
export async function updateRecord(
  ctl: Control,
  id: string,
  change: (r: EvaluationRecord) => Partial<EvaluationRecord>,
): Promise<EvaluationRecord | undefined> {
  const key = ctl.keys.evaluation(id);
  for (let tries = 0; tries < 20; tries++) {
    const raw = await ctl.redis.get(key);
    const parsed = raw ? parseStored(EvaluationRecord, raw, "evaluation", key) : undefined;
    if (!raw || !parsed?.ok || isFinal(parsed.value.state)) return undefined;
    const next = { ...parsed.value, ...change(parsed.value) };
    if ((await swap.run(ctl.redis, [key], [raw, JSON.stringify(next)])) === 1) return next;
  }
  return undefined;
}

/** Once finished, the scores live on for comparisons a while, then go (a comparison is then unpaired). */
export async function expireScores(ctl: Control, id: string): Promise<void> {
  await ctl.redis.expire(ctl.keys.evaluationScores(id), SCORES_TTL_S);
}

export function isFinal(state: EvaluationRecord["state"]): boolean {
  return state === "succeeded" || state === "failed" || state === "cancelled";
}

/** Newest first. */
export async function listIds(ctl: Control, org: string, limit: number): Promise<string[]> {
  return ctl.redis.zrevrange(ctl.keys.evaluations(org), 0, limit - 1);
}

async function trim(ctl: Control, org: string): Promise<void> {
  const index = ctl.keys.evaluations(org);
  const excess = (await ctl.redis.zcard(index)) - MAX_KEPT;
  if (excess <= 0) return;
  for (const id of await ctl.redis.zrange(index, 0, excess + 20)) {
    const r = await readRecord(ctl, id);
    if (r && !isFinal(r.state)) continue;
    await ctl.redis.del(ctl.keys.evaluation(id), ctl.keys.evaluationScores(id));
    await ctl.redis.zrem(index, id);
    if ((await ctl.redis.zcard(index)) <= MAX_KEPT) return;
  }
}

export async function saveScore(ctl: Control, id: string, item: number, score: ItemScore): Promise<void> {
  await ctl.redis.hset(ctl.keys.evaluationScores(id), String(item), JSON.stringify(score));
}

/** Per item index; an unreadable entry is left out (the item is scored again). */
export async function readScores(ctl: Control, id: string): Promise<Map<number, ItemScore>> {
  const all = await ctl.redis.hgetall(ctl.keys.evaluationScores(id));
  const out = new Map<number, ItemScore>();
  for (const [field, raw] of Object.entries(all)) {
    try {
      const parsed = ItemScoreSchema.safeParse(JSON.parse(raw));
      if (parsed.success) out.set(Number(field), parsed.data);
    } catch {
      // scored again
    }
  }
  return out;
}

/** `target`: `<model>@<version>`, or the adapter's `<name>@<version>`. */
export async function saveResult(ctl: Control, target: string, result: StoredResult): Promise<void> {
  await ctl.redis.hset(ctl.keys.evaluationResults(target), `${result.org}\t${result.metric}`, JSON.stringify(result));
  await ctl.redis.sadd(ctl.keys.evaluationTargets, target);
}

/** The latest result of each metric (and organization) on `target`; `org` absent: every organization's. */
export async function readResults(ctl: Control, target: string, org?: string): Promise<StoredResult[]> {
  const all = await ctl.redis.hgetall(ctl.keys.evaluationResults(target));
  const out: StoredResult[] = [];
  for (const [field, raw] of Object.entries(all)) {
    if (org !== undefined && !field.startsWith(`${org}\t`)) continue;
    const parsed = parseStored(
      StoredResult,
      raw,
      "evaluation_result",
      `${ctl.keys.evaluationResults(target)} ${field}`,
    );
    if (parsed.ok) out.push(parsed.value);
  }
  return out.sort((a, b) => a.metric.localeCompare(b.metric) || b.finished - a.finished);
}

/** Every target with results. */
export async function resultTargets(ctl: Control): Promise<string[]> {
  return (await ctl.redis.smembers(ctl.keys.evaluationTargets)).sort();
}
