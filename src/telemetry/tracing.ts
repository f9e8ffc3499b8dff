/**
 * Distributed tracing with OpenTelemetry, off unless `settings.tracing.enabled` (docs/tracing.md).
 * One trace per request, across processes:
 *   gateway  the SERVER span of the HTTP request; a caller's W3C `traceparent` header is its parent;
 *   worker   "queue wait" (enqueued → a sequence free to run it) and the inference span, both
 *            children of the gateway's span through the `traceparent` the job payload carries.
 * This module imports nothing from OpenTelemetry: the SDK lives in tracing-sdk.ts, loaded only
 * when tracing is switched on. While it is off, each hook below costs one undefined check.
 */
import type { MiddlewareHandler } from "hono";
import { type Fields, logger } from "./log.ts";
import type {
  JobTrace,
  JobTraceInfo,
  RequestIdEnv,
  TracingImpl,
  TracingRole,
  TracingSettings,
} from "./tracing-contract.ts";

const log = logger("tracing");
const requests = logger("gateway");
let active: TracingImpl | undefined;
let starting: Promise<void> | undefined;
/** Probes and scrapes: a span each, every few seconds, would bury the requests. */
const UNTRACED = new Set(["/healthz", "/readyz", "/metrics"]);

/** Switches tracing on for this process when its settings say so; otherwise loads nothing. */
export function startTracing(settings: TracingSettings, role: TracingRole): Promise<void> {
  if (settings.endpointWithoutExporter)
    log.info(
      "an OTLP endpoint is set but OTEL_TRACES_EXPORTER is not: tracing stays off (set OTEL_TRACES_EXPORTER=otlp to export)",
    );
  if (!settings.enabled) return Promise.resolve();
  starting ??= import("./tracing-sdk.ts").then(async ({ createTracing }) => {
    active = await createTracing(settings, role);
    log.info(
      `tracing on: ${settings.exporters.join(", ")} exporter${settings.exporters.includes("otlp") ? ` (${settings.protocol})` : ""}, sampler ${settings.sampler.name}`,
    );
  });
  return starting;
}

/** Whether the OpenTelemetry SDK was loaded in this process (never, while tracing is off). */
export function tracingLoaded(): boolean {
  return active !== undefined;
}

/** Exports the spans still buffered, within `timeoutMs`; for a process about to exit. */
export async function stopTracing(timeoutMs = 2_000): Promise<void> {
  const t = active;
  if (!t) return;
  active = undefined;
  await Promise.race([t.shutdown().catch(() => undefined), new Promise((r) => setTimeout(r, timeoutMs).unref())]);
}

/**
 * The gateway's per-request telemetry: the SERVER span while tracing is on, and with
 * PLATFORM_LOG_LEVEL=debug one log line per request. After the request-id middleware.
 */
export function requestTelemetry(): MiddlewareHandler<RequestIdEnv> {
  return async (c, next) => {
    const t = active;
    if (!t) {
      if (!requests.isEnabled("debug")) return next();
      const started = performance.now();
      await next();
      return logRequest(c, started);
    }
    if (UNTRACED.has(c.req.path)) return next();
    const started = performance.now();
    await t.serve(c, async () => {
      await next();
      // Inside the span's context, so the line carries its trace id.
      if (requests.isEnabled("debug")) logRequest(c, started);
    });
  };
}

function logRequest(c: Parameters<MiddlewareHandler<RequestIdEnv>>[0], started: number): void {
  requests.debug(
    {
      request_id: c.get("requestId"),
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      duration_ms: Math.round((performance.now() - started) * 100) / 100,
    },
    "request",
  );
}

/** The traceparent for a job enqueued now (undefined while tracing is off, or outside any span). */
export function currentTraceparent(): string | undefined {
  return active?.traceparent();
}

/** Starts a job's spans in a worker; undefined while tracing is off. */
export function traceJob(info: JobTraceInfo): JobTrace | undefined {
  return active?.job(info);
}

/**
 * A W3C traceparent's trace id, for log lines: read from the string, so a worker's logs name the
 * request's trace even when its own tracing is off.
 */
export function traceFieldsOf(traceparent: string | undefined): Fields {
  const m = traceparent === undefined ? null : /^[\da-f]{2}-([\da-f]{32})-[\da-f]{16}-[\da-f]{2}/.exec(traceparent);
  return m ? { trace_id: m[1] } : {};
}
