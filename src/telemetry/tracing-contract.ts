/**
 * What tracing.ts and the SDK it loads only when tracing is on (tracing-sdk.ts) agree on: the
 * settings, the roles, what a worker knows of a job and how it ended, and the SDK side's interface.
 * Apart from both so that neither imports the other for a type.
 */
import type { MiddlewareHandler } from "hono";
import type { Usage } from "../contracts/job.ts";

export const TRACE_EXPORTERS = ["otlp", "console"] as const;
export type TraceExporter = (typeof TRACE_EXPORTERS)[number];
export const OTLP_PROTOCOLS = ["http/protobuf", "http/json"] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];
export const SAMPLERS = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** What tracing does in this process (src/settings/tracing.ts reads it from the `OTEL_*` variables). */
export type TracingSettings = {
  /** Off (the default): the OpenTelemetry SDK is never loaded and no request does any span work. */
  enabled: boolean;
  exporters: TraceExporter[];
  /** OTLP encoding: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else the spec's http/protobuf. */
  protocol: OtlpProtocol;
  /**
   * Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else OTEL_EXPORTER_OTLP_ENDPOINT
   * with `/v1/traces` appended (the spec's rule); undefined: the exporter's default, http://localhost:4318/v1/traces.
   */
  url: string | undefined;
  /** OTEL_SERVICE_NAME; undefined: each role names itself. */
  serviceName: string | undefined;
  /** Default parentbased_always_on: a caller's sampled flag is obeyed, every root trace is sampled. */
  sampler: { name: SamplerName; ratio: number };
  batch: {
    scheduledDelayMillis: number;
    exportTimeoutMillis: number;
    maxQueueSize: number;
    maxExportBatchSize: number;
  };
  /** An OTLP endpoint is set although no exporter is: worth a note at start, since nothing will be sent. */
  endpointWithoutExporter: boolean;
};

/** What the request middleware reads of a request: the id the request-id middleware gave it. */
export type RequestIdEnv = { Variables: { requestId: string } };

export type TracingRole = "gateway" | "worker" | "scaler" | "up";

/** What a worker knows of a job when a sequence takes it. */
export type JobTraceInfo = {
  traceparent: string | undefined;
  /** When the producer added the job (BullMQ's `job.timestamp`): the queue wait's start. */
  enqueuedAt: number;
  queue: string;
  jobId: string;
  requestId: string;
  kind: string;
  model: string;
  version: string;
  replica: string;
  attempt: number;
  maxTokens: number | undefined;
};
export type JobOutcome = {
  usage?: Usage;
  finishReason?: string;
  error?: { code: string; message: string };
  released?: boolean;
};
export type JobTrace = { end: (outcome: JobOutcome) => void };

/** The SDK side (tracing-sdk.ts). */
export type TracingImpl = {
  /** Runs the rest of the request inside its SERVER span; the span ends when the response has been sent. */
  serve: (c: Parameters<MiddlewareHandler<RequestIdEnv>>[0], next: () => Promise<void>) => Promise<void>;
  /** The active span's context as a W3C traceparent, for the job payload. */
  traceparent: () => string | undefined;
  /** Records the job's queue wait and starts its inference span. */
  job: (info: JobTraceInfo) => JobTrace;
  /** Exports what is buffered and stops. */
  shutdown: () => Promise<void>;
};
