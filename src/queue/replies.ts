/**
 * The reply-stream codec: a worker appends each job event as one entry
 * `job <id> e <json>` to the stream the job names (`reply.stream`), and
 * producers read those entries back by field name. Both sides live here so
 * the format is written and read in one place (docs/queue-contract.md).
 */
import type { RedisClient } from "../redis/connection.ts";
import { JobEvent, REPLY_STREAM_TTL_MS } from "../contracts/job.ts";
import { logger } from "../telemetry/log.ts";
import type { EntryHandler } from "./stream-reader.ts";

const log = logger("queue");

/** A reply stream holds about this many entries at most; a reader that falls this far behind loses the oldest. */
const REPLY_STREAM_MAXLEN = "100000";

export function encodeReplyEntry(jobId: string, event: JobEvent): string[] {
  return ["job", jobId, "e", JSON.stringify(event)];
}

/**
 * One entry, read by field name. Anyone who can write to Redis can append anything, so a reader
 * gets `{ problem }` for an entry it cannot use — to log and skip; one bad entry must never stop
 * the reader.
 */
export function decodeReplyEntry(fields: string[]): { jobId: string; event: JobEvent } | { problem: string } {
  const named = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) named.set(fields[i] as string, fields[i + 1] as string);
  const jobId = named.get("job");
  const raw = named.get("e");
  if (!jobId || raw === undefined) return { problem: "missing the job or e field" };
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return { problem: `job ${jobId}: the event is not valid JSON` };
  }
  const parsed = JobEvent.safeParse(json);
  return parsed.success ? { jobId, event: parsed.data } : { problem: `job ${jobId}: not a known event` };
}

/**
 * The worker's side: appends the event and keeps the stream alive for REPLY_STREAM_TTL_MS after
 * it. Two commands sent together on one connection, in order, so the TTL always finds the
 * stream; no MULTI/EXEC around them: nothing reads the stream between the two.
 */
export async function appendReply(redis: RedisClient, stream: string, jobId: string, event: JobEvent): Promise<void> {
  await Promise.all([
    redis.xadd(stream, "MAXLEN", "~", REPLY_STREAM_MAXLEN, "*", ...encodeReplyEntry(jobId, event)),
    redis.pexpire(stream, REPLY_STREAM_TTL_MS),
  ]);
}

/**
 * A StreamReader handler for a reply stream: each usable entry goes to `onEvent` (all of one
 * read at once), each malformed one is logged under `label` with its entry id and skipped.
 */
export function replyHandler(
  label: string,
  onEvent: (jobId: string, event: JobEvent) => void | Promise<void>,
): EntryHandler {
  return async (entries) => {
    await Promise.all(
      entries.map(([entryId, fields]) => {
        const entry = decodeReplyEntry(fields);
        if ("problem" in entry) {
          log.error({ reader: label, entry_id: entryId }, `${label}: skipped reply entry ${entryId}: ${entry.problem}`);
          return undefined;
        }
        return onEvent(entry.jobId, entry.event);
      }),
    );
  };
}
