/**
 * The OpenTelemetry side of src/telemetry/tracing.ts, imported by it only when tracing is on:
 * the tracer provider (sampler and batching from settings), the OTLP exporter the protocol
 * names, the AsyncLocalStorage context manager and the W3C trace-context propagator, and the
 * spans themselves. Attribute names follow the HTTP, messaging and GenAI semantic conventions
 * where one fits; the platform's own start with `platform.`.
 *
 * Every request pays what runs here, so it does no more than the spans need: no propagator call
 * for a request without a `traceparent` header, the job's traceparent written and read directly
 * (it carries nothing else), attributes built without empty entries (the SDK copies and checks
 * each one twice), and no export inside a request: spans reach the batch processor on the next
 * check phase of the event loop, so a full batch is encoded after the response or reply that
 * ended its last span has been written (ExportAfterTurn).
 */
import type { ServerResponse } from "node:http";
import {
  type Attributes,
  type Context,
  context,
  diag,
  DiagLogLevel,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type TextMapGetter,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { isTracingSuppressed, W3CTraceContextPropagator } from "@opentelemetry/core";
import { detectResources, resourceAttributesEnvDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  SimpleSpanProcessor,
  type Span as SdkSpan,
  type SpanExporter,
  type SpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { routePath } from "hono/route";
import { logger, setTraceFields } from "./log.ts";
import type { JobOutcome, JobTraceInfo, TracingImpl, TracingRole, TracingSettings } from "./tracing-contract.ts";

const SERVICE_NAMES: Record<TracingRole, string> = {
  gateway: "platform-gateway",
  up: "platform-gateway",
  worker: "platform-worker",
  scaler: "platform-scaler",
};

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
    resourceFromAttributes({
      "service.name": settings.serviceName ?? SERVICE_NAMES[role],
      "platform.role": role,
      "process.pid": process.pid,
    }),
  );
  const provider = new TracerProvider({
    resource,
    sampler: samplerOf(settings.sampler),
    spanProcessors: await Promise.all(settings.exporters.map((name) => processorOf(name, settings))),
  });
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
      const headers = c.req.raw.headers;
      // Most requests carry no trace context: only one that does goes through the propagator (tracestate and all).
      const parent = headers.has("traceparent")
        ? propagation.extract(ROOT_CONTEXT, headers, headerGetter)
        : ROOT_CONTEXT;
      const attributes: Attributes = {
        "http.request.method": method,
        "url.path": c.req.path,
        "platform.request_id": c.get("requestId"),
      };
      const agent = headers.get("user-agent");
      if (agent !== null) attributes["user_agent.original"] = agent;
      const span = tracer.startSpan(method, { kind: SpanKind.SERVER, attributes }, parent);
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
      const active = context.active();
      return isTracingSuppressed(active) ? undefined : formatTraceparent(trace.getSpanContext(active));
    },

    job: (info: JobTraceInfo) => {
      const parent = parentOf(info.traceparent);
      const now = Date.now();
      // Every attribute costs on each request (bench/hot-path.ts): the queue wait carries only what
      // finds it; the inference span the rest.
      tracer
        .startSpan(
          "queue wait",
          {
            kind: SpanKind.INTERNAL,
            startTime: Math.min(info.enqueuedAt, now),
            attributes: { "messaging.destination.name": info.queue, "platform.request_id": info.requestId },
          },
          parent,
        )
        .end(now);
      const operation = info.kind === "chat" ? "chat" : info.kind === "embedding" ? "embeddings" : "text_completion";
      const attributes: Attributes = {
        "messaging.destination.name": info.queue,
        "platform.request_id": info.requestId,
        "messaging.system": "bullmq",
        "messaging.message.id": info.jobId,
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": info.model,
        "platform.model.version": info.version,
        "platform.replica": info.replica,
      };
      if (info.maxTokens !== undefined) attributes["gen_ai.request.max_tokens"] = info.maxTokens;
      // Only what is not the usual: a batch record, a retried job.
      if (info.kind === "batch_record") attributes["platform.job.kind"] = info.kind;
      if (info.attempt > 1) attributes["platform.job.attempt"] = info.attempt;
      const span: Span = tracer.startSpan(
        `${operation} ${info.model}`,
        { kind: SpanKind.CONSUMER, startTime: now, attributes },
        parent,
      );
      let ended = false;
      return {
        end: (outcome: JobOutcome) => {
          if (ended) return;
          ended = true;
          if (outcome.usage)
            span.setAttributes({
              "gen_ai.usage.input_tokens": outcome.usage.prompt_tokens,
              "gen_ai.usage.output_tokens": outcome.usage.completion_tokens,
            });
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

/** What the W3C propagator would write for the job, less `tracestate`, which the job does not carry. */
export function formatTraceparent(sc: SpanContext | undefined): string | undefined {
  if (!sc || !isSpanContextValid(sc)) return undefined;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

const TRACEPARENT = /^([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})(-.*)?$/;

/**
 * The job's traceparent as the remote parent of its spans, read as the W3C propagator reads it
 * (version ff and a version-00 header with more fields are invalid; so are zero ids); anything
 * else starts a new trace.
 */
export function parentOf(traceparent: string | undefined): Context {
  const m = traceparent === undefined ? null : TRACEPARENT.exec(traceparent.trim());
  if (!m || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) return ROOT_CONTEXT;
  const sc: SpanContext = {
    traceId: m[2] as string,
    spanId: m[3] as string,
    traceFlags: Number.parseInt(m[4] as string, 16),
    isRemote: true,
  };
  return isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/**
 * Hands ended spans to the batch processor on the next check phase of the event loop rather than
 * inside `span.end()`: a batch that fills is then encoded and sent after the work of the turn
 * that ended it (a response written, a job's reply sent), not in the middle of it.
 */
export class ExportAfterTurn implements SpanProcessor {
  private readonly inner: SpanProcessor;
  private ended: ReadableSpan[] = [];

  constructor(inner: SpanProcessor) {
    this.inner = inner;
  }

  onStart(span: SdkSpan, parentContext: Context): void {
    this.inner.onStart(span, parentContext);
  }

  onEnd(span: ReadableSpan): void {
    this.ended.push(span);
    if (this.ended.length === 1) setImmediate(this.handOver);
  }

  forceFlush(): Promise<void> {
    this.handOver();
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    this.handOver();
    return this.inner.shutdown();
  }

  private readonly handOver = (): void => {
    const spans = this.ended;
    if (spans.length === 0) return;
    this.ended = [];
    for (const span of spans) this.inner.onEnd(span);
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
  const root = name.endsWith("always_on")
    ? new AlwaysOnSampler()
    : name.endsWith("always_off")
      ? new AlwaysOffSampler()
      : new TraceIdRatioBasedSampler(ratio);
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root;
}

async function processorOf(
  name: TracingSettings["exporters"][number],
  settings: TracingSettings,
): Promise<SpanProcessor> {
  if (name === "console") return new SimpleSpanProcessor({ exporter: new ConsoleSpanExporter() });
  // Only the protocol's package is loaded. The exporter reads OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
  // _TIMEOUT, _COMPRESSION and the certificate variables itself; the URL is the settings'.
  const { OTLPTraceExporter } =
    settings.protocol === "http/json"
      ? await import("@opentelemetry/exporter-trace-otlp-http")
      : await import("@opentelemetry/exporter-trace-otlp-proto");
  const exporter: SpanExporter = new OTLPTraceExporter(settings.url === undefined ? {} : { url: settings.url });
  return new ExportAfterTurn(new BatchSpanProcessor({ exporter, ...settings.batch }));
}
