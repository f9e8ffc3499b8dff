/** Endpoint records: what is deployed, at which version, with how many replicas wanted. */
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { EndpointRecord } from "../contracts/records.ts";
import { resolveModelVersion } from "../registry/versions.ts";
import { PlatformError } from "../errors.ts";
import type { Control } from "./redis.ts";

export async function listEndpoints(ctl: Control): Promise<EndpointRecord[]> {
  const all = await ctl.redis.hvals(ctl.keys.endpoints);
  return all.map((raw) => EndpointRecord.parse(JSON.parse(raw))).sort((a, b) => a.name.localeCompare(b.name));
}

export async function findEndpoint(ctl: Control, name: string): Promise<EndpointRecord | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.endpoints, name);
  return raw ? EndpointRecord.parse(JSON.parse(raw)) : undefined;
}

export async function getEndpoint(ctl: Control, name: string): Promise<EndpointRecord> {
  const found = await findEndpoint(ctl, name);
  if (!found) {
    throw new PlatformError(404, "model_not_found", `no endpoint named "${name}"; deploy one with \`platform inference deploy --model ${name}\``, "model");
  }
  return found;
}

export async function saveEndpoint(ctl: Control, record: EndpointRecord): Promise<void> {
  await ctl.redis.hset(ctl.keys.endpoints, record.name, JSON.stringify(record));
  await ctl.redis.publish(ctl.keys.endpointEvents, record.name);
}

export async function setDesiredReplicas(ctl: Control, name: string, replicas: number): Promise<EndpointRecord> {
  const record = await getEndpoint(ctl, name);
  const next = { ...record, desired_replicas: replicas, updated: Date.now() };
  await saveEndpoint(ctl, next);
  return next;
}

export async function deleteEndpoint(ctl: Control, name: string): Promise<boolean> {
  const removed = await ctl.redis.hdel(ctl.keys.endpoints, name);
  await ctl.redis.publish(ctl.keys.endpointEvents, name);
  return removed === 1;
}

/**
 * Create or update an endpoint from a deployment config: `latest` is resolved
 * to a concrete version now, so replicas never change model under a client.
 */
export async function deployEndpoint(ctl: Control, config: DeploymentConfig): Promise<EndpointRecord> {
  const model = await resolveModelVersion(ctl, config.model.name, config.model.version);
  const framework = config.model.framework ?? model.framework;
  if (framework !== model.framework) {
    throw new PlatformError(400, "invalid_config", `model.framework: "${framework}" cannot serve ${model.name}@${model.version}, which is registered for "${model.framework}"`, "model.framework");
  }
  const name = config.endpoint ?? config.model.name;
  const existing = await findEndpoint(ctl, name);
  const now = Date.now();
  const record: EndpointRecord = {
    name,
    config: { ...config, endpoint: name },
    version: model.version,
    framework,
    desired_replicas: config.resources.replicas,
    created: existing?.created ?? now,
    updated: now,
  };
  if (existing?.version !== record.version) await ctl.redis.del(ctl.keys.servedOnce(name));
  await saveEndpoint(ctl, record);
  return record;
}
