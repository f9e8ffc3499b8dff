/** The gateway metrics' pure parts: non-streaming TTFT from the worker's report, which routes are inference, and the labels each call sets. */
import { describe, expect, it } from "vitest";
import { GatewayMetrics, inferenceKind } from "../../src/gateway/metrics.ts";
import { nonStreamingTtft } from "../../src/telemetry/request-metrics.ts";
import { parseMetrics, total } from "../helpers/metrics-text.ts";

describe("nonStreamingTtft", () => {
  it("is the client's wait less the replica's time after its first token", () => {
    expect(nonStreamingTtft(2, { first_token_ms: 100, generation_ms: 1600 })).toBeCloseTo(0.5, 9);
  });

  it("is undefined without the worker's report (no text produced, or an older worker)", () => {
    expect(nonStreamingTtft(2, { generation_ms: 1600 })).toBeUndefined();
    expect(nonStreamingTtft(2, {})).toBeUndefined();
  });

  it("stays within [0, e2e] whatever the figures", () => {
    expect(nonStreamingTtft(0.1, { first_token_ms: 0, generation_ms: 5000 })).toBe(0);
    expect(nonStreamingTtft(0.1, { first_token_ms: 50, generation_ms: 10 })).toBe(0.1);
  });
});

describe("inferenceKind", () => {
  it("names the inference routes and nothing else", () => {
    expect(inferenceKind("POST", "/v1/chat/completions")).toBe("chat");
    expect(inferenceKind("POST", "/v1/completions")).toBe("completion");
    expect(inferenceKind("POST", "/v1/embeddings")).toBe("embedding");
    expect(inferenceKind("POST", "/v1/inference/tiny/generate")).toBe("generate");
    expect(inferenceKind("GET", "/v1/models")).toBeUndefined();
    expect(inferenceKind("POST", "/v1/batches")).toBeUndefined();
    expect(inferenceKind("POST", "/admin/v1/models")).toBeUndefined();
  });
});

describe("GatewayMetrics", () => {
  it("labels answers and errors with the endpoint, the version and the source; errors before routing with empty ones", async () => {
    const m = new GatewayMetrics(async () => []);
    const request = new Request("http://gateway/v1/chat/completions", { method: "POST" });
    m.routed(request, { model_name: "tiny", version: "v2" });
    m.answered({ model_name: "tiny", version: "v2" }, "online", "chat", {
      usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      finish_reason: "length",
      e2eSeconds: 1,
      ttftSeconds: 0.25,
      queuedMs: 10,
    });
    m.errorAnswered(request, "POST", "/v1/chat/completions", { code: "engine_error", status: 500 });
    m.errorAnswered(
      new Request("http://gateway/v1/chat/completions", { method: "POST" }),
      "POST",
      "/v1/chat/completions",
      { code: "invalid_json", status: 400 },
    );
    m.errorAnswered(new Request("http://gateway/v1/models"), "GET", "/v1/models", {
      code: "internal_error",
      status: 500,
    });
    m.batchRecord({
      served: { model_name: "tiny", version: "v1" },
      ok: false,
      failure: { code: "context_length_exceeded", status: 400 },
    });
    const samples = parseMetrics(await m.registry.metrics());
    const served = { model_name: "tiny", version: "v2", source: "online" };
    expect(total(samples, "vllm:request_success_total", { ...served, finished_reason: "length" })).toBe(1);
    expect(total(samples, "vllm:generation_tokens_total", served)).toBe(4);
    expect(total(samples, "vllm:time_to_first_token_seconds_sum", served)).toBe(0.25);
    expect(total(samples, "vllm:request_queue_time_seconds_sum", served)).toBe(0.01);
    expect(
      total(samples, "platform_request_errors_total", { ...served, kind: "chat", code: "engine_error", status: "500" }),
    ).toBe(1);
    expect(
      total(samples, "platform_request_errors_total", {
        model_name: "",
        version: "",
        source: "online",
        kind: "chat",
        code: "invalid_json",
        status: "400",
      }),
    ).toBe(1);
    expect(total(samples, "platform_request_errors_total", { code: "internal_error" })).toBe(0);
    expect(
      total(samples, "platform_request_errors_total", {
        model_name: "tiny",
        version: "v1",
        source: "batch",
        kind: "batch_record",
      }),
    ).toBe(1);
    expect(total(samples, "platform_requests_total")).toBe(4);
  });
});
