/**
 * The vLLM-compatible request metrics (WIRE.md, "Metric names"), defined once for the two
 * places that expose them: the gateway (what clients saw, per endpoint and version) and each
 * worker (what its replica did). Same names, help and buckets on both, so a dashboard panel
 * reads either; worker series carry a `replica` label and gateway series none, which is how a
 * query picks one view (docs/observability.md).
 */
import { Counter, Histogram, type Registry } from "prom-client";
import type { FinishReason, Usage } from "../contracts/job.ts";

/** The endpoint a client named and the version that served it (routing's Target: name, version). */
export type Served = { model_name: string; version: string };

/** A deployment's labels: an A/B variant (`<endpoint>--<version>`) counts under its endpoint. */
export function servedOf(endpoint: { name: string; version: string; variant_of?: string }): Served {
  return { model_name: endpoint.variant_of ?? endpoint.name, version: endpoint.version };
}

/** What a request asked for: the API route, or a batch job's record. */
export type RequestKind = "chat" | "completion" | "generate" | "embedding" | "batch_record" | "image" | "tokenize";

/** What the gateway learned of one request that got its answer. */
export type Answered = {
  usage: Usage;
  finish_reason: FinishReason;
  /** From the request's arrival to its answer; undefined: not known (a batch record answered before a restart). */
  e2eSeconds?: number;
  /** Streaming: when the first token reached the gateway; otherwise derived from the worker's report (nonStreamingTtft). */
  ttftSeconds?: number;
  queuedMs?: number;
};

/** An error answer, as the client saw it. */
export type Failure = { code: string; status: number };

/**
 * A non-streaming request's time to first token: the client's whole wait less what the replica
 * spent after its first token. Both replica figures come from one clock (the worker's), so no
 * clock is compared across machines; the done event's trip back is counted in the TTFT.
 * Undefined when the worker did not report them (no text produced, or an older worker).
 */
export function nonStreamingTtft(
  e2eSeconds: number,
  result: { first_token_ms?: number; generation_ms?: number },
): number | undefined {
  if (result.first_token_ms === undefined || result.generation_ms === undefined) return undefined;
  const afterFirst = Math.max(0, result.generation_ms - result.first_token_ms) / 1000;
  return Math.min(e2eSeconds, Math.max(0, e2eSeconds - afterFirst));
}

export const VLLM_METRICS = {
  waiting: "vllm:num_requests_waiting",
  running: "vllm:num_requests_running",
  ttft: "vllm:time_to_first_token_seconds",
  interToken: "vllm:inter_token_latency_seconds",
  e2e: "vllm:e2e_request_latency_seconds",
  queueTime: "vllm:request_queue_time_seconds",
  promptTokens: "vllm:prompt_tokens_total",
  generationTokens: "vllm:generation_tokens_total",
  success: "vllm:request_success_total",
} as const;

/** Online requests come through the gateway's API; batch records from a batch job's coordinator. */
export type Source = "online" | "batch";

export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const INTER_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export type VllmRequestMetrics<L extends string> = ReturnType<typeof vllmRequestMetrics<L>>;

/** The request histograms and counters, with `labels` on each (`success` adds `finished_reason`). */
export function vllmRequestMetrics<L extends string>(registry: Registry, labels: readonly L[]) {
  const histogram = (name: string, help: string, buckets: number[]) =>
    new Histogram<L>({ name, help, labelNames: labels, buckets, registers: [registry] });
  const counter = (name: string, help: string) =>
    new Counter<L>({ name, help, labelNames: labels, registers: [registry] });
  return {
    ttft: histogram(
      VLLM_METRICS.ttft,
      "Time to first token: from arrival to the first token produced",
      LATENCY_BUCKETS,
    ),
    interToken: histogram(
      VLLM_METRICS.interToken,
      "Time between consecutive text deltas of one generation",
      INTER_TOKEN_BUCKETS,
    ),
    e2e: histogram(
      VLLM_METRICS.e2e,
      "End-to-end request latency: from arrival to the last byte of the answer",
      LATENCY_BUCKETS,
    ),
    queueTime: histogram(VLLM_METRICS.queueTime, "Time a request waited before generation started", LATENCY_BUCKETS),
    promptTokens: counter(VLLM_METRICS.promptTokens, "Prompt tokens processed (embedding inputs included)"),
    generationTokens: counter(VLLM_METRICS.generationTokens, "Tokens generated"),
    success: new Counter<L | "finished_reason">({
      name: VLLM_METRICS.success,
      help: "Requests finished with an answer, by finish reason (embeddings: stop)",
      labelNames: [...labels, "finished_reason"],
      registers: [registry],
    }),
  };
}
