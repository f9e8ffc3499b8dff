/**
 * Prometheus metrics under the names existing LLM dashboards and KEDA triggers
 * already use (vLLM's, with a `model_name` label), plus the platform's own.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { invalidRecordCounts } from "../control/invalid-records.ts";

const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export type GaugeSample = { model_name: string; waiting: number; running: number; replicas_ready: number; replicas_desired: number };

export class GatewayMetrics {
  readonly registry = new Registry();
  readonly ttft = new Histogram({ name: "vllm:time_to_first_token_seconds", help: "Time to first token", labelNames: ["model_name"], buckets: latencyBuckets, registers: [this.registry] });
  readonly interToken = new Histogram({ name: "vllm:inter_token_latency_seconds", help: "Time between streamed tokens", labelNames: ["model_name"], buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1], registers: [this.registry] });
  readonly e2e = new Histogram({ name: "vllm:e2e_request_latency_seconds", help: "End-to-end request latency", labelNames: ["model_name"], buckets: latencyBuckets, registers: [this.registry] });
  readonly queueTime = new Histogram({ name: "vllm:request_queue_time_seconds", help: "Time spent waiting in the queue", labelNames: ["model_name"], buckets: latencyBuckets, registers: [this.registry] });
  readonly promptTokens = new Counter({ name: "vllm:prompt_tokens_total", help: "Prompt tokens processed", labelNames: ["model_name"], registers: [this.registry] });
  readonly generationTokens = new Counter({ name: "vllm:generation_tokens_total", help: "Tokens generated", labelNames: ["model_name"], registers: [this.registry] });
  readonly success = new Counter({ name: "vllm:request_success_total", help: "Requests finished", labelNames: ["model_name", "finished_reason"], registers: [this.registry] });
  readonly failures = new Counter({ name: "platform_request_errors_total", help: "Requests answered with an error", labelNames: ["model_name", "code"], registers: [this.registry] });
  readonly rateLimited = new Counter({ name: "platform_rate_limit_rejections_total", help: "Requests rejected by rate limits or admission control", labelNames: ["model_name", "reason"], registers: [this.registry] });
  readonly invalidRecords = new Counter({
    name: "platform_invalid_records_total",
    help: "Distinct records in Redis this process skipped because they do not parse (logged once each with the key)",
    labelNames: ["kind"],
    registers: [this.registry],
    collect() {
      this.reset();
      for (const [kind, n] of invalidRecordCounts()) this.inc({ kind }, n);
    },
  });

  constructor(sample: () => Promise<GaugeSample[]>) {
    // Queue and replica gauges are read from Redis at scrape time, so every gateway replica
    // reports the same truth. prom-client collects metrics concurrently: one read serves all four.
    let current: { at: number; samples: Promise<GaugeSample[]> } | undefined;
    const samples = () => {
      if (!current || Date.now() - current.at > 500) current = { at: Date.now(), samples: sample() };
      return current.samples;
    };
    const gauge = (name: string, help: string, pick: (s: GaugeSample) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["model_name"],
        registers: [this.registry],
        async collect() {
          this.reset();
          for (const s of await samples()) this.set({ model_name: s.model_name }, pick(s));
        },
      });
    gauge("vllm:num_requests_waiting", "Requests waiting in the queue", (s) => s.waiting);
    gauge("vllm:num_requests_running", "Requests being processed", (s) => s.running);
    gauge("platform_replicas_ready", "Replicas passing their health check", (s) => s.replicas_ready);
    gauge("platform_replicas_desired", "Replicas wanted", (s) => s.replicas_desired);
  }
}
