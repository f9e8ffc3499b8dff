/**
 * API key management under /admin/v1/keys (admin keys only): create with limits, list, read,
 * change limits, revoke. A key's secret is returned once, by create; records never carry the hash.
 */
import { Hono } from "hono";
import { z } from "zod";
import { KeyLimitsChange, KeyLimitsInput } from "../contracts/limits.ts";
import { type ApiKeyRecord, ApiKeyRole } from "../contracts/records.ts";
import { createApiKey, getApiKey, listApiKeys, revokeApiKey, updateApiKeyLimits } from "../control/apikeys.ts";
import type { Control } from "../control/redis.ts";
import type { GatewayEnv } from "./env.ts";
import { parseBody, pathParam } from "./errors.ts";

/** Ids are minted by src/control/apikeys.ts. */
export const ApiKeyId = z.string().regex(/^key_[0-9a-f]{12}$/, 'expected a key id such as "key_0123456789ab" (`platform keys list` shows them)');

const CreateBody = z.object({ name: z.string().min(1).max(100), role: ApiKeyRole.default("user"), limits: KeyLimitsInput.optional() }).strict();
const UpdateBody = z.object({ limits: KeyLimitsChange }).strict();

/** A record as the API shows it: everything but the hash. */
export function publicKey(record: ApiKeyRecord): Omit<ApiKeyRecord, "hash"> {
  const { hash: _hash, ...rest } = record;
  return rest;
}

export function adminKeyRoutes(ctl: Control) {
  const app = new Hono<GatewayEnv>();

  app.get("/", async (c) => c.json({ data: (await listApiKeys(ctl)).map(publicKey) }));

  app.post("/", async (c) => {
    const body = await parseBody(c, CreateBody);
    const { key, record } = await createApiKey(ctl, body.name, body.role, body.limits);
    return c.json({ ...publicKey(record), key }, 201);
  });

  app.get("/:id", async (c) => c.json(publicKey(await getApiKey(ctl, pathParam(c, "id", ApiKeyId)))));

  // A number sets a limit, null removes it, a field left out keeps it (src/contracts/limits.ts).
  app.patch("/:id", async (c) => {
    const id = pathParam(c, "id", ApiKeyId);
    const body = await parseBody(c, UpdateBody);
    return c.json(publicKey(await updateApiKeyLimits(ctl, id, body.limits)));
  });

  app.delete("/:id", async (c) => {
    const { hash: _hash, ...rest } = await revokeApiKey(ctl, pathParam(c, "id", ApiKeyId));
    return c.json({ revoked: rest });
  });

  return app;
}
