/**
 * Records in Redis that do not parse (bad JSON, a bad name, a missing field):
 * listings skip them and report them here instead of failing for everyone.
 * Each one is logged once per process with its key and what is wrong (never
 * its contents), and counted for the `platform_invalid_records_total` metric.
 */
import type { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { logger } from "../telemetry/log.ts";

const log = logger("records");

export type InvalidRecordKind = "endpoint" | "model" | "model_version" | "replica" | "api_key" | "abtest";

export type InvalidRecord = { kind: InvalidRecordKind; key: string; error: string };

const seen = new Set<string>();
const counts = new Map<InvalidRecordKind, number>();

export function reportInvalid(record: InvalidRecord): void {
  const id = `${record.kind}\n${record.key}\n${record.error}`;
  if (seen.has(id)) return;
  if (seen.size > 10_000) seen.clear();
  seen.add(id);
  counts.set(record.kind, (counts.get(record.kind) ?? 0) + 1);
  log.warn({ kind: record.kind, key: record.key }, `skipping invalid ${record.kind} record ${record.key}: ${record.error}`);
}

/** Distinct invalid records this process has met, by kind. */
export function invalidRecordCounts(): ReadonlyMap<InvalidRecordKind, number> {
  return counts;
}

/** Parses one stored JSON record; an invalid one is reported and comes back as its error. */
export function parseStored<T extends z.ZodType>(
  schema: T,
  raw: string,
  kind: InvalidRecordKind,
  key: string,
): { ok: true; value: z.infer<T> } | { ok: false; invalid: InvalidRecord } {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    // The parser's message quotes the contents: say only where it broke.
    const invalid: InvalidRecord = { kind, key, error: "not valid JSON" };
    reportInvalid(invalid);
    return { ok: false, invalid };
  }
  const parsed = schema.safeParse(json);
  if (parsed.success) return { ok: true, value: parsed.data };
  const invalid: InvalidRecord = { kind, key, error: describeIssues(parsed.error) };
  reportInvalid(invalid);
  return { ok: false, invalid };
}
