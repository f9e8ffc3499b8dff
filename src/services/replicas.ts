/**
 * Services' replicas as their backend reports them (`cp:service-replicas:<org>/<name>`): the
 * gateway routes to the ready ones, status and the dashboard show them all. A record not rewritten
 * for REPLICA_STALE_MS belongs to a scaler that is gone (its replicas went with it).
 */
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { REPLICA_STALE_MS, ServiceReplica } from "./record.ts";
import { publishServiceEvent, serviceKey } from "./store.ts";

export async function readReplicas(
  ctl: Control,
  org: string,
  name: string,
  now = Date.now(),
): Promise<ServiceReplica[]> {
  const key = ctl.keys.serviceReplicas(serviceKey(org, name));
  return Object.entries(await ctl.redis.hgetall(key))
    .flatMap(([id, raw]) => {
      const parsed = parseStored(ServiceReplica, raw, "service_replica", `${key}/${id}`);
      return parsed.ok && now - parsed.value.heartbeat <= REPLICA_STALE_MS ? [parsed.value] : [];
    })
    .sort((a, b) => a.started - b.started || a.id.localeCompare(b.id));
}

/** Writes one replica's record; a change of state is announced at once (the gateways reroute). */
export async function writeServiceReplica(
  ctl: Control,
  org: string,
  name: string,
  replica: ServiceReplica,
): Promise<void> {
  const key = ctl.keys.serviceReplicas(serviceKey(org, name));
  const before = await ctl.redis.hget(key, replica.id);
  await ctl.redis.hset(key, replica.id, JSON.stringify(replica));
  const was = before === null ? undefined : (JSON.parse(before) as { state?: string; url?: string });
  if (was?.state !== replica.state || was?.url !== replica.url) await publishServiceEvent(ctl, org, name);
}

export async function removeServiceReplica(ctl: Control, org: string, name: string, id: string): Promise<void> {
  if ((await ctl.redis.hdel(ctl.keys.serviceReplicas(serviceKey(org, name)), id)) > 0)
    await publishServiceEvent(ctl, org, name);
}
