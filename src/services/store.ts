/**
 * Deployed services in Redis (docs/services.md): the records (one hash for every organization, so
 * the reconciler reads them in one call; a caller only ever addresses its own organization's),
 * their rollout history, and the release snapshots rollouts start from. Every change publishes the
 * service on `service-events`, which the reconciler and the gateways' directories listen to.
 */
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { type InvalidEntry, parseStored, swapStored } from "../redis/stored.ts";
import { type Release, Rollout, ServiceRecord } from "./record.ts";

/** Services an organization may deploy: each runs processes, so this is about the machines, not Redis. */
export const MAX_SERVICES_PER_ORG = 100;
/** Rollouts kept per service (`rollout history`). */
export const MAX_ROLLOUTS_KEPT = 50;

export const serviceKey = (org: string, name: string) => `${org}/${name}`;

export function serviceNotFound(name: string): PlatformError {
  return new PlatformError(
    404,
    "service_not_found",
    `no service "${name}" in your organization; \`platform dev-center service list\` shows what is deployed`,
    "name",
  );
}

export async function publishServiceEvent(ctl: Control, org: string, name: string): Promise<void> {
  await ctl.redis.publish(ctl.keys.serviceEvents, serviceKey(org, name));
}

/** Every service record that parses (all organizations), and the ones that do not. */
export async function readAllServices(ctl: Control): Promise<{ services: ServiceRecord[]; invalid: InvalidEntry[] }> {
  const services: ServiceRecord[] = [];
  const invalid: InvalidEntry[] = [];
  for (const [field, raw] of Object.entries(await ctl.redis.hgetall(ctl.keys.services))) {
    const parsed = parseStored(ServiceRecord, raw, "service", field);
    if (parsed.ok) services.push(parsed.value);
    else invalid.push(parsed.invalid);
  }
  return {
    services: services.sort((a, b) => serviceKey(a.org, a.name).localeCompare(serviceKey(b.org, b.name))),
    invalid,
  };
}

export async function listServices(ctl: Control, org: string): Promise<ServiceRecord[]> {
  return (await readAllServices(ctl)).services.filter((s) => s.org === org);
}

async function readRaw(ctl: Control, org: string, name: string): Promise<{ raw: string; record: ServiceRecord }> {
  const raw = await ctl.redis.hget(ctl.keys.services, serviceKey(org, name));
  if (raw === null) throw serviceNotFound(name);
  const parsed = parseStored(ServiceRecord, raw, "service", serviceKey(org, name));
  if (!parsed.ok)
    throw new PlatformError(
      500,
      "invalid_record",
      `the stored record of service "${name}" is invalid (${parsed.invalid.error}); delete it and deploy again`,
    );
  return { raw, record: parsed.value };
}

export async function getService(ctl: Control, org: string, name: string): Promise<ServiceRecord> {
  return (await readRaw(ctl, org, name)).record;
}

/** Stores a first deployment; 409 when the name is taken, and the organization's bound holds. */
export async function createService(ctl: Control, record: ServiceRecord): Promise<void> {
  const count = (await listServices(ctl, record.org)).length;
  if (count >= MAX_SERVICES_PER_ORG)
    throw new PlatformError(
      409,
      "service_limit_reached",
      `your organization runs ${count} services, the most the platform allows (${MAX_SERVICES_PER_ORG}); delete one first`,
    );
  const created = await ctl.redis.hsetnx(
    ctl.keys.services,
    serviceKey(record.org, record.name),
    JSON.stringify(ServiceRecord.parse(record)),
  );
  if (created === 0)
    throw new PlatformError(
      409,
      "service_exists",
      `service "${record.name}" is already deployed; roll out a new tag with \`platform dev-center rollout start ${record.name} <tag>\``,
      "name",
    );
  await saveRollout(ctl, record.org, record.name, record.rollout);
  await publishServiceEvent(ctl, record.org, record.name);
}

/**
 * Changes a record with `change` (which may throw to refuse), retrying when another writer got
 * there first; a change returning undefined writes nothing.
 */
export async function updateService(
  ctl: Control,
  org: string,
  name: string,
  change: (record: ServiceRecord) => ServiceRecord | undefined,
): Promise<ServiceRecord> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const { raw, record } = await readRaw(ctl, org, name);
    const next = change(record);
    if (!next) return record;
    const updated = ServiceRecord.parse({ ...next, updated: Date.now() });
    if (await swapStored(ctl.redis, ctl.keys.services, serviceKey(org, name), raw, JSON.stringify(updated))) {
      if (updated.rollout.id !== record.rollout.id || updated.rollout.phase !== record.rollout.phase)
        await saveRollout(ctl, org, name, updated.rollout);
      await publishServiceEvent(ctl, org, name);
      return updated;
    }
  }
  throw new PlatformError(503, "busy", `service "${name}" is being changed by others; try again`, null, 1);
}

/** Writes one rollout into the service's history (the record's latest is written by every change). */
export async function saveRollout(ctl: Control, org: string, name: string, rollout: Rollout): Promise<void> {
  const key = ctl.keys.serviceRollouts(serviceKey(org, name));
  const stale = rollout.id - MAX_ROLLOUTS_KEPT;
  const multi = ctl.redis.multi().hset(key, String(rollout.id), JSON.stringify(rollout));
  if (stale > 0) multi.hdel(key, String(stale));
  await multi.exec();
}

/** The service's rollouts, newest first. */
export async function listRollouts(
  ctl: Control,
  org: string,
  name: string,
  limit = MAX_ROLLOUTS_KEPT,
): Promise<Rollout[]> {
  const key = ctl.keys.serviceRollouts(serviceKey(org, name));
  return Object.entries(await ctl.redis.hgetall(key))
    .flatMap(([id, raw]) => {
      const parsed = parseStored(Rollout, raw, "service", `${key}/${id}`);
      return parsed.ok ? [parsed.value] : [];
    })
    .sort((a, b) => b.id - a.id)
    .slice(0, limit);
}

/** What a release runs with: the variables and the sealed secrets as they were when its rollout started. */
export type ReleaseSnapshot = { env: Record<string, string>; secrets: Record<string, string> };

export async function saveRelease(
  ctl: Control,
  org: string,
  name: string,
  revision: string,
  snapshot: ReleaseSnapshot,
): Promise<void> {
  await ctl.redis.set(ctl.keys.serviceRelease(serviceKey(org, name), revision), JSON.stringify(snapshot));
}

/** Undefined while the rollout that names it is still writing it. */
export async function readRelease(
  ctl: Control,
  org: string,
  name: string,
  revision: string,
): Promise<ReleaseSnapshot | undefined> {
  const raw = await ctl.redis.get(ctl.keys.serviceRelease(serviceKey(org, name), revision));
  return raw === null ? undefined : (JSON.parse(raw) as ReleaseSnapshot);
}

/** Drops release snapshots no rollout can run again: all but the serving, previous and latest ones. */
export async function pruneReleases(ctl: Control, record: ServiceRecord): Promise<void> {
  const keep = new Set([record.current?.revision, record.previous?.revision, record.rollout.release.revision]);
  const newest = record.rollout.id;
  const drop: string[] = [];
  for (let id = Math.max(1, newest - MAX_ROLLOUTS_KEPT); id < newest; id++) {
    if (!keep.has(`r${id}`)) drop.push(ctl.keys.serviceRelease(serviceKey(record.org, record.name), `r${id}`));
  }
  if (drop.length > 0) await ctl.redis.del(...drop);
}

/** Deletes the record and everything kept for it. */
export async function deleteService(ctl: Control, org: string, name: string): Promise<void> {
  const record = await getService(ctl, org, name);
  const id = serviceKey(org, name);
  const releases = Array.from({ length: Math.min(record.rollout.id, MAX_ROLLOUTS_KEPT + 1) }, (_, i) =>
    ctl.keys.serviceRelease(id, `r${record.rollout.id - i}`),
  );
  await ctl.redis.hdel(ctl.keys.services, id);
  await ctl.redis.del(
    ctl.keys.serviceRollouts(id),
    ctl.keys.serviceEnv(id),
    ctl.keys.serviceSecrets(id),
    ctl.keys.serviceLogs(id),
    ctl.keys.serviceReplicas(id),
    ...releases,
  );
  await publishServiceEvent(ctl, org, name);
}

/** A release as a rollout records it. */
export function releaseOf(
  image: { tag: string; digest: string; protos: Release["protos"] },
  rolloutId: number,
): Release {
  return { tag: image.tag, digest: image.digest, protos: image.protos, revision: `r${rolloutId}` };
}
