/**
 * OpenAI's fine-tuning API, mounted at /v1/fine_tuning (any caller; a job is its organization's,
 * and another organization's is a 404):
 *
 *   POST /jobs   GET /jobs?after&limit   GET /jobs/:id   POST /jobs/:id/cancel
 *   GET /jobs/:id/events?after&limit    GET /jobs/:id/checkpoints?after&limit
 *
 * Datasets are /v1/files uploads (purpose "fine-tune") or storage URIs confined as batch inputs
 * are. The work is done by a trainer (workers/trainer); see docs/fine-tuning.md.
 */
import { Hono } from "hono";
import { z } from "zod";
import type { FineTuningJobs } from "../../finetuning/jobs.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { GatewayEnv } from "../env.ts";
import { readJson } from "../errors.ts";

const Page = z.object({
  limit: z.coerce.number().int().min(1).max(100, "expected at most 100").optional(),
  after: z.string().min(1).max(200).optional(),
});

function page(query: Record<string, string>): z.infer<typeof Page> {
  const parsed = Page.safeParse(query);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = String(issue?.path[0] ?? "limit");
    throw new PlatformError(400, "invalid_request", `${field}: ${issue?.message ?? "invalid"}`, field);
  }
  return parsed.data;
}

export function fineTuningRoutes(jobs: FineTuningJobs) {
  const app = new Hono<GatewayEnv>();

  app.post("/jobs", async (c) => {
    return c.json(await jobs.create(await readJson(c), c.get("caller")));
  });

  app.get("/jobs", async (c) => {
    const result = await jobs.list(c.get("caller"), page(c.req.query()));
    return c.json(result);
  });

  app.get("/jobs/:id", async (c) => c.json(await jobs.get(c.req.param("id"), c.get("caller"))));

  app.post("/jobs/:id/cancel", async (c) => c.json(await jobs.cancel(c.req.param("id"), c.get("caller"))));

  app.get("/jobs/:id/events", async (c) =>
    c.json(await jobs.events(c.req.param("id"), c.get("caller"), page(c.req.query()))),
  );

  app.get("/jobs/:id/checkpoints", async (c) =>
    c.json(await jobs.checkpoints(c.req.param("id"), c.get("caller"), page(c.req.query()))),
  );

  return app;
}
