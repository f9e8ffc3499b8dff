/**
 * Records stored as JSON in Redis: parsed on the way out, and swapped only if unchanged since they
 * were read. Records that do not parse (bad JSON, a bad name, a missing field) are skipped by
 * listings and reported here instead of failing for everyone: each is logged once per process
 * with its key and what is wrong (never its contents), and counted for the
 * `platform_invalid_records_total` metric.
 */
import type { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { logger } from "../telemetry/log.ts";
import type { RedisClient } from "./connection.ts";
import { LuaScript } from "./scripts.ts";

const swapField = new LuaScript(import.meta.url, "swap-field");
const updateActive = new LuaScript(import.meta.url, "update-if-active");

/** Replaces `field` of `hash` with `next` if it still holds `read`; false when it changed meanwhile. */
export async function swapStored(redis: RedisClient, hash: string, field: string, read: string, next: string) {
  return (await swapField.run(redis, [hash], [field, read, next])) === 1;
}

/**
 * Writes `fields` (objects as JSON, undefined ones skipped) to the job hash `key` unless its
 * `state.field` is missing or one of `state.final`; false when it was (nothing written).
 */
export async function updateIfActive(
  redis: RedisClient,
  key: string,
  state: { field: string; final: readonly string[] },
  fields: Record<string, unknown>,
): Promise<boolean> {
  const args: string[] = [];
  for (const [field, value] of Object.entries(fields)) {
    if (value === undefined) continue;
    args.push(field, typeof value === "object" ? JSON.stringify(value) : String(value));
  }
  if (args.length === 0) return true;
  return (await updateActive.run(redis, [key], [state.field, state.final.length, ...state.final, ...args])) === 1;
}

const log = logger("records");

export type InvalidEntryKind =
  | "endpoint"
  | "model"
  | "model_version"
  | "replica"
  | "api_key"
  | "abtest"
  | "org"
  | "user"
  | "token"
  | "proto_package"
  | "proto_version"
  | "image"
  | "service"
  | "service_replica"
  | "evaluation"
  | "evaluation_result";

export type InvalidEntry = { kind: InvalidEntryKind; key: string; error: string };

const seen = new Set<string>();
const counts = new Map<InvalidEntryKind, number>();

export function reportInvalid(record: InvalidEntry): void {
  const id = `${record.kind}\n${record.key}\n${record.error}`;
  if (seen.has(id)) return;
  if (seen.size > 10_000) seen.clear();
  seen.add(id);
  counts.set(record.kind, (counts.get(record.kind) ?? 0) + 1);
  log.warn(
    { kind: record.kind, key: record.key },
    `skipping invalid ${record.kind} record ${record.key}: ${record.error}`,
  );
}

/** Distinct invalid records this process has met, by kind. */
export function invalidEntryCounts(): ReadonlyMap<InvalidEntryKind, number> {
  return counts;
}

/** Parses one stored JSON record; an invalid one is reported and comes back as its error. */
export function parseStored<T extends z.ZodType>(
  schema: T,
  raw: string,
  kind: InvalidEntryKind,
  key: string,
): { ok: true; value: z.infer<T> } | { ok: false; invalid: InvalidEntry } {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    // The parser's message quotes the contents: say only where it broke.
    const invalid: InvalidEntry = { kind, key, error: "not valid JSON" };
    reportInvalid(invalid);
    return { ok: false, invalid };
  }
  const parsed = schema.safeParse(json);
  if (parsed.success) return { ok: true, value: parsed.data };
  const invalid: InvalidEntry = { kind, key, error: describeIssues(parsed.error) };
  reportInvalid(invalid);
  return { ok: false, invalid };
}
