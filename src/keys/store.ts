/**
 * API keys. A key is shown once, at creation; Redis keeps only its SHA-256
 * (keys carry 256 bits of entropy, so a fast hash is enough, unlike passwords).
 */
import { createHash, randomBytes } from "node:crypto";
import { applyLimitsChange, type KeyLimits, type KeyLimitsChange } from "../ratelimit/limits.ts";
import { ApiKey, type ApiKeyRole } from "./record.ts";
import { announceCallerChange } from "./changes.ts";
import { PlatformError } from "../contracts/errors.ts";
import { DEFAULT_ORG, isOperator } from "../contracts/orgs.ts";
import { getOrg } from "../orgs/store.ts";
import { parseStored, swapStored } from "../redis/stored.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";

const KEY_PREFIX = "sk-plat-";

const bootstrap = new LuaScript(import.meta.url, "bootstrap");

/** What Redis keeps of a secret with 256 bits of entropy (API keys, CLI tokens): its SHA-256, in hex. */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

/** `org`: the organization it belongs to, which must exist (404 `org_not_found`). */
export async function createApiKey(
  ctl: Control,
  name: string,
  role: ApiKeyRole,
  limits?: KeyLimits,
  org: string = DEFAULT_ORG,
): Promise<{ key: string; record: ApiKey }> {
  await getOrg(ctl, org);
  const key = KEY_PREFIX + randomBytes(32).toString("base64url");
  // Empty scopes dropped: an empty limits object would make a key look limited.
  const kept = limits === undefined ? undefined : applyLimitsChange(undefined, limits);
  const record: ApiKey = {
    id: `key_${randomBytes(6).toString("hex")}`,
    name,
    org,
    role,
    prefix: key.slice(0, KEY_PREFIX.length + 6),
    hash: hashSecret(key),
    created: Math.floor(Date.now() / 1000),
    ...(kept ? { limits: kept } : {}),
  };
  await ctl.redis
    .multi()
    .hset(ctl.keys.apiKeys, record.id, JSON.stringify(record))
    .hset(ctl.keys.apiKeyByHash, record.hash, record.id)
    .exec();
  return { key, record };
}

export async function verifyApiKey(ctl: Control, key: string): Promise<ApiKey | undefined> {
  const id = await ctl.redis.hget(ctl.keys.apiKeyByHash, hashSecret(key));
  return id ? findApiKey(ctl, id) : undefined;
}

/** A key by id (a token bound to it checks it is still there): undefined when revoked. */
export async function findApiKey(ctl: Control, id: string): Promise<ApiKey | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.apiKeys, id);
  if (!raw) return undefined;
  // A key whose record is unreadable authenticates nobody (reported, not fatal).
  const parsed = parseStored(ApiKey, raw, "api_key", id);
  return parsed.ok ? parsed.value : undefined;
}

/**
 * `org`: the organization the asker manages (absent: any, for operators). A key of another one is
 * the same 404 as a key that does not exist, so an organization learns nothing of another's keys.
 */
export async function getApiKey(ctl: Control, id: string, org?: string): Promise<ApiKey> {
  return (await readApiKey(ctl, id, org)).record;
}

function keyNotFound(id: string): PlatformError {
  return new PlatformError(
    404,
    "key_not_found",
    `no API key with id "${id}"; \`platform keys list\` shows the ids`,
    "id",
  );
}

async function readApiKey(ctl: Control, id: string, org?: string): Promise<{ raw: string; record: ApiKey }> {
  const raw = await ctl.redis.hget(ctl.keys.apiKeys, id);
  if (!raw) throw keyNotFound(id);
  const parsed = parseStored(ApiKey, raw, "api_key", id);
  // An unreadable record's organization is unknown: only operators may hear of it.
  if (org !== undefined && (!parsed.ok || parsed.value.org !== org)) throw keyNotFound(id);
  if (!parsed.ok)
    throw new PlatformError(
      500,
      "invalid_record",
      `the stored record of API key ${id} is invalid (${parsed.invalid.error}); revoke it (\`platform keys revoke ${id}\`) and create another`,
      "id",
    );
  return { raw, record: parsed.value };
}

/**
 * Changes a key's limits (src/ratelimit/limits.ts: a number sets, null removes). A compare-and-set
 * on the stored record, retried when another change came first, so two admins' changes both land
 * and a key revoked meanwhile is not brought back. Gateways see the change at once (changes.ts).
 */
export async function updateApiKeyLimits(
  ctl: Control,
  id: string,
  change: KeyLimitsChange,
  org?: string,
): Promise<ApiKey> {
  for (let attempt = 0; ; attempt++) {
    const { raw, record: current } = await readApiKey(ctl, id, org);
    const { limits: _old, ...rest } = current;
    const limits = applyLimitsChange(current.limits, change);
    const next: ApiKey = limits ? { ...rest, limits } : rest;
    if (await swapStored(ctl.redis, ctl.keys.apiKeys, id, raw, JSON.stringify(next))) {
      await announceCallerChange(ctl, { kind: "key", id });
      return next;
    }
    if (attempt >= 10)
      throw new PlatformError(
        409,
        "conflict",
        `API key ${id} kept changing while its limits were updated; try again`,
        "id",
      );
  }
}

/** `org`: only that organization's keys (absent: all of them). */
export async function listApiKeys(ctl: Control, org?: string): Promise<ApiKey[]> {
  const all = await ctl.redis.hgetall(ctl.keys.apiKeys);
  return Object.entries(all)
    .flatMap(([id, raw]) => {
      const parsed = parseStored(ApiKey, raw, "api_key", id);
      return parsed.ok && (org === undefined || parsed.value.org === org) ? [parsed.value] : [];
    })
    .sort((a, b) => a.created - b.created);
}

/** A revoked key whose stored record did not parse: its id, and what was wrong with the record. */
export type RevokedInvalidKey = { id: string; invalid: string; hash?: undefined };

/**
 * Removes a key, on every gateway at once (changes.ts). One whose record does not parse is revoked all the same
 * (it is the one an admin most wants gone): its hash entries are found by id.
 * `org` as for getApiKey: an organization's admin revokes its own keys only.
 */
export async function revokeApiKey(ctl: Control, id: string, org?: string): Promise<ApiKey | RevokedInvalidKey> {
  const raw = await ctl.redis.hget(ctl.keys.apiKeys, id);
  if (!raw) throw keyNotFound(id);
  const parsed = parseStored(ApiKey, raw, "api_key", id);
  if (org !== undefined && (!parsed.ok || parsed.value.org !== org)) throw keyNotFound(id);
  const hashes = parsed.ok ? [parsed.value.hash] : await hashesOf(ctl, id);
  const revoke = ctl.redis.multi().hdel(ctl.keys.apiKeys, id);
  if (hashes.length > 0) revoke.hdel(ctl.keys.apiKeyByHash, ...hashes);
  await revoke.exec();
  await announceCallerChange(ctl, { kind: "key", id });
  return parsed.ok ? parsed.value : { id, invalid: parsed.invalid.error };
}

/** The hashes that authenticate as key `id`, by a scan of the hash index. */
async function hashesOf(ctl: Control, id: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, entries] = await ctl.redis.hscan(ctl.keys.apiKeyByHash, cursor, "COUNT", 1000);
    for (let i = 0; i + 1 < entries.length; i += 2) if (entries[i + 1] === id) found.push(entries[i] as string);
    cursor = next;
  } while (cursor !== "0");
  return found;
}

export async function countApiKeys(ctl: Control): Promise<number> {
  return ctl.redis.hlen(ctl.keys.apiKeys);
}

/**
 * The first admin key of a cluster or compose install, supplied by the operator
 * (a Secret) rather than minted and printed, because no admin exists yet to ask.
 */
export const BOOTSTRAP_KEY_NAME = "bootstrap-admin";

/** A fresh key in the platform's own format, for `platform keys bootstrap --generate`. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

/**
 * Why `key` is too weak to be an admin key, or undefined: at least 32
 * characters, not a repetition, at least 10 distinct characters, and about
 * 128 bits by length × log2 of the smallest alphabet it fits (hex counts 16).
 * `openssl rand -hex 32` and `--generate` pass. Not a dictionary check.
 */
export function weakKeyReason(key: string): string | undefined {
  if (!/^[A-Za-z0-9_.~+/=-]+$/.test(key))
    return "it may contain only letters, digits and - _ . ~ + / = (no spaces or quotes)";
  if (key.length < 32)
    return `it is ${key.length} characters long; use at least 32 (e.g. \`openssl rand -hex 32\` or \`platform keys bootstrap --generate\`)`;
  const body = key.startsWith(KEY_PREFIX) ? key.slice(KEY_PREFIX.length) : key;
  // The smallest alphabet the key could have been drawn from: hex counts 16 symbols, not 36.
  const alphabet =
    /^[0-9a-f]+$/.test(body) || /^[0-9A-F]+$/.test(body)
      ? 16
      : /^[a-z]+$/.test(body) || /^[A-Z]+$/.test(body)
        ? 26
        : /^[0-9A-Za-z]+$/.test(body)
          ? 62
          : 70;
  const bits = Math.floor(body.length * Math.log2(alphabet));
  const distinct = new Set(body).size;
  if (bits < 128 || distinct < 10 || /^(.+?)\1+$/.test(body)) {
    return `it looks guessable (about ${bits} bits, ${distinct} distinct characters); use a random key of at least 128 bits (\`openssl rand -hex 32\`)`;
  }
  return undefined;
}

export type BootstrapOutcome = { outcome: "created" | "exists"; record: ApiKey };

/**
 * Store the operator's key as the bootstrap admin key, idempotently: the same
 * key again (another restart, another gateway) changes nothing; a different key
 * while the first is still valid is refused (409), so a changed Secret never
 * silently adds admins. Only the SHA-256 reaches Redis.
 */
export async function bootstrapAdminKey(ctl: Control, key: string): Promise<BootstrapOutcome> {
  const weak = weakKeyReason(key);
  if (weak) throw new PlatformError(400, "weak_key", `the bootstrap admin key is too weak: ${weak}`, "key");
  const hash = hashSecret(key);
  const record: ApiKey = {
    id: `key_${randomBytes(6).toString("hex")}`,
    name: BOOTSTRAP_KEY_NAME,
    org: DEFAULT_ORG,
    role: "admin",
    prefix: key.slice(0, key.startsWith(KEY_PREFIX) ? KEY_PREFIX.length + 6 : 6),
    hash,
    created: Math.floor(Date.now() / 1000),
  };
  // One script, so two gateways starting together with the same Secret add one key, not two.
  const keys = [ctl.keys.apiKeyByHash, ctl.keys.apiKeys, ctl.keys.bootstrapKey];
  const [outcome, id] = (await bootstrap.run(ctl.redis, keys, [hash, record.id, JSON.stringify(record)])) as [
    string,
    string,
  ];
  if (outcome === "conflict") {
    throw new PlatformError(
      409,
      "bootstrap_key_exists",
      `a different bootstrap admin key (${id}) is already registered; to replace it, revoke it first (\`platform keys revoke ${id}\`); to add admins, use \`platform keys create --role admin\``,
      "key",
    );
  }
  if (outcome === "created") return { outcome, record };
  const stored = parseStored(ApiKey, (await ctl.redis.hget(ctl.keys.apiKeys, id)) ?? "null", "api_key", id);
  if (!stored.ok) {
    throw new PlatformError(
      500,
      "invalid_record",
      `the stored record of API key ${id} (this bootstrap key) is invalid (${stored.invalid.error}); revoke it (\`platform keys revoke ${id}\`) and bootstrap again`,
      "key",
    );
  }
  const existing = stored.value;
  if (!isOperator(existing))
    throw new PlatformError(
      409,
      "key_exists",
      `this key is already registered as a ${existing.role} key of organization "${existing.org}" (${existing.id}); choose another bootstrap key`,
      "key",
    );
  return { outcome: "exists", record: existing };
}
