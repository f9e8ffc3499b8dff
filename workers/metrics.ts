/**
 * A replica's own metrics, served at /metrics on the worker's health port (workers/health-server.ts):
 * what this replica did, under the vLLM-compatible names (src/telemetry/request-metrics.ts), every
 * series labelled with the endpoint (`model_name`), `version` and `replica`. Times here start
 * when the replica took the job from the queue, so they leave out the queue the gateway sees.
 * The worker loads this module only when it has a health port: prom-client costs ~20 MB of RSS,
 * which replicas under `platform up` (no port, nothing to scrape them) are spared.
 */
import { Counter, Gauge, Registry } from "prom-client";
import type { JobPayload, JobResult } from "../src/contracts/job.ts";
import type { Endpoint } from "../src/endpoints/record.ts";
import type { AdapterStats } from "./engines/engine.ts";
import { servedOf } from "../src/telemetry/request-metrics.ts";
import { type Source, VLLM_METRICS, vllmRequestMetrics } from "../src/telemetry/request-metrics.ts";

/** One job's moments on this replica, `performance.now()` milliseconds. */
export type JobTimeline = { taken: number; started: number; firstText?: number; ended: number };

export class WorkerMetrics {
  readonly registry = new Registry();
  private readonly vllm = vllmRequestMetrics(this.registry, ["source"] as const);
  private readonly requests = new Counter({
    name: "platform_requests_total",
    help: "Jobs this replica answered (success or error), by kind",
    labelNames: ["source", "kind"],
    registers: [this.registry],
  });
  private readonly failures = new Counter({
    name: "platform_request_errors_total",
    help: "Jobs this replica answered with an error, by error code and HTTP status",
    labelNames: ["source", "kind", "code", "status"],
    registers: [this.registry],
  });

  /** The labels every series of this replica carries (its engine's own too: workers/engine-metrics.ts). */
  readonly labels: Readonly<Record<string, string>>;

  /**
   * `load`: jobs generating now, and jobs this replica holds waiting for a free sequence (its prefetch).
   * `adapters`: the engine's LoRA adapter counts (docs/adapters.md), where it serves adapters.
   */
  constructor(
    endpoint: Endpoint,
    replica: string,
    load: () => { running: number; waiting: number },
    adapters: () => AdapterStats | undefined = () => undefined,
  ) {
    this.labels = { ...servedOf(endpoint), replica };
    this.registry.setDefaultLabels(this.labels);
    new Gauge({
      name: VLLM_METRICS.running,
      help: "Requests generating on this replica",
      registers: [this.registry],
      collect() {
        this.set(load().running);
      },
    });
    new Gauge({
      name: VLLM_METRICS.waiting,
      help: "Requests this replica holds waiting for a free sequence",
      registers: [this.registry],
      collect() {
        this.set(load().waiting);
      },
    });
    new Gauge({
      name: "platform_adapters_loaded",
      help: "LoRA adapters this replica holds loaded now (at most runtime.max_loras)",
      registers: [this.registry],
      collect() {
        this.set(adapters()?.loaded ?? 0);
      },
    });
    // Counted by the engine; exported as counters of its running totals.
    const totals = { loads: 0, evictions: 0 };
    new Counter({
      name: "platform_adapter_loads_total",
      help: "LoRA adapters this replica loaded (first use, or again after an eviction)",
      registers: [this.registry],
      collect() {
        const now = adapters()?.loads ?? totals.loads;
        this.inc(Math.max(0, now - totals.loads));
        totals.loads = now;
      },
    });
    new Counter({
      name: "platform_adapter_evictions_total",
      help: "LoRA adapters this replica unloaded to make room (least recently used first)",
      registers: [this.registry],
      collect() {
        const now = adapters()?.evictions ?? totals.evictions;
        this.inc(Math.max(0, now - totals.evictions));
        totals.evictions = now;
      },
    });
  }

  interToken(source: Source, seconds: number): void {
    this.vllm.interToken.observe({ source }, seconds);
  }

  answered(source: Source, kind: JobPayload["kind"], t: JobTimeline, result: JobResult): void {
    const labels = { source };
    this.requests.inc({ source, kind });
    this.vllm.queueTime.observe(labels, (t.started - t.taken) / 1000);
    this.vllm.e2e.observe(labels, (t.ended - t.taken) / 1000);
    if (t.firstText !== undefined) this.vllm.ttft.observe(labels, (t.firstText - t.taken) / 1000);
    this.vllm.promptTokens.inc(labels, result.usage.prompt_tokens);
    this.vllm.generationTokens.inc(labels, result.usage.completion_tokens);
    this.vllm.success.inc({ source, finished_reason: result.type === "text" ? result.finish_reason : "stop" });
  }

  failed(source: Source, kind: JobPayload["kind"], error: { code: string; status: number }): void {
    this.requests.inc({ source, kind });
    this.failures.inc({ source, kind, code: error.code, status: String(error.status) });
  }
}
