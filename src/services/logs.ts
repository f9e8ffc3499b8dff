/**
 * Services' log lines (docs/services.md, "Logs"): one Redis stream per service, each entry a line
 * with its replica and tag, capped at MAX_LOG_LINES (oldest out) and each line at MAX_LINE_BYTES,
 * so a chatty service cannot grow Redis. The backend appends what replicas print, with the
 * service's secret values masked; `logs` reads the tail and follows with a blocking read.
 */
import type { Control, RedisClient } from "../redis/connection.ts";
import { serviceKey } from "./store.ts";

export const MAX_LOG_LINES = 10_000;
export const MAX_LINE_BYTES = 4096;

export type LogLine = { at: number; replica: string; tag: string; text: string };

export async function appendLog(
  ctl: Control,
  org: string,
  name: string,
  line: { replica: string; tag: string; text: string },
): Promise<void> {
  const text =
    Buffer.byteLength(line.text) > MAX_LINE_BYTES
      ? `${Buffer.from(line.text).subarray(0, MAX_LINE_BYTES).toString("utf8")}…`
      : line.text;
  await ctl.redis.xadd(
    ctl.keys.serviceLogs(serviceKey(org, name)),
    "MAXLEN",
    "~",
    String(MAX_LOG_LINES),
    "*",
    "r",
    line.replica,
    "t",
    line.tag,
    "l",
    text,
  );
}

type Entry = [id: string, fields: string[]];

function toLine([id, fields]: Entry): LogLine {
  const get = (k: string) => fields[fields.indexOf(k) + 1] ?? "";
  return { at: Number(id.split("-")[0]), replica: get("r"), tag: get("t"), text: get("l") };
}

export type LogQuery = { tail: number; sinceMs?: number; replica?: string };

/** The last `tail` lines (after `sinceMs` ago, of one replica), oldest first, and the stream position after them. */
export async function readLogs(
  ctl: Control,
  org: string,
  name: string,
  query: LogQuery,
  now = Date.now(),
): Promise<{ lines: LogLine[]; cursor: string }> {
  const key = ctl.keys.serviceLogs(serviceKey(org, name));
  const start = query.sinceMs === undefined ? "-" : String(now - query.sinceMs);
  // Newest first, so the tail is one bounded read; a replica filter may need more entries.
  const entries = (await ctl.redis.xrevrange(
    key,
    "+",
    start,
    "COUNT",
    query.replica ? MAX_LOG_LINES : query.tail,
  )) as Entry[];
  const cursor = entries[0]?.[0] ?? "$";
  const lines = entries
    .map(toLine)
    .filter((l) => !query.replica || l.replica === query.replica)
    .slice(0, query.tail)
    .reverse();
  return { lines, cursor: cursor === "$" ? String(now) : cursor };
}

/** Lines after `cursor`, waiting up to `blockMs` for the first; on its own connection (it blocks). */
export async function followLogs(
  reader: RedisClient,
  ctl: Control,
  org: string,
  name: string,
  cursor: string,
  blockMs: number,
  replica?: string,
): Promise<{ lines: LogLine[]; cursor: string }> {
  const key = ctl.keys.serviceLogs(serviceKey(org, name));
  const answer = (await reader.xread("COUNT", 500, "BLOCK", blockMs, "STREAMS", key, cursor)) as
    | [string, Entry[]][]
    | null;
  const entries = answer?.[0]?.[1] ?? [];
  return {
    lines: entries.map(toLine).filter((l) => !replica || l.replica === replica),
    cursor: entries.at(-1)?.[0] ?? cursor,
  };
}
