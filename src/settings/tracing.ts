/**
 * The tracing section: whether OpenTelemetry tracing is on, and the standard `OTEL_*` variables
 * the platform applies itself (exporter, endpoint, protocol, sampler, batching, service name).
 * The rest are passed through to the SDK, which reads them itself: the OTLP exporter's
 * OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT, _COMPRESSION and certificate variables, and
 * the resource's OTEL_RESOURCE_ATTRIBUTES. docs/tracing.md.
 */
import { z } from "zod";
import {
  OTLP_PROTOCOLS,
  SAMPLERS,
  TRACE_EXPORTERS,
  type TraceExporter,
  type TracingSettings,
} from "../telemetry/tracing-contract.ts";
import { flag, optional } from "./parse.ts";

/** The specification's defaults (OTEL_BSP_*), which the SDK no longer reads from the environment itself. */
export const BATCH_DEFAULTS = {
  scheduledDelayMillis: 5000,
  exportTimeoutMillis: 30_000,
  maxQueueSize: 2048,
  maxExportBatchSize: 512,
} as const;

const whole = (what: string) =>
  z.coerce
    .number({ message: `expected a whole number of ${what}` })
    .int()
    .positive();
/** The spec reads booleans case-insensitively ("TRUE" too). */
const otelFlag = z.preprocess((v) => (typeof v === "string" ? v.toLowerCase() : v), flag(false));
const protocol = optional(
  z.enum(OTLP_PROTOCOLS, {
    message:
      "expected http/protobuf or http/json (grpc is not supported: point the exporter at the collector's OTLP/HTTP port, 4318)",
  }),
);
const endpoint = optional(
  z
    .string()
    .refine(
      (text) => URL.canParse(text) && /^https?:$/.test(new URL(text).protocol),
      "expected an http(s) URL, e.g. http://otel-collector:4318",
    ),
);

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
      .transform((text) =>
        text
          .split(",")
          .map((name) => name.trim().toLowerCase())
          .filter(Boolean),
      )
      .pipe(
        z.array(z.enum([...TRACE_EXPORTERS, "none"], { message: "expected otlp, console or none (comma-separated)" })),
      ),
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

export function tracingSettings(e: TracingEnv): TracingSettings {
  const named = e.OTEL_TRACES_EXPORTER ?? [];
  const exporters = named.includes("none") ? [] : [...new Set(named.filter((n): n is TraceExporter => n !== "none"))];
  const endpointSet = e.OTEL_EXPORTER_OTLP_ENDPOINT !== undefined || e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT !== undefined;
  return {
    enabled: !e.OTEL_SDK_DISABLED && exporters.length > 0,
    exporters,
    protocol: e.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? e.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf",
    url:
      e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
      (e.OTEL_EXPORTER_OTLP_ENDPOINT === undefined
        ? undefined
        : `${e.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, "")}/v1/traces`),
    serviceName: e.OTEL_SERVICE_NAME,
    sampler: { name: e.OTEL_TRACES_SAMPLER ?? "parentbased_always_on", ratio: e.OTEL_TRACES_SAMPLER_ARG ?? 1 },
    batch: {
      scheduledDelayMillis: e.OTEL_BSP_SCHEDULE_DELAY ?? BATCH_DEFAULTS.scheduledDelayMillis,
      exportTimeoutMillis: e.OTEL_BSP_EXPORT_TIMEOUT ?? BATCH_DEFAULTS.exportTimeoutMillis,
      maxQueueSize: e.OTEL_BSP_MAX_QUEUE_SIZE ?? BATCH_DEFAULTS.maxQueueSize,
      // The SDK refuses a batch larger than the queue.
      maxExportBatchSize: Math.min(
        e.OTEL_BSP_MAX_EXPORT_BATCH_SIZE ?? BATCH_DEFAULTS.maxExportBatchSize,
        e.OTEL_BSP_MAX_QUEUE_SIZE ?? BATCH_DEFAULTS.maxQueueSize,
      ),
    },
    endpointWithoutExporter: endpointSet && e.OTEL_TRACES_EXPORTER === undefined && !e.OTEL_SDK_DISABLED,
  };
}
