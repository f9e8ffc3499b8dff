/**
 * API key management under /admin/v1/keys (admins): create with limits, list, read, change limits,
 * revoke. An organization's admin manages its own organization's keys (another's is the same 404 as
 * a key that does not exist); an operator any organization's, and creates keys in any of them. A
 * key's secret is returned once, by create; records never carry the hash.
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { OrgId } from "../../contracts/orgs.ts";
import { KeyLimitsChange, KeyLimitsInput } from "../../ratelimit/limits.ts";
import { type ApiKey, ApiKeyRole } from "../../keys/record.ts";
import { createApiKey, getApiKey, listApiKeys, revokeApiKey, updateApiKeyLimits } from "../../keys/store.ts";
import type { Control } from "../../redis/connection.ts";
import { revokeTokensOf } from "../../tokens/store.ts";
import type { Caller, GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

/** Ids are minted by src/keys/store.ts. */
export const ApiKeyId = z
  .string()
  .regex(/^key_[0-9a-f]{12}$/, 'expected a key id such as "key_0123456789ab" (`platform keys list` shows them)');

export const CreateBody = z
  .object({
    name: z.string().min(1).max(100),
    role: ApiKeyRole.default("user"),
    limits: KeyLimitsInput.optional(),
    /** Absent: the caller's own organization. */
    org: OrgId.optional(),
  })
  .strict();
export const UpdateBody = z.object({ limits: KeyLimitsChange }).strict();
const ListQuery = z.object({ org: OrgId.optional() }).strict();

/** A record as the API shows it: everything but the hash. */
export function publicKey(record: ApiKey): Omit<ApiKey, "hash"> {
  const { hash: _hash, ...rest } = record;
  return rest;
}

/** The organization whose keys `me` manages: its own, or any (undefined) for an operator. */
const managed = (me: Caller): string | undefined => (me.operator ? undefined : me.org);

export function adminKeyRoutes(ctl: Control) {
  const app = new Hono<GatewayEnv>();

  app.get("/", async (c) => {
    const me = c.get("caller");
    const query = ListQuery.parse(c.req.query());
    return c.json({ data: (await listApiKeys(ctl, managed(me) ?? query.org)).map(publicKey) });
  });

  app.post("/", async (c) => {
    const me = c.get("caller");
    const body = await parseBody(c, CreateBody);
    const org = body.org ?? me.org;
    if (!me.operator && org !== me.org)
      throw new PlatformError(
        403,
        "permission_denied",
        "keys in another organization are made by an operator (an admin of the install's own organization); leave org out for your own",
        "org",
      );
    const { key, record } = await createApiKey(ctl, body.name, body.role, body.limits, org);
    return c.json({ ...publicKey(record), key }, 201);
  });

  app.get("/:id", async (c) =>
    c.json(publicKey(await getApiKey(ctl, pathParam(c, "id", ApiKeyId), managed(c.get("caller"))))),
  );

  // A number sets a limit, null removes it, a field left out keeps it (src/ratelimit/limits.ts).
  app.patch("/:id", async (c) => {
    const id = pathParam(c, "id", ApiKeyId);
    const body = await parseBody(c, UpdateBody);
    return c.json(publicKey(await updateApiKeyLimits(ctl, id, body.limits, managed(c.get("caller")))));
  });

  app.delete("/:id", async (c) => {
    const id = pathParam(c, "id", ApiKeyId);
    const { hash: _hash, ...rest } = await revokeApiKey(ctl, id, managed(c.get("caller")));
    // Its tokens already fail verification (they check the key); this also takes them out of listings.
    await revokeTokensOf(ctl, { kind: "key", id });
    return c.json({ revoked: rest });
  });

  return app;
}
