/**
 * The dashboard's in-browser arithmetic (src/dashboard/metrics.ts): rates from counter deltas,
 * percentiles from histogram bucket deltas as histogram_quantile computes them, and only the
 * gateway's series (workers' carry a replica label and would double-count).
 */
import { describe, expect, it } from "vitest";
import { parseMetrics, pointBetween, quantileBetween } from "../../src/dashboard/metrics.ts";

const text = (requests: number, buckets: [string, number][], tokens: number, waiting: number) =>
  [
    "# HELP platform_requests_total x",
    `platform_requests_total{model_name="tiny",version="v1",source="online",kind="chat"} ${requests}`,
    `platform_requests_total{model_name="tiny",version="v1",source="online",kind="chat",replica="w1"} 999`,
    ...buckets.map(
      ([le, n]) =>
        `vllm:e2e_request_latency_seconds_bucket{le="${le}",model_name="tiny",version="v1",source="online"} ${n}`,
    ),
    `vllm:generation_tokens_total{model_name="tiny",version="v1",source="online"} ${tokens}`,
    `vllm:num_requests_waiting{model_name="tiny",version="v1"} ${waiting}`,
    `vllm:num_requests_waiting{model_name="other",version="v1"} 7`,
  ].join("\n");

describe("dashboard metrics", () => {
  const prev = parseMetrics(
    text(
      10,
      [
        ["0.1", 5],
        ["1", 10],
        ["+Inf", 10],
      ],
      100,
      0,
    ),
    0,
  );
  const next = parseMetrics(
    text(
      30,
      [
        ["0.1", 5],
        ["1", 30],
        ["+Inf", 30],
      ],
      300,
      3,
    ),
    2_000,
  );

  it("computes per-second rates over the scrape interval, from the gateway's series only", () => {
    const p = pointBetween(prev, next, "tiny");
    expect(p.requestsPerSecond).toBe(10);
    expect(p.tokensPerSecond).toBe(100);
    expect(p.queue).toBe(3);
  });

  it("interpolates percentiles inside the bucket of the interval's observations", () => {
    // All 20 new observations fell in (0.1, 1]: p50 is halfway through it.
    expect(quantileBetween(prev, next, "vllm:e2e_request_latency_seconds", "tiny", 0.5)).toBeCloseTo(0.55, 5);
    expect(quantileBetween(prev, prev, "vllm:e2e_request_latency_seconds", "tiny", 0.5)).toBeNull();
  });

  it("treats a counter that went down (a restarted gateway) as counting from zero", () => {
    const restarted = parseMetrics(
      text(
        4,
        [
          ["0.1", 0],
          ["1", 0],
          ["+Inf", 0],
        ],
        0,
        0,
      ),
      4_000,
    );
    expect(pointBetween(next, restarted, "tiny").requestsPerSecond).toBe(2);
  });
});
