/**
 * Replica heartbeats. Each worker writes its record with a TTL a few beats
 * long; a replica that stops beating (killed, hung, partitioned) drops out of
 * every count once its record expires, whichever backend ran it.
 */
import { Replica } from "./record.ts";
import { parseStored } from "../redis/stored.ts";
import { DEFAULT_HEARTBEAT_MS } from "../settings/queue.ts";
import type { Control } from "../redis/connection.ts";

/** A record outlives a few missed beats (a GC pause, a Redis blip) but not a dead replica for long. */
export const HEARTBEAT_TTL_BEATS = 4;
/** A replica that failed to start stays visible this long, so `status` can say why. */
export const FAILED_RECORD_TTL_MS = 120_000;

/** `heartbeatMs`: the writer's beat (settings.heartbeats.intervalMs); the record expires after a few missed ones. */
export async function writeReplica(
  ctl: Control,
  record: Replica,
  heartbeatMs: number = DEFAULT_HEARTBEAT_MS,
): Promise<void> {
  const ttl = record.state === "failed" ? FAILED_RECORD_TTL_MS : heartbeatMs * HEARTBEAT_TTL_BEATS;
  await ctl.redis
    .multi()
    .set(ctl.keys.replica(record.id), JSON.stringify(record), "PX", ttl)
    .zadd(ctl.keys.replicas(record.endpoint), record.heartbeat, record.id)
    .exec();
}

export async function removeReplica(ctl: Control, endpoint: string, id: string): Promise<void> {
  await ctl.redis.multi().del(ctl.keys.replica(id)).zrem(ctl.keys.replicas(endpoint), id).exec();
}

/** One replica's record while it lives (undefined once expired, removed or unreadable). */
export async function readReplica(ctl: Control, id: string): Promise<Replica | undefined> {
  const raw = await ctl.redis.get(ctl.keys.replica(id));
  if (!raw) return undefined;
  const parsed = parseStored(Replica, raw, "replica", ctl.keys.replica(id));
  return parsed.ok ? parsed.value : undefined;
}

/** Live replica records of an endpoint; expired ones are pruned from the index on the way. */
export async function listReplicas(ctl: Control, endpoint: string): Promise<Replica[]> {
  const ids = await ctl.redis.zrange(ctl.keys.replicas(endpoint), 0, -1);
  if (ids.length === 0) return [];
  const raws = await ctl.redis.mget(ids.map((id) => ctl.keys.replica(id)));
  const live: Replica[] = [];
  const gone: string[] = [];
  for (const [i, raw] of raws.entries()) {
    const id = ids[i] as string;
    if (!raw) {
      gone.push(id);
      continue;
    }
    // A record that does not parse is skipped and reported; it expires like any other.
    const parsed = parseStored(Replica, raw, "replica", ctl.keys.replica(id));
    if (parsed.ok) live.push(parsed.value);
  }
  if (gone.length > 0) await ctl.redis.zrem(ctl.keys.replicas(endpoint), ...gone);
  return live;
}
