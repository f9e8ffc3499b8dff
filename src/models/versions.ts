/** The model catalog: named models with numbered or explicit versions, metadata in Redis. */
import { ModelName } from "../contracts/deployment.ts";
import { RegisteredVersion } from "./record.ts";
import { parseStored, reportInvalid } from "../redis/stored.ts";
import type { Control } from "../redis/connection.ts";
import { PlatformError } from "../contracts/errors.ts";
import { claimName, mayUse, type NameViewer, ownerOf } from "./owners.ts";

/** Every version (of `name`), oldest first; with `viewer`, only those it may see (src/models/owners.ts). */
export async function listModelVersions(
  ctl: Control,
  name?: string,
  viewer?: NameViewer,
): Promise<RegisteredVersion[]> {
  const names = name ? [name] : (await ctl.redis.smembers(ctl.keys.models)).sort();
  const out: RegisteredVersion[] = [];
  for (const n of names) {
    if (!ModelName.safeParse(n).success) {
      reportInvalid({
        kind: "model",
        key: ctl.keys.models,
        error: `member "${n.slice(0, 80)}" is not a valid model name`,
      });
      continue;
    }
    const all = await ctl.redis.hgetall(ctl.keys.modelVersions(n));
    const versions: RegisteredVersion[] = [];
    for (const [field, raw] of Object.entries(all)) {
      // One unreadable version hides itself, not the whole registry.
      const parsed = parseStored(RegisteredVersion, raw, "model_version", `${ctl.keys.modelVersions(n)} ${field}`);
      if (parsed.ok && mayUse(viewer, parsed.value.owner)) versions.push(parsed.value);
    }
    out.push(...versions.sort((a, b) => a.created - b.created));
  }
  return out;
}

/** Reserve the next automatic version ("v1", "v2", ...) of a model. */
export async function nextVersion(ctl: Control, name: string): Promise<string> {
  for (;;) {
    const n = await ctl.redis.incr(ctl.keys.modelCounter(name));
    const candidate = `v${n}`;
    if (!(await ctl.redis.hexists(ctl.keys.modelVersions(name), candidate))) return candidate;
  }
}

export async function versionExists(ctl: Control, name: string, version: string): Promise<boolean> {
  return (await ctl.redis.hexists(ctl.keys.modelVersions(name), version)) === 1;
}

/** Saves a new version; its name is claimed for its owner first, or refused (409) where another holds it. */
export async function saveModelVersion(ctl: Control, record: RegisteredVersion): Promise<void> {
  await claimName(ctl, record.name, record.owner ?? null);
  const created = await ctl.redis.hsetnx(ctl.keys.modelVersions(record.name), record.version, JSON.stringify(record));
  if (created === 0) {
    throw new PlatformError(
      409,
      "version_exists",
      `model "${record.name}" already has a version "${record.version}"; choose another --version or omit it to get the next number`,
      "version",
    );
  }
  await ctl.redis.sadd(ctl.keys.models, record.name);
}

function notRegistered(name: string): PlatformError {
  return new PlatformError(
    404,
    "model_not_found",
    `model "${name}" is not registered; register it with \`platform training submit --name ${name} --source <path>\``,
    "model",
  );
}

/**
 * A version by name, or the newest one for "latest". With `viewer`, another organization's model
 * is the same 404 as a name that is not registered (src/models/owners.ts).
 */
export async function resolveModelVersion(
  ctl: Control,
  name: string,
  version: string,
  viewer?: NameViewer,
): Promise<RegisteredVersion> {
  const hidden = viewer !== undefined && !mayUse(viewer, await ownerOf(ctl, name));
  if (version === "latest") {
    const newest = hidden ? undefined : (await listModelVersions(ctl, name)).at(-1);
    if (!newest) throw notRegistered(name);
    return newest;
  }
  const raw = hidden ? null : await ctl.redis.hget(ctl.keys.modelVersions(name), version);
  if (!raw) {
    const exists = !hidden && (await ctl.redis.sismember(ctl.keys.models, name)) === 1;
    throw new PlatformError(
      404,
      "model_not_found",
      exists
        ? `model "${name}" has no version "${version}"; \`platform training list\` shows its versions`
        : `model "${name}" is not registered`,
      "version",
    );
  }
  const parsed = parseStored(RegisteredVersion, raw, "model_version", `${ctl.keys.modelVersions(name)} ${version}`);
  if (parsed.ok) return parsed.value;
  throw new PlatformError(
    500,
    "invalid_record",
    `the stored record of model "${name}" version "${version}" is invalid (${parsed.invalid.error}); register the model again as another version (\`platform training submit --name ${name} --source <path>\`)`,
    "version",
  );
}

/**
 * A llama.cpp deployment's draft model for speculative decoding (`runtime.speculative_model`): a
 * registered model, `<name>` (its newest version) or `<name>@<version>`. A 400 naming the field
 * when it is not registered, so the deployment is refused rather than its replicas failing.
 */
export async function resolveDraftModel(ctl: Control, spec: string): Promise<RegisteredVersion> {
  const [name = "", version = "latest"] = spec.split("@");
  try {
    const draft = await resolveModelVersion(ctl, name, version);
    if (draft.framework !== "llamacpp")
      throw new PlatformError(
        400,
        "invalid_config",
        `runtime.speculative_model: ${draft.name}@${draft.version} is registered for ${draft.framework}; a llama.cpp endpoint drafts with a llama.cpp (GGUF) model`,
        "runtime.speculative_model",
      );
    return draft;
  } catch (e) {
    if (e instanceof PlatformError && e.code === "model_not_found") {
      throw new PlatformError(
        400,
        "invalid_config",
        `runtime.speculative_model: ${e.message}; on llama.cpp the draft is a registered model, "<name>" or "<name>@<version>"`,
        "runtime.speculative_model",
      );
    }
    throw e;
  }
}
