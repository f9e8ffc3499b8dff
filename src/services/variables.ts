/**
 * A service's environment variables and secrets (docs/services.md, "Secrets and variables"): one
 * hash each, an entry per name with its version and who changed it when. Secrets are sealed
 * (secrets.ts) before they reach Redis and never come back out of this module except as names, or
 * opened for the scaler. Both take effect at the next rollout, which snapshots them (store.ts).
 */
import { z } from "zod";
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { MAX_ENV_ENTRIES } from "./names.ts";
import { type SecretBox, secretContext } from "./secrets.ts";
import { type ReleaseSnapshot, serviceKey } from "./store.ts";

export type VariableKind = "env" | "secrets";

const Entry = z.object({
  /** The value (env) or the sealed value (secrets). */
  value: z.string(),
  version: z.number().int().positive(),
  updated: z.number().int(),
  by: z.object({ id: z.string(), name: z.string() }),
});
type Entry = z.infer<typeof Entry>;

/** What the API shows of one: a secret's value never. */
export type VariableInfo = {
  name: string;
  value?: string;
  version: number;
  updated: number;
  by: { id: string; name: string };
};

const keyOf = (ctl: Control, kind: VariableKind, org: string, name: string) =>
  kind === "env" ? ctl.keys.serviceEnv(serviceKey(org, name)) : ctl.keys.serviceSecrets(serviceKey(org, name));

async function readEntries(ctl: Control, kind: VariableKind, org: string, name: string): Promise<Map<string, Entry>> {
  const key = keyOf(ctl, kind, org, name);
  const entries = new Map<string, Entry>();
  for (const [field, raw] of Object.entries(await ctl.redis.hgetall(key))) {
    const parsed = parseStored(Entry, raw, "service", `${key}/${field}`);
    if (parsed.ok) entries.set(field, parsed.value);
  }
  return entries;
}

export async function listVariables(
  ctl: Control,
  kind: VariableKind,
  org: string,
  name: string,
): Promise<VariableInfo[]> {
  return [...(await readEntries(ctl, kind, org, name)).entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, e]) => ({
      name: key,
      ...(kind === "env" ? { value: e.value } : {}),
      version: e.version,
      updated: e.updated,
      by: e.by,
    }));
}

export async function setVariables(
  ctl: Control,
  box: SecretBox,
  kind: VariableKind,
  org: string,
  name: string,
  values: Record<string, string>,
  by: { id: string; name: string },
): Promise<VariableInfo[]> {
  const existing = await readEntries(ctl, kind, org, name);
  const names = new Set([...existing.keys(), ...Object.keys(values)]);
  if (names.size > MAX_ENV_ENTRIES)
    throw new PlatformError(
      400,
      "too_many_variables",
      `a service holds at most ${MAX_ENV_ENTRIES} ${kind === "env" ? "variables" : "secrets"}; this would make ${names.size}: unset some first`,
      "values",
    );
  const now = Date.now();
  const fields: string[] = [];
  for (const [key, value] of Object.entries(values)) {
    const entry: Entry = {
      value: kind === "secrets" ? box.seal(value, secretContext(org, name, key)) : value,
      version: (existing.get(key)?.version ?? 0) + 1,
      updated: now,
      by,
    };
    fields.push(key, JSON.stringify(entry));
  }
  if (fields.length > 0) await ctl.redis.hset(keyOf(ctl, kind, org, name), ...fields);
  return listVariables(ctl, kind, org, name);
}

/** Removes one; a name that is not set is a 404 naming what is. */
export async function unsetVariable(
  ctl: Control,
  kind: VariableKind,
  org: string,
  name: string,
  key: string,
): Promise<void> {
  const removed = await ctl.redis.hdel(keyOf(ctl, kind, org, name), key);
  if (removed === 0) {
    const known = [...(await readEntries(ctl, kind, org, name)).keys()].sort();
    throw new PlatformError(
      404,
      kind === "env" ? "variable_not_found" : "secret_not_found",
      `${name} has no ${kind === "env" ? "variable" : "secret"} ${key}${known.length > 0 ? `; it has ${known.join(", ")}` : ""}`,
      "key",
    );
  }
}

/** The variables and sealed secrets as they are now: what a rollout starting now runs with. */
export async function snapshotVariables(ctl: Control, org: string, name: string): Promise<ReleaseSnapshot> {
  const [env, secrets] = await Promise.all([
    readEntries(ctl, "env", org, name),
    readEntries(ctl, "secrets", org, name),
  ]);
  return {
    env: Object.fromEntries([...env].map(([k, e]) => [k, e.value])),
    secrets: Object.fromEntries([...secrets].map(([k, e]) => [k, e.value])),
  };
}

/** A snapshot's secrets, opened (the scaler, to start replicas). */
export function openSecrets(
  box: SecretBox,
  org: string,
  name: string,
  sealed: Record<string, string>,
): Record<string, string> {
  return Object.fromEntries(
    Object.entries(sealed).map(([key, value]) => [key, box.open(value, secretContext(org, name, key))]),
  );
}
