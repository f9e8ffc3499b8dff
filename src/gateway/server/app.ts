/** The gateway: one Hono app, stateless, any number of replicas against one Redis. */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { requestId } from "hono/request-id";
import { recordVariantOutcome, type VariantOutcome } from "../../abtests/store.ts";
import { RateLimiter } from "../../ratelimit/limiter.ts";
import type { Control } from "../../redis/connection.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { Endpoint } from "../../endpoints/record.ts";
import { PLATFORM_VERSION } from "../../contracts/version.ts";
import { Admission } from "../../queue/admission.ts";
import { Dispatcher, type SubmitOptions } from "../../queue/dispatcher.ts";
import type { Settings } from "../../settings/index.ts";
import { openStore } from "../../storage/index.ts";
import { countBatchRecords, registerBatchMetrics } from "../../batch/metrics.ts";
import { GatewayMetrics } from "../metrics.ts";
import { metricsFor, serveMetrics } from "../metrics-port.ts";
import { servedOf } from "../../telemetry/request-metrics.ts";
import { registerScalingMetrics } from "../../autoscaling/metrics.ts";
import { requestTelemetry } from "../../telemetry/tracing.ts";
import { BatchJobs } from "../../batch/index.ts";
import { Files } from "../../files/store.ts";
import { StoragePolicy } from "../../storage/policy.ts";
import { storageRoutes } from "../routes/storage.ts";
import { adminRoutes, statusOf } from "../routes/admin.ts";
import { batchRoutes } from "../routes/batch-jobs.ts";
import { Evaluations } from "../../evaluation/index.ts";
import { evaluationRoutes } from "../routes/evaluations.ts";
import { dashboardRoutes } from "../routes/dashboard.ts";
import { fileRoutes } from "../routes/files.ts";
import { openAiBatchRoutes } from "../routes/openai-batches.ts";
import { fineTuningRoutes } from "../routes/fine-tuning.ts";
import { FineTuningJobs } from "../../finetuning/jobs.ts";
import { registerFineTuningMetrics } from "../../finetuning/metrics.ts";
import { requireAdmin, requireCaller, requireOperator } from "../auth.ts";
import { CallerCache } from "../callers.ts";
import type { GatewayEnv } from "../env.ts";
import { asPlatformError, errorResponse } from "../errors.ts";
import { bodyLimits } from "../input-bounds.ts";
import { openAiRoutes } from "../routes/openai.ts";
import { responsesRoutes } from "../routes/responses.ts";
import { anthropicRoutes } from "../routes/anthropic.ts";
import { tokenizeRoutes } from "../routes/tokenize.ts";
import { ResponseStore } from "../../responses/store.ts";
import { openAiImageRoutes } from "../routes/openai-images.ts";
import { oauthRoutes } from "../routes/oauth.ts";
import { orgRoutes } from "../routes/orgs.ts";
import { imageRoutes } from "../routes/container-images.ts";
import { serviceRoutes } from "../routes/services.ts";
import { SecretBox } from "../../services/secrets.ts";
import { protoRoutes } from "../routes/protos.ts";
import { registryTokenRoutes } from "../routes/registry-token.ts";
import { registryCredentialRoutes } from "../routes/registry-credentials.ts";
import { signinRoutes } from "../routes/signin.ts";
import { OidcProvider } from "../../signin/oidc.ts";
import { tokenRefreshRoutes, tokenRoutes } from "../routes/tokens.ts";
import { rateLimit } from "../ratelimit.ts";
import { redisDown } from "../redis-down.ts";
import { randomHex } from "../random-id.ts";
import { usageRoutes } from "../routes/usage.ts";
import { rpcRoutes } from "../routes/rpc.ts";
import { OrgLimitsCache } from "../../ratelimit/org-limits.ts";
import type { RpcResolver } from "../rpc/types.ts";
import { ServiceDirectory } from "../../services/directory.ts";
import { registerServiceMetrics } from "../../services/metrics.ts";
import { Router, type Target } from "../routing.ts";

/**
 * What the install shares across organizations (docs/security.md, "Organizations"): managing them
 * needs an operator, reading them too, as their records name the operator's storage and replicas.
 */
const SHARED = ["/admin/v1/models", "/admin/v1/endpoints", "/admin/v1/scrape-targets"];

const PLATFORMRC_SCHEMA = new URL("../../../schemas/platformrc.schema.json", import.meta.url);

/** Longer than any load balancer's idle timeout (AWS ALB: 60 s), as their docs ask of backends. */
const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/** `rpcResolver`: where `/rpc/*` finds deployed services (docs/services.md); none are found without one. */
export type GatewayOptions = {
  ctl: Control;
  settings: Settings;
  host: string;
  port: number;
  rpcResolver?: RpcResolver;
  /**
   * The metrics port (metrics-port.ts); default settings.metrics.port, or any free port (0) when
   * `port` is 0 too, so gateways started side by side (tests) never collide on it.
   */
  metricsPort?: number;
};
/** `awaiting`: requests waiting for their answer from the queue; `metricsUrl`: the metrics port's /metrics. */
export type RunningGateway = { url: string; metricsUrl: string; awaiting: () => number; close: () => Promise<void> };

export async function startGateway(options: GatewayOptions): Promise<RunningGateway> {
  const { ctl, settings } = options;
  const dispatcher = new Dispatcher(ctl, randomUUID(), {
    onPrefixRoute: (outcome) => metrics.prefixRoutes.inc({ outcome }),
  });
  const router = new Router(ctl);
  await router.start();
  // Deployed services, for /rpc/* and the replica gauges (docs/services.md).
  const directory = new ServiceDirectory(ctl, {
    ctl,
    artifacts: openStore(settings.artifactsUrl, settings.storage.s3),
    limits: settings.protos,
  });
  await directory.start();
  let baseUrl = "";
  let metricsUrl = "";

  const storage = StoragePolicy.fromSettings(settings);
  const admin = {
    ctl,
    dispatcher,
    baseUrl: () => baseUrl,
    metricsUrl: () => metricsUrl,
    maxModelBytes: settings.maxModelBytes,
    storage,
    imports: {
      ctl,
      artifacts: openStore(settings.artifactsUrl, settings.storage.s3),
      scratchDir: join(settings.dataDir, "tmp"),
      sources: settings.sources,
      s3: settings.storage.s3,
    },
  };
  const metrics = new GatewayMetrics(async () =>
    Promise.all(
      (await router.endpoints()).map(async (e) => {
        // One endpoint that cannot be read (deleted meanwhile, say) drops out of this scrape alone.
        const s = await statusOf(admin, e.name).catch(() => undefined);
        return s
          ? [
              {
                ...servedOf(e),
                waiting: s.queue.waiting,
                running: s.queue.active,
                replicas_ready: s.replicas.ready,
                replicas_desired: s.replicas.desired,
              },
            ]
          : [];
      }),
    ).then((all) => all.flat()),
  );
  registerScalingMetrics(metrics.registry, ctl, () => router.endpoints());
  registerBatchMetrics(metrics.registry, ctl);
  registerServiceMetrics(metrics.registry, directory);
  // The batch coordinator running in this process reports its records here (src/batch/metrics.ts).
  const stopCountingBatch = countBatchRecords((r) => metrics.batchRecord(r));
  const admission = new Admission(dispatcher, {
    defaults: settings.admission,
    laneWaitMs: settings.admission.laneWaitMs,
    onReject: (endpoint, reason) => metrics.rateLimited.inc({ ...servedOf(endpoint), reason }),
  });
  const textContext = {
    metrics,
    submit: (
      submission: Parameters<Dispatcher["submit"]>[0],
      options: Pick<SubmitOptions, "queueWaitMs" | "queue" | "cost" | "lane" | "idle">,
    ) => dispatcher.submit(submission, { timeoutMs: settings.requestTimeoutMs, ...options }),
    admit: (endpoint: Endpoint) => admission.admit(endpoint),
    onOutcome: (target: Target, outcome: VariantOutcome) =>
      void recordVariantOutcome(ctl, target.name, target.version, outcome).catch(() => undefined),
  };

  const app = new Hono<GatewayEnv>();
  // A caller's x-request-id is echoed when it is up to 255 of [A-Za-z0-9_=-] (hono's check: no
  // spaces or line breaks to forge log lines with); otherwise, or without one, the gateway mints one.
  app.use(requestId({ headerName: "x-request-id", generator: () => `req_${randomHex(12)}` }));
  // Tracing's server span (when on; docs/tracing.md) and, at debug level, a log line per request.
  app.use(requestTelemetry());
  // The version tells `platform init` and `platform doctor` that a URL is a platform gateway, and which.
  app.get("/healthz", (c) => c.json({ status: "ok", version: PLATFORM_VERSION }));
  // The JSON Schema of `.platformrc.json` (shipped in schemas/), which `platform init` names in the
  // file's `$schema`: every editor that can reach the platform completes and checks its keys.
  app.get("/schemas/platformrc.schema.json", async (c) =>
    c.body(await readFile(PLATFORMRC_SCHEMA, "utf8"), 200, { "content-type": "application/schema+json" }),
  );
  // Redis away: every request from here on is answered within seconds (503, Retry-After), none hangs.
  app.use(redisDown(ctl.redis));
  app.get("/readyz", async (c) => {
    const ok = await ctl.redis.ping().then(
      () => true,
      () => false,
    );
    return c.json({ status: ok ? "ready" : "redis unreachable" }, ok ? 200 : 503);
  });
  // Every organization's series, without a key: only where the operator asks for it (metrics-port.ts).
  if (settings.metrics.onApiPort)
    app.get("/metrics", async (c) =>
      c.text(await metrics.registry.metrics(), 200, { "content-type": metrics.registry.contentType }),
    );

  // After authentication: only a key holder can make the gateway read a body at all.
  const limits = bodyLimits(settings);
  // Rate limits and usage (ratelimit.ts): every /v1 response of a limited key carries its x-ratelimit-* headers.
  const limiter = new RateLimiter(ctl, { maxLifetimeMs: settings.requestTimeoutMs + 60_000 });
  // An organization's limits across all its keys (operator-set, else the install's defaults).
  const orgLimits = new OrgLimitsCache(ctl, settings.tenants.orgLimits);
  const meter = rateLimit({
    ctl,
    limiter,
    orgLimits: (org) => orgLimits.of(org),
    onReject: (t, kind) => metrics.rateLimited.inc({ model_name: t.model, version: t.version, reason: `key_${kind}` }),
  });
  // Verified callers, forgotten at once when revoked or changed (callers.ts).
  const callers = new CallerCache(ctl);
  await callers.start();
  const caller = requireCaller(ctl, callers);
  app.use("/v1/*", caller, meter, limits);
  app.route("/v1", openAiRoutes(router, textContext, settings.structured.limits));
  app.route("/v1", anthropicRoutes(router, textContext, settings.structured.limits));
  // vLLM's and llama.cpp server's paths, at the root as theirs are, and under /v1.
  app.use("/tokenize", caller, meter, limits);
  app.use("/detokenize", caller, meter, limits);
  app.route("/", tokenizeRoutes(router, textContext));
  app.route("/v1", tokenizeRoutes(router, textContext));
  app.route(
    "/v1",
    responsesRoutes(router, textContext, settings.structured.limits, new ResponseStore(ctl, settings.responses)),
  );
  app.route(
    "/v1",
    openAiImageRoutes(router, textContext, {
      ctl,
      artifacts: admin.imports.artifacts,
      urlTtlMs: settings.pictures.urlTtlMs,
    }),
  );
  app.route("/v1/usage", usageRoutes(ctl, { flush: () => meter.drain() }));
  const batchFiles = new Files(ctl, admin.imports.artifacts);
  const batchJobs = new BatchJobs(ctl, { storage, files: batchFiles });
  app.route("/v1/storage", storageRoutes(storage));
  app.route("/v1/batch-jobs", batchRoutes({ jobs: batchJobs }));
  app.route(
    "/v1",
    fileRoutes({
      ctl,
      artifacts: admin.imports.artifacts,
      maxFileBytes: settings.maxFileBytes,
      quota: { bytes: settings.tenants.orgFileBytes, files: settings.tenants.orgFiles },
      fileTtlS: settings.tenants.fileTtlS,
    }),
  );
  app.route("/v1", openAiBatchRoutes({ ctl, jobs: batchJobs, artifacts: admin.imports.artifacts }));
  const fineTuning = new FineTuningJobs(ctl, {
    storage,
    files: new Files(ctl, admin.imports.artifacts),
    settings: settings.fineTuning,
    watchTrainers: true,
  });
  await fineTuning.start();
  registerFineTuningMetrics(metrics.registry, fineTuning);
  app.route("/v1/fine_tuning", fineTuningRoutes(fineTuning));
  // Deployed services' RPCs: the same keys, rate limits and body limits, with errors in Connect's
  // shape, which is why the guards run inside the routes (routes/rpc.ts).
  const rpc = rpcRoutes({
    resolve: options.rpcResolver ?? ((org, rpcService) => directory.resolve(org, rpcService)),
    registry: metrics.registry,
    guards: [caller, meter, limits],
    maxMessageBytes: settings.tenants.rpcMaxMessageBytes,
  });
  app.route("/rpc", rpc);
  // The refresh token is this route's credential, so it comes before authentication; Hono runs
  // handlers in the order they were added, and a route that answers ends the chain.
  const tokens = { ctl, lifetimes: settings.tokens };
  app.use("/admin/v1/tokens/refresh", limits);
  app.route("/admin/v1/tokens/refresh", tokenRefreshRoutes(tokens));
  app.use("/admin/v1/*", caller, limits);
  // Any caller: who it is, its tokens, its organization; the metrics it may read (the dashboard's).
  app.get("/admin/v1/metrics", async (c) =>
    c.text(await metricsFor(metrics.registry, c.get("caller")), 200, { "content-type": metrics.registry.contentType }),
  );
  app.route("/admin/v1", tokenRoutes(tokens));
  app.route("/admin/v1/orgs", orgRoutes(ctl, settings.tenants.orgLimits));
  // Any caller of an organization, on its own organization's packages (routes/protos.ts says why).
  app.route("/admin/v1/protos", protoRoutes({ ctl, artifacts: admin.imports.artifacts, limits: settings.protos }));
  app.route("/admin/v1/images", imageRoutes(ctl, settings.registries));
  // Evaluation jobs (docs/evaluation.md): any caller of an organization, on its own organization's.
  const evaluations = new Evaluations(ctl, { storage, files: batchFiles });
  app.route("/admin/v1/evaluations", evaluationRoutes(evaluations));
  // The dev center (docs/services.md): any caller of an organization, on its own services.
  let box: Promise<SecretBox> | undefined;
  app.route(
    "/admin/v1/services",
    serviceRoutes({
      ctl,
      protos: { ctl, artifacts: admin.imports.artifacts, limits: settings.protos },
      box: () => {
        box ??= SecretBox.load(settings.services);
        return box;
      },
      rolloutDeadlineMs: settings.services.rolloutDeadlineMs,
      maxFollowsPerOrg: settings.tenants.orgLogFollows,
      baseUrl: () => baseUrl,
      registries: settings.registries,
    }),
  );
  app.route(
    "/admin/v1/registry-credentials",
    registryCredentialRoutes(ctl, settings, () => (box ??= SecretBox.load(settings.services))),
  );
  // The rest needs an admin of the caller's organization, and what the install shares an operator.
  app.use("/admin/v1/*", requireAdmin());
  // (`<path>/*` matches `<path>` itself too.)
  const operator = requireOperator();
  for (const path of SHARED) app.use(`${path}/*`, operator);
  // Read your own writes: a deploy or A/B change made here routes this gateway's next request,
  // without waiting for its change notice to come back through Redis (other gateways wait for it).
  app.use("/admin/v1/*", async (c, next) => {
    await next();
    if (c.req.method !== "GET") router.changed();
  });
  app.route("/admin/v1", adminRoutes(admin));
  // Sign-in for the CLI (docs/signin.md): the pages a browser is sent to and the token endpoints;
  // no bearer, the sign-in is the credential.
  const signin = {
    ctl,
    lifetimes: settings.tokens,
    publicUrl: settings.signin.publicUrl,
    opensPerMinute: settings.signin.opensPerMinute,
    proxyHops: settings.signin.proxyHops,
    oidc: settings.signin.oidc && new OidcProvider(settings.signin.oidc),
  };
  app.use("/auth/*", limits);
  // Image registries' token server: its credential is Basic auth (routes/registry-token.ts).
  app.route("/auth/registry-token", registryTokenRoutes(ctl, settings.registryToken));
  app.route("/auth", oauthRoutes(signin));
  app.route("/auth", signinRoutes(signin));
  // The web dashboard's static files (docs/dashboard.md): no key for the files, the page asks for one.
  app.route("/dashboard", dashboardRoutes());

  app.notFound((c) =>
    errorResponse(
      c,
      new PlatformError(
        404,
        "unknown_route",
        `no route ${c.req.method} ${c.req.path}; the API lives under /v1 (OpenAI-compatible) and /admin/v1 (management)`,
      ),
    ),
  );
  app.onError((e, c) => {
    metrics.errorAnswered(c.req.raw, c.req.method, c.req.path, asPlatformError(e));
    return errorResponse(c, e);
  });

  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: options.host, port: options.port }, () => resolve(s));
    s.once("error", reject);
  });
  // Idle keep-alive connections are closed by the client, never under it: Node's 5 s default races
  // clients (undici reuses a socket up to 4 s idle) and load balancers (60 s idle) into ECONNRESET.
  const http = server as import("node:http").Server;
  http.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  http.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1_000;
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : options.port;
  baseUrl = `http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${port}`;
  const metricsPort = options.metricsPort ?? (options.port === 0 ? 0 : settings.metrics.port);
  const metricsListener = await serveMetrics(metrics.registry, options.host, metricsPort).catch(async (e: unknown) => {
    await new Promise<void>((resolve) => http.close(() => resolve()));
    throw new Error(
      `the metrics port ${metricsPort} cannot be opened (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); set PLATFORM_METRICS_PORT to a free port`,
    );
  });
  metricsUrl = metricsListener.url;

  return {
    url: baseUrl,
    metricsUrl,
    awaiting: () => dispatcher.awaiting,
    close: async () => {
      const closed = new Promise<void>((resolve) => http.close(() => resolve()));
      http.closeIdleConnections();
      // Streams still open after a grace period are cut rather than waited for.
      const cut = setTimeout(() => http.closeAllConnections(), 3_000);
      await closed;
      clearTimeout(cut);
      await metricsListener.close();
      rpc.close();
      await directory.close();
      await meter.close();
      limiter.close();
      stopCountingBatch();
      await router.close();
      await callers.close();
      await dispatcher.close();
      await batchJobs.close();
      await evaluations.close();
      await fineTuning.close();
    },
  };
}
