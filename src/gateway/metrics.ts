/**
 * The gateway's Prometheus metrics: what clients saw, under the names existing LLM dashboards
 * and KEDA triggers already use (vLLM's, src/telemetry/request-metrics.ts), plus the platform's
 * own (`platform_*`). Every series names the endpoint the client asked for (`model_name`) and
 * the version that served it (`version`). docs/observability.md lists them all.
 */
import { Counter, Gauge, Registry } from "prom-client";
import { invalidEntryCounts } from "../redis/stored.ts";
import type { BatchRecordReport } from "../batch/metrics.ts";
import { pictureMetrics } from "../telemetry/picture-metrics.ts";
import {
  type Answered,
  type Failure,
  type RequestKind,
  type Served,
  type Source,
  VLLM_METRICS,
  vllmRequestMetrics,
} from "../telemetry/request-metrics.ts";

export type GaugeSample = Served & {
  waiting: number;
  running: number;
  replicas_ready: number;
  replicas_desired: number;
};

/** Series for requests that failed before routing named an endpoint (bad JSON, unknown model, no key). */
const UNROUTED: Served = { model_name: "", version: "" };

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly vllm = vllmRequestMetrics(this.registry, ["model_name", "version", "source"] as const);
  readonly ttft = this.vllm.ttft;
  readonly interToken = this.vllm.interToken;
  readonly e2e = this.vllm.e2e;
  readonly queueTime = this.vllm.queueTime;
  readonly promptTokens = this.vllm.promptTokens;
  readonly generationTokens = this.vllm.generationTokens;
  readonly success = this.vllm.success;
  /** Images made, their steps, time per image and per step (src/telemetry/picture-metrics.ts). */
  readonly images = pictureMetrics(this.registry);
  /** Prompt tokens a replica's KV cache already held (part of vllm:prompt_tokens_total), where the engine counts them. */
  readonly cachedPromptTokens = new Counter({
    name: "platform_prompt_tokens_cached_total",
    help: "Prompt tokens found in a replica's KV cache and not evaluated again (part of vllm:prompt_tokens_total)",
    labelNames: ["model_name", "version", "source"],
    registers: [this.registry],
  });
  /** Every request answered, success or error: the denominator of error rates. */
  readonly requests = new Counter({
    name: "platform_requests_total",
    help: "Inference requests answered (success or error), by route kind; batch records too",
    labelNames: ["model_name", "version", "source", "kind"],
    registers: [this.registry],
  });
  readonly failures = new Counter({
    name: "platform_request_errors_total",
    help: "Inference requests answered with an error, by error code and HTTP status",
    labelNames: ["model_name", "version", "source", "kind", "code", "status"],
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: "platform_rate_limit_rejections_total",
    help: "Requests rejected by rate limits or admission control, by reason",
    labelNames: ["model_name", "version", "reason"],
    registers: [this.registry],
  });
  readonly prefixRoutes = new Counter({
    name: "platform_prefix_route_total",
    help: "Online jobs given a replica's lane by their prompt's prefix: taken there (affine) or moved to the shared queue (spilled)",
    labelNames: ["outcome"],
    registers: [this.registry],
  });
  readonly invalidRecords = new Counter({
    name: "platform_invalid_records_total",
    help: "Distinct records in Redis this process skipped because they do not parse (logged once each with the key)",
    labelNames: ["kind"],
    registers: [this.registry],
    collect() {
      this.reset();
      for (const [kind, n] of invalidEntryCounts()) this.inc({ kind }, n);
    },
  });
  /** Which endpoint and version a request was routed to, for errors counted after the route threw. */
  private readonly routes = new WeakMap<Request, Served>();

  constructor(sample: () => Promise<GaugeSample[]>) {
    // Queue and replica gauges are read from Redis at scrape time, so every gateway replica
    // reports the same truth (dashboards take max, not sum). prom-client collects the metrics
    // of a scrape concurrently: one read serves all four.
    let pending: Promise<GaugeSample[]> | undefined;
    const samples = () =>
      (pending ??= sample().finally(() => {
        pending = undefined;
      }));
    const gauge = (name: string, help: string, pick: (s: GaugeSample) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["model_name", "version"],
        registers: [this.registry],
        async collect() {
          this.reset();
          for (const s of await samples()) this.set({ model_name: s.model_name, version: s.version }, pick(s));
        },
      });
    gauge(
      VLLM_METRICS.waiting,
      "Requests waiting in the endpoint version's queue (batch records included)",
      (s) => s.waiting,
    );
    gauge(VLLM_METRICS.running, "Requests being processed by the endpoint version's replicas", (s) => s.running);
    gauge("platform_replicas_ready", "Replicas passing their health check", (s) => s.replicas_ready);
    gauge("platform_replicas_desired", "Replicas wanted", (s) => s.replicas_desired);
  }

  /** Remembers where a request was routed, so that an error it ends with carries the endpoint and version. */
  routed(request: Request, served: Served): void {
    this.routes.set(request, served);
  }

  /** A request (or batch record) answered successfully. */
  answered(served: Served, source: Source, kind: RequestKind, a: Answered): void {
    const labels = { ...served, source };
    this.requests.inc({ ...labels, kind });
    if (a.e2eSeconds !== undefined) this.e2e.observe(labels, a.e2eSeconds);
    if (a.ttftSeconds !== undefined) this.ttft.observe(labels, a.ttftSeconds);
    if (a.queuedMs !== undefined) this.queueTime.observe(labels, a.queuedMs / 1000);
    this.promptTokens.inc(labels, a.usage.prompt_tokens);
    const cached = a.usage.prompt_tokens_details?.cached_tokens;
    if (cached !== undefined) this.cachedPromptTokens.inc(labels, cached);
    this.generationTokens.inc(labels, a.usage.completion_tokens);
    this.success.inc({ ...labels, finished_reason: a.finish_reason });
  }

  /** A request (or batch record) answered with an error; `served` undefined: it failed before routing. */
  failed(served: Served | undefined, source: Source, kind: RequestKind, f: Failure): void {
    const labels = { ...(served ?? UNROUTED), source, kind };
    this.requests.inc(labels);
    this.failures.inc({ ...labels, code: f.code, status: String(f.status) });
  }

  /**
   * An error answer from the gateway's error handler: every error of an inference route passes
   * there except one sent inside an already-started stream (serve-text.ts counts that one).
   */
  errorAnswered(request: Request, method: string, path: string, f: Failure): void {
    const kind = inferenceKind(method, path);
    if (kind) this.failed(this.routes.get(request), "online", kind, f);
  }

  /** A batch record's final answer, from the batch coordinator of this process. */
  batchRecord(report: BatchRecordReport): void {
    if (report.ok) this.answered(report.served, "batch", "batch_record", report.answered);
    else this.failed(report.served, "batch", "batch_record", report.failure);
  }
}

/** The inference route a path belongs to (errors on other routes are not inference requests). */
export function inferenceKind(method: string, path: string): RequestKind | undefined {
  if (method !== "POST") return undefined;
  // The Responses and Messages APIs run chat jobs.
  if (path === "/v1/chat/completions" || path === "/v1/responses" || path === "/v1/messages") return "chat";
  if (path === "/v1/completions") return "completion";
  if (path === "/v1/embeddings") return "embedding";
  if (/^\/v1\/inference\/[^/]+\/generate$/.test(path)) return "generate";
  return undefined;
}
