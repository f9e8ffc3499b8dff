/**
 * The tracing section: whether OpenTelemetry tracing is on, and the standard `OTEL_*` variables
 * the platform applies itself (exporter, endpoint, protocol, sampler, batching, service name).
 * The rest are passed through to the SDK, which reads them itself: the OTLP exporter's
 * OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT, _COMPRESSION and certificate variables, and
 * the resource's OTEL_RESOURCE_ATTRIBUTES. docs/tracing.md.
 */
import { z } from "zod";
import { flag, optional } from "./parse.ts";

export const TRACE_EXPORTERS = ["otlp", "console"] as const;
export type TraceExporter = (typeof TRACE_EXPORTERS)[number];
export const OTLP_PROTOCOLS = ["http/protobuf", "http/json"] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];
const SAMPLERS = ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** The specification's defaults (OTEL_BSP_*), which the SDK no longer reads from the environment itself. */
export const BATCH_DEFAULTS = { scheduledDelayMillis: 5000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 } as const;

const whole = (what: string) => z.coerce.number({ message: `expected a whole number of ${what}` }).int().positive();
/** The spec reads booleans case-insensitively ("TRUE" too). */
const otelFlag = z.preprocess((v) => (typeof v === "string" ? v.toLowerCase() : v), flag(false));
const protocol = optional(
  z.enum(OTLP_PROTOCOLS, { message: "expected http/protobuf or http/json (grpc is not supported: point the exporter at the collector's OTLP/HTTP port, 4318)" }),
);
const endpoint = optional(z.string().refine((text) => URL.canParse(text) && /^https?:$/.test(new URL(text).protocol), "expected an http(s) URL, e.g. http://otel-collector:4318"));

export const tracingShape = {
  /** The spec's master switch: "true" turns every OpenTelemetry signal off, whatever else is set. */
  OTEL_SDK_DISABLED: otelFlag,
  /**
   * The on switch: a comma-separated list of otlp and console; unset or "none" leaves tracing off
   * (the spec's default is otlp; the platform's is off, so that nothing is loaded or exported unasked).
   */
  OTEL_TRACES_EXPORTER: optional(
    z
      .string()
      .transform((text) => text.split(",").map((name) => name.trim().toLowerCase()).filter(Boolean))
      .pipe(z.array(z.enum([...TRACE_EXPORTERS, "none"], { message: "expected otlp, console or none (comma-separated)" }))),
  ),
  OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: protocol,
  OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpoint,
  /** Default: platform-gateway for the gateway and `up`, platform-worker for workers, platform-scaler. */
  OTEL_SERVICE_NAME: optional(z.string().min(1)),
  OTEL_TRACES_SAMPLER: optional(z.enum(SAMPLERS, { message: `expected one of ${SAMPLERS.join(", ")}` })),
  OTEL_TRACES_SAMPLER_ARG: optional(z.coerce.number({ message: "expected a ratio from 0 to 1" }).min(0).max(1)),
  OTEL_BSP_SCHEDULE_DELAY: optional(whole("milliseconds")),
  OTEL_BSP_EXPORT_TIMEOUT: optional(whole("milliseconds")),
  OTEL_BSP_MAX_QUEUE_SIZE: optional(whole("spans")),
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: optional(whole("spans")),
};

type TracingEnv = z.infer<z.ZodObject<typeof tracingShape>>;

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
  batch: { scheduledDelayMillis: number; exportTimeoutMillis: number; maxQueueSize: number; maxExportBatchSize: number };
  /** An OTLP endpoint is set although no exporter is: worth a note at start, since nothing will be sent. */
  endpointWithoutExporter: boolean;
};

export function tracingSettings(e: TracingEnv): TracingSettings {
  const named = e.OTEL_TRACES_EXPORTER ?? [];
  const exporters = named.includes("none") ? [] : [...new Set(named.filter((n): n is TraceExporter => n !== "none"))];
  const endpointSet = e.OTEL_EXPORTER_OTLP_ENDPOINT !== undefined || e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT !== undefined;
  return {
    enabled: !e.OTEL_SDK_DISABLED && exporters.length > 0,
    exporters,
    protocol: e.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? e.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf",
    url: e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (e.OTEL_EXPORTER_OTLP_ENDPOINT === undefined ? undefined : `${e.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, "")}/v1/traces`),
    serviceName: e.OTEL_SERVICE_NAME,
    sampler: { name: e.OTEL_TRACES_SAMPLER ?? "parentbased_always_on", ratio: e.OTEL_TRACES_SAMPLER_ARG ?? 1 },
    batch: {
      scheduledDelayMillis: e.OTEL_BSP_SCHEDULE_DELAY ?? BATCH_DEFAULTS.scheduledDelayMillis,
      exportTimeoutMillis: e.OTEL_BSP_EXPORT_TIMEOUT ?? BATCH_DEFAULTS.exportTimeoutMillis,
      maxQueueSize: e.OTEL_BSP_MAX_QUEUE_SIZE ?? BATCH_DEFAULTS.maxQueueSize,
      // The SDK refuses a batch larger than the queue.
      maxExportBatchSize: Math.min(e.OTEL_BSP_MAX_EXPORT_BATCH_SIZE ?? BATCH_DEFAULTS.maxExportBatchSize, e.OTEL_BSP_MAX_QUEUE_SIZE ?? BATCH_DEFAULTS.maxQueueSize),
    },
    endpointWithoutExporter: endpointSet && e.OTEL_TRACES_EXPORTER === undefined && !e.OTEL_SDK_DISABLED,
  };
}
