/** Endpoint records: what is deployed, at which version, with how many replicas wanted. */
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { EndpointRecord } from "../contracts/records.ts";
import { deployRefusal } from "../registry/quantize/plan.ts";
import { resolveDraftModel, resolveModelVersion } from "../registry/versions.ts";
import { PlatformError } from "../errors.ts";
import { type InvalidRecord, parseStored } from "./invalid-records.ts";
import type { Control } from "./redis.ts";

/** Every endpoint record that parses, and the ones that do not (skipped and reported, never fatal). */
export async function readEndpoints(ctl: Control): Promise<{ endpoints: EndpointRecord[]; invalid: InvalidRecord[] }> {
  const all = await ctl.redis.hgetall(ctl.keys.endpoints);
  const endpoints: EndpointRecord[] = [];
  const invalid: InvalidRecord[] = [];
  for (const [field, raw] of Object.entries(all)) {
    const parsed = parseEndpoint(field, raw);
    if (parsed.ok) endpoints.push(parsed.value);
    else invalid.push(parsed.invalid);
  }
  return { endpoints: endpoints.sort((a, b) => a.name.localeCompare(b.name)), invalid };
}

export async function listEndpoints(ctl: Control): Promise<EndpointRecord[]> {
  return (await readEndpoints(ctl)).endpoints;
}

function parseEndpoint(field: string, raw: string): ReturnType<typeof parseStored<typeof EndpointRecord>> {
  const parsed = parseStored(EndpointRecord, raw, "endpoint", field);
  if (parsed.ok && parsed.value.name !== field) {
    // Routing goes by the field, queues and replicas by the record's name: they must agree.
    return { ok: false, invalid: { kind: "endpoint", key: field, error: `name: "${parsed.value.name}" differs from the record's key` } };
  }
  return parsed;
}

/** Undefined when there is none; a stored record that does not parse is an error naming what is wrong. */
export async function findEndpoint(ctl: Control, name: string): Promise<EndpointRecord | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.endpoints, name);
  if (!raw) return undefined;
  const parsed = parseEndpoint(name, raw);
  if (parsed.ok) return parsed.value;
  throw new PlatformError(
    500,
    "invalid_record",
    `the stored record of endpoint "${name}" is invalid (${parsed.invalid.error}); deploy it again or delete it (DELETE /admin/v1/endpoints/${name})`,
    "name",
  );
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
  // llama.cpp replicas quantize the GGUF themselves (src/registry/quantize/): a model that cannot be is refused now, not at replica start.
  const refusal = framework === "llamacpp" && config.runtime.quantization ? deployRefusal(model.gguf?.quantization, config.runtime.quantization) : undefined;
  if (refusal) throw new PlatformError(400, "invalid_config", refusal, "runtime.quantization");
  // The draft must be registered now; that it shares the model's vocabulary is checked where both are loaded.
  if (framework === "llamacpp" && config.runtime.speculative_model) await resolveDraftModel(ctl, config.runtime.speculative_model);
  const name = config.endpoint ?? config.model.name;
  // An invalid stored record is replaced by this deployment.
  const existing = await findEndpoint(ctl, name).catch((e) => {
    if (e instanceof PlatformError && e.code === "invalid_record") return undefined;
    throw e;
  });
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
