/**
 * Organizations under /admin/v1/orgs: operators create them and see them all; any other caller
 * sees its own alone (another's is the same 404 as one that does not exist).
 *
 *   POST /      {id, name?}   → 201 the record (operators)
 *   GET  /                    → {data: [records]}
 *   GET  /:id                 → the record
 *   GET  /:id/limits          → {limits}: its traffic limits across all its keys (in force: its own or the defaults)
 *   PUT  /:id/limits          {rpm?, tpm?, max_concurrency?} → {limits} (operators only: an organization's
 *                             admin tightens on its keys, never lifts these; {} removes its own)
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { OrgId } from "../../contracts/orgs.ts";
import { createOrg, getOrg, listOrgs } from "../../orgs/store.ts";
import { ScopeLimits } from "../../ratelimit/limits.ts";
import { getOrgLimits, setOrgLimits } from "../../ratelimit/org-limits.ts";
import type { Control } from "../../redis/connection.ts";
import { requireOperator } from "../auth.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

export const CreateOrgBody = z.object({ id: OrgId, name: z.string().min(1).max(100).optional() }).strict();

/** `defaults`: the install's organization limits (PLATFORM_ORG_*), in force where an organization has none of its own. */
export function orgRoutes(ctl: Control, defaults: ScopeLimits = {}) {
  const app = new Hono<GatewayEnv>();
  const inForce = async (id: string) => {
    const own = await getOrgLimits(ctl, id);
    return { limits: own ?? defaults, source: own ? "organization" : "defaults" };
  };

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

  app.get("/:id/limits", async (c) => {
    const id = pathParam(c, "id", OrgId);
    const me = c.get("caller");
    if (!me.operator && id !== me.org) throw new PlatformError(404, "org_not_found", `no organization "${id}"`, "id");
    await getOrg(ctl, id);
    return c.json(await inForce(id));
  });

  app.put("/:id/limits", requireOperator(), async (c) => {
    const id = pathParam(c, "id", OrgId);
    await getOrg(ctl, id);
    const limits = await parseBody(c, ScopeLimits.strict());
    await setOrgLimits(ctl, id, limits);
    return c.json(await inForce(id));
  });

  return app;
}
