/**
 * The management API of A/B tests, under /admin/v1/endpoints/<name>/abtest:
 * PUT starts or changes a test, GET shows it with each variant's replicas and
 * numbers side by side, DELETE stops it (`?keep=<version>`). The CLI's
 * `platform inference abtest ...` commands call exactly these.
 */
import { Hono } from "hono";
import { z } from "zod";
import { AbVariant, checkSplit, parseSplit, SplitError, Sticky, variantName } from "../../abtests/record.ts";
import { ModelName, ModelVersion } from "../../contracts/deployment.ts";
import { applyAbTest, getAbTest, readVariantStats, stopAbTest } from "../../abtests/store.ts";
import { findEndpoint, getEndpoint } from "../../endpoints/store.ts";
import { endpointStatus, readQueueDepth } from "../../endpoints/status.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { Dispatcher } from "../../queue/dispatcher.ts";
import type { Control } from "../../redis/connection.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";
import { servingQueue } from "../../endpoints/rollout.ts";
import { requireEvaluated, versionEvaluations } from "../../evaluation/abtests.ts";
import { Metric } from "../../evaluation/record.ts";

/**
 * `split`: "v1=70,v2=30" or [{version, weight}]; `sticky`: "key", "header:<name>", or null/absent for none;
 * `require_eval`: a metric every version of the split must have been evaluated on (docs/evaluation.md).
 */
export const AbTestBody = z.object({
  split: z.union([z.string().min(1), z.array(AbVariant).min(1)]),
  sticky: Sticky.nullable().optional(),
  require_eval: z.enum(Metric.options, { message: "require_eval: use perplexity, accuracy or exact_match" }).optional(),
});

/** What the routes use of the admin routes' dependencies (admin.ts AdminDeps). */
export type AbTestDeps = { ctl: Control; dispatcher: Dispatcher };

export function abTestRoutes(deps: AbTestDeps) {
  const app = new Hono<GatewayEnv>();
  const { ctl } = deps;

  app.put("/:name/abtest", async (c) => {
    const name = pathParam(c, "name", ModelName);
    const body = await parseBody(c, AbTestBody);
    let split: AbVariant[];
    try {
      split = typeof body.split === "string" ? parseSplit(body.split) : checkSplit(body.split);
      for (const v of split) variantName(name, v.version);
    } catch (e) {
      if (e instanceof SplitError) throw new PlatformError(400, "invalid_config", `split: ${e.message}`, "split");
      throw e;
    }
    if (body.require_eval) {
      const endpoint = await getEndpoint(ctl, name);
      await requireEvaluated(
        ctl,
        endpoint.config.model.name,
        split.map((v) => v.version),
        body.require_eval,
      );
    }
    const previous = await getAbTest(ctl, name);
    if (previous?.state === "stopping")
      throw new PlatformError(
        409,
        "conflict",
        `the A/B test of "${name}" is stopping; start a new one once \`platform inference abtest status ${name}\` shows none`,
        "endpoint",
      );
    // Changing the split keeps the stickiness unless the body names one.
    const sticky = body.sticky === undefined ? previous?.sticky : (body.sticky ?? undefined);
    await applyAbTest(ctl, name, split, sticky);
    return c.json(await describe(deps, name), previous ? 200 : 201);
  });

  app.get("/:name/abtest", async (c) => c.json(await describe(deps, pathParam(c, "name", ModelName))));

  app.delete("/:name/abtest", async (c) => {
    const name = pathParam(c, "name", ModelName);
    const keepParam = c.req.query("keep");
    const keep = keepParam === undefined ? undefined : ModelVersion.safeParse(keepParam);
    if (keep && !keep.success)
      throw new PlatformError(400, "invalid_request", `keep: "${keepParam}" is not a version (e.g. v2)`, "keep");
    await stopAbTest(ctl, name, keep?.data);
    return c.json(await describe(deps, name));
  });

  return app;
}

/** The test and, per version of it, the deployment's replicas, the numbers counted since it started and its evaluations. */
async function describe(deps: AbTestDeps, name: string) {
  const { ctl } = deps;
  const primary = await getEndpoint(ctl, name);
  const test = await getAbTest(ctl, name);
  if (!test) return { endpoint: name, abtest: null, variants: [] };
  const stats = await readVariantStats(ctl, name);
  const versions = [...new Set([primary.version, ...test.split.map((v) => v.version)])];
  const variants = await Promise.all(
    versions.map(async (version) => {
      const deployment = version === primary.version ? primary : await findEndpoint(ctl, variantName(name, version));
      const status = deployment
        ? await endpointStatus(
            ctl,
            deployment,
            await readQueueDepth(deps.dispatcher.queueNamed(servingQueue(deployment))),
          )
        : undefined;
      return {
        version,
        weight: test.split.find((v) => v.version === version)?.weight ?? 0,
        deployment: deployment?.name ?? null,
        state: status?.state ?? "pending",
        replicas: status?.replicas ?? null,
        queue: status?.queue ?? null,
        evaluations: await versionEvaluations(ctl, primary.config.model.name, version),
        stats: stats.get(version) ?? {
          requests: 0,
          errors: 0,
          prompt_tokens: 0,
          completion_tokens: 0,
          latency_p50_ms: null,
          latency_p99_ms: null,
        },
      };
    }),
  );
  return { endpoint: name, abtest: test, variants };
}
