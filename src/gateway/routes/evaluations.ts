/**
 * Evaluation routes, mounted at /admin/v1/evaluations (any caller of an organization; a user sees
 * the evaluations it created, an organization's admin its organization's, an operator all):
 *
 *   POST /                          create (body: CreateEvaluationRequest)  → 201 evaluation
 *   GET  /?limit                    list, newest first                      → {object: "list", data}
 *   GET  /results[?target=]         latest results per evaluated version    → {object: "list", data: [{target, results}]}
 *   GET  /compare?a=<id>&b=<id>     b − a with its 95% interval
 *   GET  /:id                       get
 *   POST /:id/cancel                cancel
 *
 * A version's results are also at GET /admin/v1/evaluations/results?target=<model>@<version>.
 */
import { Hono } from "hono";
import { z } from "zod";
import { NAME_PART } from "../../contracts/deployment.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { Evaluations } from "../../evaluation/index.ts";
import type { GatewayEnv } from "../env.ts";
import { readJson } from "../errors.ts";

const ListQuery = z.object({ limit: z.coerce.number().int().min(1).max(100).default(20) });
const TARGET = new RegExp(`^${NAME_PART}@${NAME_PART}$`);

export function evaluationRoutes(evaluations: Evaluations) {
  const app = new Hono<GatewayEnv>();

  app.post("/", async (c) => {
    return c.json(await evaluations.create(await readJson(c), c.get("caller")), 201);
  });

  app.get("/", async (c) => {
    const query = ListQuery.safeParse(c.req.query());
    if (!query.success) throw new PlatformError(400, "invalid_request", "limit: a whole number from 1 to 100", "limit");
    return c.json(await evaluations.list(c.get("caller"), query.data.limit));
  });

  app.get("/results", async (c) => {
    const target = c.req.query("target");
    if (target === undefined) return c.json({ object: "list", data: await evaluations.allResults(c.get("caller")) });
    if (!TARGET.test(target))
      throw new PlatformError(
        400,
        "invalid_request",
        'target: expected "<model>@<version>" (or an adapter\'s "<name>@<version>")',
        "target",
      );
    return c.json({ object: "list", data: [{ target, results: await evaluations.results(target, c.get("caller")) }] });
  });

  app.get("/compare", async (c) => {
    const a = c.req.query("a");
    const b = c.req.query("b");
    if (!a || !b) throw new PlatformError(400, "invalid_request", "a and b: name two evaluation ids", a ? "b" : "a");
    return c.json(await evaluations.compare(a, b, c.get("caller")));
  });

  app.get("/:id", async (c) => c.json(await evaluations.get(c.req.param("id"), c.get("caller"))));

  app.post("/:id/cancel", async (c) => c.json(await evaluations.cancel(c.req.param("id"), c.get("caller"))));

  return app;
}
