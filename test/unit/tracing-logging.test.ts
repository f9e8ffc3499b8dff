/**
 * The tracing and logging settings (OTEL_*, PLATFORM_LOG_*): off by default, what turns tracing
 * on, bad values named; the job contract's optional traceparent; and the small pure pieces of
 * the log and tracing modules. End to end: test/e2e/tracing.test.ts.
 */
import { describe, expect, it } from "vitest";
import { JobPayload } from "../../src/contracts/job.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { formatText } from "../../src/telemetry/log.ts";
import { startTracing, traceFieldsOf, tracingLoaded } from "../../src/telemetry/tracing.ts";

describe("tracing settings", () => {
  it("is off by default, with the spec's defaults for the rest", () => {
    const t = loadSettings({}).tracing;
    expect(t).toEqual({
      enabled: false,
      exporters: [],
      protocol: "http/protobuf",
      url: undefined,
      serviceName: undefined,
      sampler: { name: "parentbased_always_on", ratio: 1 },
      batch: { scheduledDelayMillis: 5000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 },
      endpointWithoutExporter: false,
    });
  });

  it("is switched on by OTEL_TRACES_EXPORTER, and off again by none or OTEL_SDK_DISABLED", () => {
    expect(loadSettings({ OTEL_TRACES_EXPORTER: "otlp" }).tracing).toMatchObject({
      enabled: true,
      exporters: ["otlp"],
    });
    expect(loadSettings({ OTEL_TRACES_EXPORTER: "otlp, console" }).tracing).toMatchObject({
      enabled: true,
      exporters: ["otlp", "console"],
    });
    expect(loadSettings({ OTEL_TRACES_EXPORTER: "none" }).tracing.enabled).toBe(false);
    expect(loadSettings({ OTEL_TRACES_EXPORTER: "" }).tracing.enabled).toBe(false);
    expect(loadSettings({ OTEL_TRACES_EXPORTER: "otlp", OTEL_SDK_DISABLED: "TRUE" }).tracing.enabled).toBe(false);
    // An endpoint alone exports nothing; the role says so at start.
    expect(loadSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).tracing).toMatchObject({
      enabled: false,
      endpointWithoutExporter: true,
    });
  });

  it("reads the endpoint, protocol, service name, sampler and batching as the spec names them", () => {
    const t = loadSettings({
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: "inference",
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
      OTEL_TRACES_SAMPLER_ARG: "0.25",
      OTEL_BSP_SCHEDULE_DELAY: "200",
      OTEL_BSP_MAX_QUEUE_SIZE: "100",
    }).tracing;
    expect(t).toMatchObject({
      url: "http://collector:4318/v1/traces",
      protocol: "http/json",
      serviceName: "inference",
      sampler: { name: "parentbased_traceidratio", ratio: 0.25 },
      batch: { scheduledDelayMillis: 200, maxQueueSize: 100, maxExportBatchSize: 100 },
    });
    // The signal's own variables win over the general ones, and its URL is used as given.
    expect(
      loadSettings({
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://b:4318/traces",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf",
      }).tracing,
    ).toMatchObject({ url: "http://b:4318/traces", protocol: "http/protobuf" });
  });

  it("names each bad variable and the form it expects", () => {
    expect(() => loadSettings({ OTEL_TRACES_EXPORTER: "jaeger" })).toThrow(
      /OTEL_TRACES_EXPORTER.*expected otlp, console or none/,
    );
    expect(() => loadSettings({ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL: expected http\/protobuf or http\/json \(grpc is not supported/,
    );
    expect(() => loadSettings({ OTEL_TRACES_SAMPLER_ARG: "2" })).toThrow(/OTEL_TRACES_SAMPLER_ARG/);
    expect(() => loadSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" })).toThrow(
      /OTEL_EXPORTER_OTLP_ENDPOINT: expected an http\(s\) URL/,
    );
    expect(() => loadSettings({ OTEL_SDK_DISABLED: "yes" })).toThrow(/OTEL_SDK_DISABLED/);
  });
});

describe("logging settings", () => {
  it("leaves the format to the role unless set, at level info", () => {
    expect(loadSettings({}).logging).toEqual({ format: undefined, level: "info" });
    expect(loadSettings({ PLATFORM_LOG_FORMAT: "json", PLATFORM_LOG_LEVEL: "debug" }).logging).toEqual({
      format: "json",
      level: "debug",
    });
    expect(() => loadSettings({ PLATFORM_LOG_FORMAT: "pretty" })).toThrow(/PLATFORM_LOG_FORMAT: expected json or text/);
    expect(() => loadSettings({ PLATFORM_LOG_LEVEL: "verbose" })).toThrow(/PLATFORM_LOG_LEVEL/);
  });
});

describe("the job contract's traceparent", () => {
  const job = { v: 1, kind: "generate", request_id: "req_1", model: "m", version: "v1", prompt: "hi" };

  it("is optional and carried as given: v1 producers that do not trace are unaffected", () => {
    expect(JobPayload.parse(job)).not.toHaveProperty("traceparent");
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    expect(JobPayload.parse({ ...job, traceparent }).traceparent).toBe(traceparent);
  });

  it("never refuses a job for a bad one: it is dropped and the job starts a new trace", () => {
    expect(JobPayload.parse({ ...job, traceparent: 42 }).traceparent).toBeUndefined();
    expect(JobPayload.parse({ ...job, traceparent: "x".repeat(600) }).traceparent).toBeUndefined();
  });
});

describe("log and trace helpers", () => {
  it("writes text lines in the platform's old shape", () => {
    expect(
      formatText({
        component: "gateway",
        request_id: "req_1",
        msg: "POST /v1/completions: no_capacity",
        detail: "replica error: boom",
      }),
    ).toBe("[gateway] req_1 POST /v1/completions: no_capacity: replica error: boom");
    expect(formatText({ component: "records", msg: "skipping invalid endpoint record x: not valid JSON" })).toBe(
      "[records] skipping invalid endpoint record x: not valid JSON",
    );
    expect(formatText({ component: "worker", msg: "job j failed", err: new Error("engine gone") })).toMatch(
      /^\[worker\] job j failed: Error: engine gone\n\s+at /,
    );
  });

  it("reads the trace id of a traceparent, and nothing from a malformed one", () => {
    expect(traceFieldsOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")).toEqual({
      trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
    });
    expect(traceFieldsOf("garbage")).toEqual({});
    expect(traceFieldsOf(undefined)).toEqual({});
  });

  it("loads nothing when tracing is off", async () => {
    await startTracing(loadSettings({}).tracing, "gateway");
    expect(tracingLoaded()).toBe(false);
  });
});
