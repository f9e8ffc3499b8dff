/** Endpoint records: what is deployed, at which version, with how many replicas wanted. */
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { Endpoint } from "./record.ts";
import { deployRefusal } from "../formats/quantize/plan.ts";
import { mayUse, type NameViewer, ownerOf } from "../models/owners.ts";
import { resolveDraftModel, resolveModelVersion } from "../models/versions.ts";
import { PlatformError } from "../contracts/errors.ts";
import { type InvalidEntry, parseStored, swapStored } from "../redis/stored.ts";
import { withUpdate } from "./rollout.ts";
import type { Control } from "../redis/connection.ts";

/** Every endpoint record that parses, and the ones that do not (skipped and reported, never fatal). */
export async function readEndpoints(ctl: Control): Promise<{ endpoints: Endpoint[]; invalid: InvalidEntry[] }> {
  const all = await ctl.redis.hgetall(ctl.keys.endpoints);
  const endpoints: Endpoint[] = [];
  const invalid: InvalidEntry[] = [];
  for (const [field, raw] of Object.entries(all)) {
    const parsed = parseEndpoint(field, raw);
    if (parsed.ok) endpoints.push(parsed.value);
    else invalid.push(parsed.invalid);
  }
  return { endpoints: endpoints.sort((a, b) => a.name.localeCompare(b.name)), invalid };
}

export async function listEndpoints(ctl: Control): Promise<Endpoint[]> {
  return (await readEndpoints(ctl)).endpoints;
}

function parseEndpoint(field: string, raw: string): ReturnType<typeof parseStored<typeof Endpoint>> {
  const parsed = parseStored(Endpoint, raw, "endpoint", field);
  if (parsed.ok && parsed.value.name !== field) {
    // Routing goes by the field, queues and replicas by the record's name: they must agree.
    return {
      ok: false,
      invalid: { kind: "endpoint", key: field, error: `name: "${parsed.value.name}" differs from the record's key` },
    };
  }
  return parsed;
}

/** Undefined when there is none; a stored record that does not parse is an error naming what is wrong. */
export async function findEndpoint(ctl: Control, name: string): Promise<Endpoint | undefined> {
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

/**
 * The endpoint `name`, or a 404. With `viewer`, an endpoint serving another organization's model
 * is the same 404 (src/models/owners.ts).
 */
export async function getEndpoint(ctl: Control, name: string, viewer?: NameViewer): Promise<Endpoint> {
  const found = await findEndpoint(ctl, name);
  if (!found || (viewer && !mayUse(viewer, await ownerOf(ctl, found.config.model.name)))) {
    throw new PlatformError(
      404,
      "model_not_found",
      `no endpoint named "${name}"; deploy one with \`platform inference deploy --model ${name}\``,
      "model",
    );
  }
  return found;
}

/** The stored text and the record it parses to; undefined when there is none or it does not parse. */
async function readStored(ctl: Control, name: string): Promise<{ raw: string | null; endpoint: Endpoint | undefined }> {
  const raw = await ctl.redis.hget(ctl.keys.endpoints, name);
  if (raw === null) return { raw, endpoint: undefined };
  const parsed = parseEndpoint(name, raw);
  return { raw, endpoint: parsed.ok ? parsed.value : undefined };
}

/**
 * Reads, changes and writes an endpoint's record as one step: a record changed meanwhile (a
 * deploy, the scaler's rollout step) is read again and changed again, never overwritten. `change`
 * gets the stored record (undefined: none, or one that does not parse) and answers the new one,
 * or undefined to leave it.
 */
export async function changeEndpoint(
  ctl: Control,
  name: string,
  change: (current: Endpoint | undefined) => Endpoint | undefined,
): Promise<Endpoint | undefined> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { raw, endpoint } = await readStored(ctl, name);
    const next = change(endpoint);
    if (!next) return endpoint;
    const json = JSON.stringify(next);
    const written =
      raw === null
        ? (await ctl.redis.hsetnx(ctl.keys.endpoints, name, json)) === 1
        : await swapStored(ctl.redis, ctl.keys.endpoints, name, raw, json);
    if (written) {
      await ctl.redis.publish(ctl.keys.endpointEvents, name);
      return next;
    }
  }
  throw new PlatformError(409, "conflict", `endpoint "${name}" kept changing while it was updated; try again`, "name");
}

export async function saveEndpoint(ctl: Control, record: Endpoint): Promise<void> {
  await ctl.redis.hset(ctl.keys.endpoints, record.name, JSON.stringify(record));
  await ctl.redis.publish(ctl.keys.endpointEvents, record.name);
}

export async function setDesiredReplicas(ctl: Control, name: string, replicas: number): Promise<Endpoint> {
  const next = await changeEndpoint(ctl, name, (current) =>
    current ? { ...current, desired_replicas: replicas, updated: Date.now() } : undefined,
  );
  return next ?? getEndpoint(ctl, name);
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
export async function deployEndpoint(ctl: Control, config: DeploymentConfig): Promise<Endpoint> {
  const model = await resolveModelVersion(ctl, config.model.name, config.model.version);
  if (model.adapter) {
    const base = model.adapter.base;
    throw new PlatformError(
      400,
      "invalid_config",
      `model.name: ${model.name}@${model.version} is a LoRA adapter of ${base.name}@${base.version}; deploy its base and send requests to "<endpoint>:${model.name}" (docs/adapters.md)`,
      "model.name",
    );
  }
  const framework = config.model.framework ?? model.framework;
  if (framework !== model.framework) {
    throw new PlatformError(
      400,
      "invalid_config",
      `model.framework: "${framework}" cannot serve ${model.name}@${model.version}, which is registered for "${model.framework}"`,
      "model.framework",
    );
  }
  // llama.cpp replicas quantize the GGUF themselves (src/formats/quantize/): a model that cannot be is refused now, not at replica start.
  const refusal =
    framework === "llamacpp" && config.runtime.quantization
      ? deployRefusal(model.gguf?.quantization, config.runtime.quantization)
      : undefined;
  if (refusal) throw new PlatformError(400, "invalid_config", refusal, "runtime.quantization");
  // The draft must be registered now; that it shares the model's vocabulary is checked where both are loaded.
  if (framework === "llamacpp" && config.runtime.speculative_model)
    await resolveDraftModel(ctl, config.runtime.speculative_model);
  const name = config.endpoint ?? config.model.name;
  let versionChanged = false;
  // An invalid stored record is replaced by this deployment. One that changes what replicas load
  // rolls out (rollout.ts); `desired_replicas` is what the deployment says, as the scaler's is.
  const record = (await changeEndpoint(ctl, name, (existing) => {
    const now = Date.now();
    versionChanged = existing?.version !== model.version;
    const deployed: Endpoint = {
      name,
      config: { ...config, endpoint: name },
      version: model.version,
      framework,
      desired_replicas: config.resources.replicas,
      created: existing?.created ?? now,
      updated: now,
    };
    return withUpdate(existing, deployed, now);
  })) as Endpoint;
  if (versionChanged) await ctl.redis.del(ctl.keys.servedOnce(name));
  return record;
}
