/**
 * Management routes under /admin/v1 (admin keys only): the CLI and any
 * dashboard use these to register models, deploy endpoints and manage keys.
 */
import { Readable } from "node:stream";
import { Hono } from "hono";
import { z } from "zod";
import { DeploymentConfig, Framework, ModelName, ModelVersion } from "../contracts/deployment.ts";
import { type AutoscalingSettings, parseAutoscalingConfig } from "../contracts/autoscaling.ts";
import { ApiKeyRole } from "../contracts/records.ts";
import { createApiKey, listApiKeys, revokeApiKey } from "../control/apikeys.ts";
import { autoscalingStatus, clearAutoscaling, setAutoscaling } from "../control/autoscaling.ts";
import { deleteEndpoint, deployEndpoint, getEndpoint, listEndpoints } from "../control/endpoints.ts";
import type { Control } from "../control/redis.ts";
import { endpointStatus, type EndpointStatus, readQueueDepth } from "../control/status.ts";
import { PlatformError } from "../errors.ts";
import type { Dispatcher } from "../fabric/dispatcher.ts";
import { type ImportDeps, importModel } from "../registry/import.ts";
import { listModelVersions } from "../registry/versions.ts";
import type { GatewayEnv } from "./env.ts";
import { parseBody } from "./errors.ts";

const RegisterBody = z.object({
  name: ModelName,
  framework: Framework.default("llamacpp"),
  source: z.string().min(1),
  version: ModelVersion.refine((v) => v !== "latest", '"latest" is reserved; pick another version name').optional(),
});

const UploadQuery = z.object({
  framework: Framework.default("llamacpp"),
  source: z.string().min(1),
  version: RegisterBody.shape.version,
});

const KeyBody = z.object({ name: z.string().min(1).max(100), role: ApiKeyRole.default("user") });

export type AdminDeps = { ctl: Control; dispatcher: Dispatcher; imports: ImportDeps; baseUrl: () => string };

export async function statusOf(deps: AdminDeps, name: string): Promise<EndpointStatus & { base_url: string }> {
  const endpoint = await getEndpoint(deps.ctl, name);
  const depth = await readQueueDepth(deps.dispatcher.queue(endpoint.config.model.name, endpoint.version));
  const status = await endpointStatus(deps.ctl, endpoint, depth);
  return { ...status, base_url: `${deps.baseUrl()}/v1` };
}

/** The autoscaling file's contents (or a deployment's `autoscaling:` block), validated; errors name the field. */
function parseAutoscalingBody(body: unknown, name: string): AutoscalingSettings {
  const parsed = parseAutoscalingConfig(body);
  if (!parsed.ok) throw new PlatformError(400, "invalid_config", parsed.error, firstField(parsed.error));
  if (parsed.value.endpoint !== undefined && parsed.value.endpoint !== name) {
    throw new PlatformError(400, "invalid_config", `endpoint: "${parsed.value.endpoint}" does not match the endpoint being configured, "${name}"`, "endpoint");
  }
  return parsed.value.autoscaling;
}

function firstField(message: string): string | null {
  const field = /^([a-z_.]+):/.exec(message)?.[1];
  return field ?? null;
}

export function adminRoutes(deps: AdminDeps) {
  const app = new Hono<GatewayEnv>();
  const { ctl } = deps;

  app.get("/models", async (c) => c.json({ data: await listModelVersions(ctl) }));

  app.post("/models", async (c) => {
    const body = await parseBody(c, RegisterBody);
    const record = await importModel(deps.imports, body);
    return c.json(record, 201);
  });

  // The CLI streams local files here, so registering works against a remote gateway too.
  app.post("/models/:name/upload", async (c) => {
    const name = ModelName.parse(c.req.param("name"));
    const query = UploadQuery.parse(c.req.query());
    if (!c.req.raw.body) throw new PlatformError(400, "invalid_request", "upload body is empty; send the artifact bytes as application/octet-stream");
    const body = Readable.fromWeb(c.req.raw.body as import("node:stream/web").ReadableStream);
    const record = await importModel(deps.imports, { name, ...query, body });
    return c.json(record, 201);
  });

  app.get("/endpoints", async (c) => {
    const all = await listEndpoints(ctl);
    return c.json({ data: await Promise.all(all.map((e) => statusOf(deps, e.name))) });
  });

  app.get("/endpoints/:name", async (c) => c.json(await statusOf(deps, c.req.param("name"))));

  app.put("/endpoints/:name", async (c) => {
    const config = await parseBody(c, DeploymentConfig);
    const name = c.req.param("name");
    if (config.endpoint !== undefined && config.endpoint !== name) {
      throw new PlatformError(400, "invalid_config", `endpoint: "${config.endpoint}" does not match the URL's "${name}"`, "endpoint");
    }
    // A deployment file may carry the autoscaling block too: checked before anything is deployed.
    const autoscaling = config.autoscaling === undefined ? undefined : parseAutoscalingBody({ autoscaling: config.autoscaling }, name);
    const record = await deployEndpoint(ctl, { ...config, endpoint: name });
    if (autoscaling) await setAutoscaling(ctl, name, autoscaling);
    return c.json(record);
  });

  app.delete("/endpoints/:name", async (c) => {
    const name = c.req.param("name");
    if (!(await deleteEndpoint(ctl, name))) throw new PlatformError(404, "model_not_found", `no endpoint named "${name}"`, "name");
    await clearAutoscaling(ctl, name);
    return c.json({ deleted: name });
  });

  app.get("/endpoints/:name/autoscaling", async (c) => {
    const endpoint = await getEndpoint(ctl, c.req.param("name"));
    const depth = await readQueueDepth(deps.dispatcher.queue(endpoint.config.model.name, endpoint.version));
    return c.json(await autoscalingStatus(ctl, endpoint, depth));
  });

  app.put("/endpoints/:name/autoscaling", async (c) => {
    const name = c.req.param("name");
    let body: unknown;
    try {
      body = await c.req.json();
    } catch (e) {
      throw new PlatformError(400, "invalid_json", `request body is not valid JSON (${(e as Error).message}); send the autoscaling file as JSON`);
    }
    const settings = parseAutoscalingBody(body, name);
    const endpoint = await getEndpoint(ctl, name);
    await setAutoscaling(ctl, name, settings);
    const depth = await readQueueDepth(deps.dispatcher.queue(endpoint.config.model.name, endpoint.version));
    return c.json(await autoscalingStatus(ctl, endpoint, depth));
  });

  app.get("/keys", async (c) => c.json({ data: (await listApiKeys(ctl)).map(({ hash: _hash, ...rest }) => rest) }));

  app.post("/keys", async (c) => {
    const body = await parseBody(c, KeyBody);
    const { key, record } = await createApiKey(ctl, body.name, body.role);
    const { hash: _hash, ...rest } = record;
    return c.json({ ...rest, key }, 201);
  });

  app.delete("/keys/:id", async (c) => {
    const { hash: _hash, ...rest } = await revokeApiKey(ctl, c.req.param("id"));
    return c.json({ revoked: rest });
  });

  return app;
}
