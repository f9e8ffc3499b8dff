/**
 * The OpenTelemetry side of src/telemetry/tracing.ts, imported by it only when tracing is on:
 * the tracer provider (sampler and batching from settings), the OTLP exporter the protocol
 * names, the AsyncLocalStorage context manager and the W3C trace-context propagator, and the
 * spans themselves. Attribute names follow the HTTP, messaging and GenAI semantic conventions
 * where one fits; the platform's own start with `platform.`.
 */
import type { ServerResponse } from "node:http";
import { type Attributes, type Context, context, diag, DiagLogLevel, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace, type TextMapGetter } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { detectResources, resourceAttributesEnvDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  type Sampler,
  SimpleSpanProcessor,
  type SpanExporter,
  type SpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { routePath } from "hono/route";
import type { TracingSettings } from "../settings/tracing.ts";
import { logger, setTraceFields } from "./log.ts";
import type { JobOutcome, JobTraceInfo, TracingImpl, TracingRole } from "./tracing.ts";

const SERVICE_NAMES: Record<TracingRole, string> = { gateway: "platform-gateway", up: "platform-gateway", worker: "platform-worker", scaler: "platform-scaler" };

const headerGetter: TextMapGetter<Headers> = {
  keys: (headers) => [...headers.keys()],
  get: (headers, key) => headers.get(key) ?? undefined,
};

export async function createTracing(settings: TracingSettings, role: TracingRole): Promise<TracingImpl> {
  const log = logger("tracing");
  // Export failures (a collector down) are worth a warning; the SDK's chatter below that is not.
  const warn = (message: string) => log.warn(`exporting spans: ${readable(message)}`);
  diag.setLogger(
    { error: warn, warn, info: () => undefined, debug: () => undefined, verbose: () => undefined },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const resource = detectResources({ detectors: [resourceAttributesEnvDetector] }).merge(
    resourceFromAttributes({ "service.name": settings.serviceName ?? SERVICE_NAMES[role], "platform.role": role, "process.pid": process.pid }),
  );
  const provider = new TracerProvider({ resource, sampler: samplerOf(settings.sampler), spanProcessors: await Promise.all(settings.exporters.map((name) => processorOf(name, settings))) });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const tracer = provider.getTracer("platform");
  setTraceFields(() => {
    const span = trace.getSpan(context.active());
    if (!span) return undefined;
    const { traceId, spanId } = span.spanContext();
    return { trace_id: traceId, span_id: spanId };
  });

  return {
    serve: async (c, next) => {
      const method = c.req.method;
      const parent = propagation.extract(ROOT_CONTEXT, c.req.raw.headers, headerGetter);
      const span = tracer.startSpan(
        method,
        {
          kind: SpanKind.SERVER,
          attributes: {
            "http.request.method": method,
            "url.path": c.req.path,
            "user_agent.original": c.req.header("user-agent"),
            "platform.request_id": c.get("requestId"),
          },
        },
        parent,
      );
      try {
        await context.with(trace.setSpan(parent, span), next);
      } catch (e) {
        // Hono turns errors into responses before here; anything else still ends the span.
        span.recordException(e as Error);
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        throw e;
      }
      const route = routePath(c);
      if (route && !route.includes("*")) {
        span.updateName(`${method} ${route}`);
        span.setAttribute("http.route", route);
      }
      const status = c.res.status;
      const end = () => {
        span.setAttribute("http.response.status_code", status);
        const version = c.res.headers.get("x-model-version");
        if (version) span.setAttribute("platform.model.version", version);
        // A server span is in error for 5xx only: a 4xx is the caller's (HTTP semantic conventions).
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
      };
      // A streamed answer is still being written when the handler returns: the span ends with the response.
      const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
      if (outgoing && !outgoing.writableFinished && !outgoing.destroyed) outgoing.once("close", end);
      else end();
    },

    traceparent: () => {
      const carrier: { traceparent?: string } = {};
      propagation.inject(context.active(), carrier);
      return carrier.traceparent;
    },

    job: (info: JobTraceInfo) => {
      const parent: Context = info.traceparent ? propagation.extract(ROOT_CONTEXT, { traceparent: info.traceparent }) : ROOT_CONTEXT;
      const now = Date.now();
      // Every attribute costs on each request (bench/tracing.ts): the queue wait carries only what
      // finds it; the inference span the rest.
      const wait: Attributes = { "messaging.destination.name": info.queue, "platform.request_id": info.requestId };
      tracer.startSpan("queue wait", { kind: SpanKind.INTERNAL, startTime: Math.min(info.enqueuedAt, now), attributes: wait }, parent).end(now);
      const operation = info.kind === "chat" ? "chat" : info.kind === "embedding" ? "embeddings" : "text_completion";
      const span: Span = tracer.startSpan(
        `${operation} ${info.model}`,
        {
          kind: SpanKind.CONSUMER,
          startTime: now,
          attributes: {
            ...wait,
            "messaging.system": "bullmq",
            "messaging.message.id": info.jobId,
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": info.model,
            "gen_ai.request.max_tokens": info.maxTokens,
            "platform.model.version": info.version,
            "platform.replica": info.replica,
            // Only what is not the usual: a batch record, a retried job.
            "platform.job.kind": info.kind === "batch_record" ? info.kind : undefined,
            "platform.job.attempt": info.attempt > 1 ? info.attempt : undefined,
          },
        },
        parent,
      );
      let ended = false;
      return {
        end: (outcome: JobOutcome) => {
          if (ended) return;
          ended = true;
          if (outcome.usage) span.setAttributes({ "gen_ai.usage.input_tokens": outcome.usage.prompt_tokens, "gen_ai.usage.output_tokens": outcome.usage.completion_tokens });
          if (outcome.finishReason) span.setAttribute("gen_ai.response.finish_reasons", [outcome.finishReason]);
          if (outcome.released) span.setAttribute("platform.job.released", true);
          if (outcome.error) {
            span.setAttribute("error.type", outcome.error.code);
            span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error.message });
          }
          span.end();
        },
      };
    },

    shutdown: async () => {
      setTraceFields(undefined);
      await provider.shutdown();
    },
  };
}

/** The SDK reports a failed export as the error serialized to JSON: its message is what a person needs. */
function readable(message: string): string {
  try {
    const parsed = JSON.parse(message) as { message?: unknown };
    return typeof parsed.message === "string" ? parsed.message : message;
  } catch {
    return message;
  }
}

function samplerOf({ name, ratio }: TracingSettings["sampler"]): Sampler {
  const root = name.endsWith("always_on") ? new AlwaysOnSampler() : name.endsWith("always_off") ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio);
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root;
}

async function processorOf(name: TracingSettings["exporters"][number], settings: TracingSettings): Promise<SpanProcessor> {
  if (name === "console") return new SimpleSpanProcessor({ exporter: new ConsoleSpanExporter() });
  // Only the protocol's package is loaded. The exporter reads OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
  // _TIMEOUT, _COMPRESSION and the certificate variables itself; the URL is the settings'.
  const { OTLPTraceExporter } = settings.protocol === "http/json" ? await import("@opentelemetry/exporter-trace-otlp-http") : await import("@opentelemetry/exporter-trace-otlp-proto");
  const exporter: SpanExporter = new OTLPTraceExporter(settings.url === undefined ? {} : { url: settings.url });
  return new BatchSpanProcessor({ exporter, ...settings.batch });
}
