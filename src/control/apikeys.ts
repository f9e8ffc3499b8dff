/**
 * API keys. A key is shown once, at creation; Redis keeps only its SHA-256
 * (keys carry 256 bits of entropy, so a fast hash is enough, unlike passwords).
 */
import { createHash, randomBytes } from "node:crypto";
import { ApiKeyRecord, type ApiKeyRole } from "../contracts/records.ts";
import { PlatformError } from "../errors.ts";
import type { Control } from "./redis.ts";

const KEY_PREFIX = "sk-plat-";

function hashKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

export async function createApiKey(ctl: Control, name: string, role: ApiKeyRole): Promise<{ key: string; record: ApiKeyRecord }> {
  const key = KEY_PREFIX + randomBytes(32).toString("base64url");
  const record: ApiKeyRecord = {
    id: `key_${randomBytes(6).toString("hex")}`,
    name,
    role,
    prefix: key.slice(0, KEY_PREFIX.length + 6),
    hash: hashKey(key),
    created: Math.floor(Date.now() / 1000),
  };
  await ctl.redis
    .multi()
    .hset(ctl.keys.apiKeys, record.id, JSON.stringify(record))
    .hset(ctl.keys.apiKeyByHash, record.hash, record.id)
    .exec();
  return { key, record };
}

export async function verifyApiKey(ctl: Control, key: string): Promise<ApiKeyRecord | undefined> {
  const id = await ctl.redis.hget(ctl.keys.apiKeyByHash, hashKey(key));
  if (!id) return undefined;
  const raw = await ctl.redis.hget(ctl.keys.apiKeys, id);
  return raw ? ApiKeyRecord.parse(JSON.parse(raw)) : undefined;
}

export async function listApiKeys(ctl: Control): Promise<ApiKeyRecord[]> {
  const all = await ctl.redis.hvals(ctl.keys.apiKeys);
  return all.map((raw) => ApiKeyRecord.parse(JSON.parse(raw))).sort((a, b) => a.created - b.created);
}

export async function revokeApiKey(ctl: Control, id: string): Promise<ApiKeyRecord> {
  const raw = await ctl.redis.hget(ctl.keys.apiKeys, id);
  if (!raw) throw new PlatformError(404, "key_not_found", `no API key with id "${id}"; \`platform keys list\` shows the ids`, "id");
  const record = ApiKeyRecord.parse(JSON.parse(raw));
  await ctl.redis.multi().hdel(ctl.keys.apiKeys, id).hdel(ctl.keys.apiKeyByHash, record.hash).exec();
  return record;
}

export async function countApiKeys(ctl: Control): Promise<number> {
  return ctl.redis.hlen(ctl.keys.apiKeys);
}
