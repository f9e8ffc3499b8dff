/**
 * Organizations under /admin/v1/orgs: operators create them and see them all; any other caller
 * sees its own alone (another's is the same 404 as one that does not exist).
 *
 *   POST /      {id, name?}   → 201 the record (operators)
 *   GET  /                    → {data: [records]}
 *   GET  /:id                 → the record
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { OrgId } from "../../contracts/orgs.ts";
import { createOrg, getOrg, listOrgs } from "../../orgs/store.ts";
import type { Control } from "../../redis/connection.ts";
import { requireOperator } from "../auth.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

export const CreateOrgBody = z.object({ id: OrgId, name: z.string().min(1).max(100).optional() }).strict();

export function orgRoutes(ctl: Control) {
  const app = new Hono<GatewayEnv>();

  app.post("/", requireOperator(), async (c) => {
    const body = await parseBody(c, CreateOrgBody);
    return c.json(await createOrg(ctl, body.id, body.name), 201);
  });

  app.get("/", async (c) => {
    const me = c.get("caller");
    return c.json({ data: me.operator ? await listOrgs(ctl) : [await getOrg(ctl, me.org)] });
  });

  app.get("/:id", async (c) => {
    const id = pathParam(c, "id", OrgId);
    const me = c.get("caller");
    if (!me.operator && id !== me.org) throw new PlatformError(404, "org_not_found", `no organization "${id}"`, "id");
    return c.json(await getOrg(ctl, id));
  });

  return app;
}
