/**
 * Management routes under /admin/v1: the CLI and the dashboard use these to register models and
 * deploy endpoints (operators: what the install shares, app.ts) and manage keys (an organization's
 * admins, their own organization's).
 */
import { stat } from "node:fs/promises";
import { pipeline, Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { type Context, Hono } from "hono";
import { z } from "zod";
import { DeploymentConfig, Framework, ModelName, ModelVersion } from "../../contracts/deployment.ts";
import { type AutoscalingSettings, parseAutoscalingFor } from "../../autoscaling/config.ts";
import type { Endpoint, EndpointStatus } from "../../endpoints/record.ts";
import { ModelTask, type RegisteredVersion } from "../../models/record.ts";
import { autoscalingStatus, clearAutoscaling, setAutoscaling } from "../../autoscaling/store.ts";
import { assertDeployable, forgetAbTest } from "../../abtests/store.ts";
import { servingQueue } from "../../endpoints/rollout.ts";
import { deleteEndpoint, deployEndpoint, findEndpoint, getEndpoint, readEndpoints } from "../../endpoints/store.ts";
import type { Control } from "../../redis/connection.ts";
import { endpointStatus, readQueueDepth } from "../../endpoints/status.ts";
import { errorEnvelope, PlatformError } from "../../contracts/errors.ts";
import { causeFields, logger } from "../../telemetry/log.ts";
import type { Dispatcher } from "../../queue/dispatcher.ts";
import { importModel } from "../../models/import.ts";
import type { ImportDeps, ImportRequest } from "../../models/save.ts";
import { type SourceProgress, sourceStorageError } from "../../models/sources.ts";
import { listModelVersions } from "../../models/versions.ts";
import { openObject, openStore, StorageError } from "../../storage/index.ts";
import { StoragePolicy, type StorageViewer } from "../../storage/policy.ts";
import { abTestRoutes } from "./admin-abtests.ts";
import { adminKeyRoutes } from "./admin-keys.ts";
import { scrapeTargetRoutes } from "./scrape-targets.ts";
import type { GatewayEnv } from "../env.ts";
import { asPlatformError, parseBody, pathParam, readJson } from "../errors.ts";
import { limitStream } from "../input-bounds.ts";

const log = logger("gateway");

export const RegisterBody = z.object({
  name: ModelName,
  framework: Framework.default("llamacpp"),
  source: z.string().min(1),
  version: ModelVersion.refine((v) => v !== "latest", '"latest" is reserved; pick another version name').optional(),
  /** "embed" or "generate"; absent: the architecture's default (docs/embeddings.md). */
  task: ModelTask.optional(),
  /** An adapter's base version, `<model>@<version>` (docs/adapters.md): required when the source holds adapter_config.json. */
  base: z.string().min(1).max(200).optional(),
});

const UploadQuery = z.object({
  framework: Framework.default("llamacpp"),
  source: z.string().min(1),
  version: RegisterBody.shape.version,
  task: RegisterBody.shape.task,
  base: RegisterBody.shape.base,
});

export type AdminDeps = {
  ctl: Control;
  dispatcher: Dispatcher;
  imports: ImportDeps;
  baseUrl: () => string;
  /** The metrics port's /metrics (metrics-port.ts), the gateway's scrape target. */
  metricsUrl?: () => string;
  maxModelBytes?: number;
  storage?: StoragePolicy;
};

export async function statusOf(
  deps: AdminDeps,
  name: string,
): Promise<EndpointStatus & { base_url: string; config: Endpoint["config"] }> {
  const endpoint = await getEndpoint(deps.ctl, name);
  const depth = await readQueueDepth(deps.dispatcher.queueNamed(servingQueue(endpoint)));
  const status = await endpointStatus(deps.ctl, endpoint, depth);
  // The stored deployment rides along so a client changing one field (the dashboard's replica count)
  // can PUT the rest back unchanged instead of resetting it to defaults.
  return { ...status, base_url: `${deps.baseUrl()}/v1`, config: endpoint.config };
}

/** The autoscaling file's contents (or a deployment's `autoscaling:` block), validated; errors name the field. */
function parseAutoscalingBody(body: unknown, name: string): AutoscalingSettings {
  const parsed = parseAutoscalingFor(body, name, "the endpoint being configured");
  if (!parsed.ok) throw new PlatformError(400, "invalid_config", parsed.error, firstField(parsed.error));
  return parsed.value;
}

function firstField(message: string): string | null {
  const field = /^([a-z_.]+):/.exec(message)?.[1];
  return field ?? null;
}

/**
 * `?progress=ndjson`: a remote download can take minutes, so the answer streams
 * `{"progress": {received, total}}` lines, then `{"result": <the version record>}` or `{"error": ...}`.
 * A failure before the first byte (refused address, bad scheme, HTTP 404) is
 * still an ordinary HTTP error with its status code.
 */
async function importWithProgress(
  c: Context<GatewayEnv>,
  run: (onProgress: (p: SourceProgress) => void) => Promise<RegisteredVersion>,
): Promise<Response> {
  let latest: SourceProgress | undefined;
  let started: () => void = () => {};
  const downloading = new Promise<"progress">((resolve) => (started = () => resolve("progress")));
  const work = run((p) => {
    latest = p;
    started();
  });
  const first = await Promise.race([
    work.then(
      () => "done" as const,
      () => "done" as const,
    ),
    downloading,
  ]);
  if (first === "done" && latest === undefined) return c.json(await work, 201);
  const line = (value: unknown) => new TextEncoder().encode(`${JSON.stringify(value)}\n`);
  const requestId = c.get("requestId");
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      let sent: SourceProgress | undefined;
      const tick = () => {
        if (latest && latest !== sent) {
          sent = latest;
          controller.enqueue(line({ progress: latest }));
        }
      };
      tick();
      const timer = setInterval(tick, 250);
      try {
        const record = await work;
        tick();
        controller.enqueue(line({ result: record }));
      } catch (e) {
        if (!(e instanceof PlatformError))
          log.error({ request_id: requestId, ...causeFields(e) }, "model import failed");
        controller.enqueue(line(errorEnvelope(asPlatformError(e))));
      } finally {
        clearInterval(timer);
        controller.close();
      }
    },
  });
  return new Response(stream, {
    status: 200,
    headers: { "content-type": "application/x-ndjson", "x-request-id": requestId },
  });
}

/**
 * A source that names storage (a path, file:// or s3://), confined and opened: one file's bytes,
 * or a checkpoint directory (a local directory, or an s3:// URI ending in "/", read as a prefix);
 * undefined for remote sources (https://, hf://), which registry/import.ts checks.
 */
async function openConfinedSource(
  storage: StoragePolicy,
  source: string,
  viewer: StorageViewer,
): Promise<Pick<ImportRequest, "body" | "directory"> | undefined> {
  if (/^(https?|hf):/i.test(source)) return undefined;
  const confined = await storage.confine(source, viewer, "source");
  try {
    if (confined.uri.startsWith("s3://") && confined.uri.endsWith("/")) {
      return { directory: { store: openStore(confined.uri.replace(/\/+$/, ""), storage.s3), prefix: "" } };
    }
    if (confined.uri.startsWith("file:")) {
      const path = fileURLToPath(confined.uri);
      if ((await stat(path).catch(() => undefined))?.isDirectory()) return { directory: { path } };
    }
    const { store, key } = openObject(confined.uri, storage.s3);
    const stream = await store.get(key);
    stream.once("close", () => store.close());
    return { body: stream };
  } catch (e) {
    if (e instanceof StorageError) throw sourceStorageError(e, source, "no such file or object");
    throw e;
  }
}

export function adminRoutes(deps: AdminDeps) {
  const app = new Hono<GatewayEnv>();
  const { ctl } = deps;

  app.get("/models", async (c) => c.json({ data: await listModelVersions(ctl) }));

  app.post("/models", async (c) => {
    const body = await parseBody(c, RegisterBody);
    // A server-local path or s3:// source must lie inside the admin's storage roots (src/storage/policy.ts).
    const local = await openConfinedSource(deps.storage ?? new StoragePolicy(), body.source, c.get("caller"));
    if (local?.body) return c.json(await importModel(deps.imports, { ...body, ...local }), 201);
    if (c.req.query("progress") === "ndjson")
      return importWithProgress(c, (onProgress) => importModel(deps.imports, { ...body, ...local, onProgress }));
    const record = await importModel(deps.imports, { ...body, ...local });
    return c.json(record, 201);
  });

  // The CLI streams local files here, so registering works against a remote gateway too: one file's
  // bytes (application/octet-stream), or a checkpoint directory as a tar stream (application/x-tar).
  app.post("/models/:name/upload", async (c) => {
    const name = pathParam(c, "name", ModelName);
    const query = UploadQuery.parse(c.req.query());
    if (!c.req.raw.body)
      throw new PlatformError(
        400,
        "invalid_request",
        "upload body is empty; send the artifact bytes as application/octet-stream",
      );
    // Counted as it streams: a model may be far larger than memory, so it is never buffered to be measured.
    const limiter = limitStream(
      c.req.header("content-length"),
      deps.maxModelBytes ?? Number.POSITIVE_INFINITY,
      "PLATFORM_MAX_MODEL_BYTES",
    );
    const body = pipeline(
      Readable.fromWeb(c.req.raw.body as import("node:stream/web").ReadableStream),
      limiter,
      () => undefined,
    );
    const tar = /^application\/(x-)?tar\b/i.test(c.req.header("content-type") ?? "");
    const record = await importModel(deps.imports, { name, ...query, ...(tar ? { tar: body } : { body }) });
    return c.json(record, 201);
  });

  app.get("/endpoints", async (c) => {
    // Records that do not parse are listed apart, so one bad record hides nothing else.
    const { endpoints, invalid } = await readEndpoints(ctl);
    // An endpoint deleted between the list and its status read drops out rather than failing the list.
    const gone = (err: unknown) => {
      if (err instanceof PlatformError && (err.code === "model_not_found" || err.code === "invalid_record"))
        return undefined;
      throw err;
    };
    const data = (await Promise.all(endpoints.map((e) => statusOf(deps, e.name).catch(gone)))).filter(
      (s) => s !== undefined,
    );
    return c.json({ data, invalid: invalid.map((r) => ({ name: r.key, error: r.error })) });
  });

  app.get("/endpoints/:name", async (c) => c.json(await statusOf(deps, pathParam(c, "name", ModelName))));

  app.put("/endpoints/:name", async (c) => {
    const config = await parseBody(c, DeploymentConfig);
    const name = pathParam(c, "name", ModelName);
    if (config.endpoint !== undefined && config.endpoint !== name) {
      throw new PlatformError(
        400,
        "invalid_config",
        `endpoint: "${config.endpoint}" does not match the URL's "${name}"`,
        "endpoint",
      );
    }
    // A deployment file may carry the autoscaling block too: checked before anything is deployed.
    const autoscaling =
      config.autoscaling === undefined ? undefined : parseAutoscalingBody({ autoscaling: config.autoscaling }, name);
    await assertDeployable(ctl, name, config);
    const record = await deployEndpoint(ctl, { ...config, endpoint: name });
    if (autoscaling) await setAutoscaling(ctl, name, autoscaling);
    return c.json(record);
  });

  app.delete("/endpoints/:name", async (c) => {
    const name = pathParam(c, "name", ModelName);
    const variantOf = (await findEndpoint(ctl, name).catch(() => undefined))?.variant_of;
    if (variantOf)
      throw new PlatformError(
        400,
        "invalid_request",
        `"${name}" serves a version of "${variantOf}"'s A/B test; change the split (platform inference abtest update ${variantOf}) or stop the test`,
        "name",
      );
    if (!(await deleteEndpoint(ctl, name)))
      throw new PlatformError(404, "model_not_found", `no endpoint named "${name}"`, "name");
    await clearAutoscaling(ctl, name);
    // Its A/B test and the test's variant deployments go with it.
    for (const variant of await forgetAbTest(ctl, name)) {
      await deleteEndpoint(ctl, variant.name);
      await clearAutoscaling(ctl, variant.name);
    }
    return c.json({ deleted: name });
  });

  app.route("/endpoints", abTestRoutes(deps));
  app.route("/scrape-targets", scrapeTargetRoutes(ctl, deps.metricsUrl ?? deps.baseUrl));

  app.get("/endpoints/:name/autoscaling", async (c) => {
    const endpoint = await getEndpoint(ctl, pathParam(c, "name", ModelName));
    const depth = await readQueueDepth(deps.dispatcher.queueNamed(servingQueue(endpoint)));
    return c.json(await autoscalingStatus(ctl, endpoint, depth));
  });

  app.put("/endpoints/:name/autoscaling", async (c) => {
    const name = pathParam(c, "name", ModelName);
    const settings = parseAutoscalingBody(await readJson(c, "send the autoscaling file as JSON"), name);
    const endpoint = await getEndpoint(ctl, name);
    await setAutoscaling(ctl, name, settings);
    const depth = await readQueueDepth(deps.dispatcher.queueNamed(servingQueue(endpoint)));
    return c.json(await autoscalingStatus(ctl, endpoint, depth));
  });

  app.route("/keys", adminKeyRoutes(ctl));

  return app;
}
