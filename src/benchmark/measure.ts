/**
 * The measuring half of `platform inference benchmark`: streamed requests through the gateway,
 * timed per chunk, sent by a fixed number of closed-loop clients (one concurrency level), and
 * what a level adds up to. It knows nothing of endpoints or configurations.
 */
import type { ClientRequest, IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { createParser } from "eventsource-parser";
import { http } from "../process/node-http.ts";
import { type Summary, summarizeSamples } from "./stats.ts";

/** `images`: POST /v1/images/generations (pictures.ts), for diffusers endpoints. */
export type Api = "chat" | "completions" | "images";

export type RequestSpec = {
  /** The gateway's origin, without /v1. */
  baseUrl: string;
  apiKey: string;
  api: Api;
  model: string;
  prompt: string;
  /** Chat only: the whole conversation instead of one user message of `prompt` (traces.ts). */
  messages?: { role: string; content: string }[];
  maxTokens: number;
  /** Image requests: `<width>x<height>` (absent: the model's default) and denoising steps (absent: the pipeline's). */
  size?: string;
  steps?: number;
};

/** One request as the client saw it; times in ms from the moment it was sent. */
export type RequestSample = {
  ok: boolean;
  /**
   * To the first chunk carrying text; absent when the answer had none (an immediate stop). A
   * llama-server stream that carried none (it holds back bytes that are not valid UTF-8 yet, which a
   * random model's byte tokens may never complete) counts the whole time less the generation time it
   * reports (`timings.predicted_ms`).
   */
  ttft_ms?: number;
  /** Gaps between successive chunks carrying text. */
  itl_ms: number[];
  e2e_ms: number;
  /** From the usage chunk when the gateway sent one, else the text chunks counted. */
  output_tokens: number;
  prompt_tokens: number;
  /** The prompt tokens the server found cached (usage.prompt_tokens_details; llama-server's timings.cache_n). */
  cached_tokens?: number;
  /** The answer's text, when asked for (`keepText`): a trace sends it back as the next turn's assistant message. */
  text?: string;
  tokens_exact: boolean;
  /** Image requests: the images made and the denoising steps they took (the answer's usage). */
  images?: number;
  steps?: number;
  error?: string;
};

export type LevelResult = {
  concurrency: number;
  requests: number;
  completed: number;
  errors: number;
  /** A few distinct failure messages, so a failed level says why. */
  error_samples: string[];
  duration_s: number;
  requests_per_s: number;
  output_tokens_per_s: number;
  output_tokens: number;
  prompt_tokens: number;
  /** false when some answer carried no usage chunk and its tokens were counted as text chunks. */
  tokens_exact: boolean;
  ttft_ms: Summary | null;
  itl_ms: Summary | null;
  e2e_ms: Summary | null;
  /** Time per output token after the first, per request: (e2e - ttft) / (tokens - 1). */
  tpot_ms: Summary | null;
  /** Image requests only: images per second over the level, time per image and per denoising step, per request. */
  images_per_s?: number;
  image_ms?: Summary | null;
  step_ms?: Summary | null;
};

// One keep-alive pool for the whole run: a new TCP (or TLS) connection per request would be
// counted in every TTFT, which no long-running client pays.
const httpAgent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });

export function agentFor(https: boolean): typeof httpAgent {
  return https ? httpsAgent : httpAgent;
}

export function closeConnections(): void {
  httpAgent.destroy();
  httpsAgent.destroy();
}

/**
 * Sends one streamed request and times it. node:http rather than fetch: undici's own per-chunk
 * cost lands in the inter-token figures (bench/measure.ts, docs/performance.md). Failures are
 * samples (ok: false), not exceptions; only `signal` rejects.
 */
export function sendStreamed(spec: RequestSpec, signal: AbortSignal, keepText = false): Promise<RequestSample> {
  const url = new URL(`${spec.baseUrl}/v1/${spec.api === "chat" ? "chat/completions" : "completions"}`);
  const common = {
    model: spec.model,
    max_tokens: spec.maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  };
  const body = JSON.stringify(
    spec.api === "chat"
      ? { ...common, messages: spec.messages ?? [{ role: "user", content: spec.prompt }] }
      : { ...common, prompt: spec.prompt },
  );
  const https = url.protocol === "https:";
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const texts: number[] = [];
    let answer = "";
    let usage: StreamEvent["usage"] | undefined;
    let cacheN: number | undefined;
    let predictedMs: number | undefined;
    let failure: string | undefined;
    let done = false;
    let settled = false;
    const finish = (error?: string) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      const e2e = performance.now() - started;
      const first = texts[0] ?? (predictedMs !== undefined ? started + e2e - predictedMs : undefined);
      const gaps = texts.slice(1).map((t, i) => t - (texts[i] as number));
      const message = error ?? failure ?? (done ? undefined : "the stream ended without [DONE]");
      const cached = usage?.prompt_tokens_details?.cached_tokens ?? cacheN;
      resolve({
        ok: message === undefined,
        ...(first !== undefined ? { ttft_ms: first - started } : {}),
        itl_ms: gaps,
        e2e_ms: e2e,
        output_tokens: usage?.completion_tokens ?? texts.length,
        prompt_tokens: usage?.prompt_tokens ?? 0,
        ...(cached !== undefined ? { cached_tokens: cached } : {}),
        ...(keepText ? { text: answer } : {}),
        tokens_exact: usage?.completion_tokens !== undefined,
        ...(message !== undefined ? { error: message } : {}),
      });
    };
    let req: ClientRequest;
    const onAbort = () => {
      settled = true;
      req.destroy();
      reject(signal.reason ?? new Error("aborted"));
    };
    const onEvent = (data: string) => {
      if (data === "[DONE]") {
        done = true;
        return;
      }
      let event: StreamEvent;
      try {
        event = JSON.parse(data) as StreamEvent;
      } catch {
        failure = `a stream event that is not JSON: ${data.slice(0, 120)}`;
        return;
      }
      if (event.error) failure = describeError(event.error);
      if (event.usage) usage = event.usage;
      if (typeof event.timings?.cache_n === "number") cacheN = event.timings.cache_n;
      if (typeof event.timings?.predicted_ms === "number") predictedMs = event.timings.predicted_ms;
      const choice = event.choices?.[0];
      const text = spec.api === "chat" ? choice?.delta?.content : choice?.text;
      if (typeof text === "string" && text !== "") {
        texts.push(performance.now());
        if (keepText) answer += text;
      }
    };
    const onResponse = (res: IncomingMessage) => {
      res.setEncoding("utf8");
      if (res.statusCode !== 200) {
        let text = "";
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => finish(httpErrorText(res.statusCode ?? 0, text)));
        res.on("error", (e) => finish(e.message));
        return;
      }
      // A chunk may hold several events, or part of one.
      const parser = createParser({ onEvent: (event) => onEvent(event.data) });
      res.on("data", (chunk: string) => parser.feed(chunk));
      res.on("end", () => finish());
      res.on("error", (e) => finish(e.message));
    };
    const headers = {
      authorization: `Bearer ${spec.apiKey}`,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      accept: "text/event-stream",
    };
    req = (https ? httpsRequest : http.request)(
      url,
      { method: "POST", agent: https ? httpsAgent : httpAgent, headers },
      onResponse,
    );
    req.on("error", (e) => finish(`cannot reach the gateway (${(e as NodeJS.ErrnoException).code ?? e.message})`));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    req.end(body);
  });
}

type StreamEvent = {
  choices?: { delta?: { content?: string | null }; text?: string }[];
  usage?: {
    prompt_tokens?: number;
    completion_tokens?: number;
    prompt_tokens_details?: { cached_tokens?: number };
  } | null;
  /** llama-server's own figures: `cache_n` prompt tokens taken from its slot's cache, `predicted_ms` generating. */
  timings?: { cache_n?: number; predicted_ms?: number };
  error?: { message?: string; code?: string };
};

function describeError(error: { message?: string; code?: string }): string {
  return `${error.message ?? "the request failed"}${error.code ? ` (${error.code})` : ""}`;
}

export function httpErrorText(status: number, text: string): string {
  try {
    const err = (JSON.parse(text) as { error?: { message?: string; code?: string } }).error;
    if (err) return `HTTP ${status}: ${describeError(err)}`;
  } catch {
    // not the platform's envelope: the text itself says more than nothing
  }
  return `HTTP ${status}: ${text.slice(0, 200)}`;
}

export type LevelPlan = {
  concurrency: number;
  /** Either a fixed number of requests... */
  requests?: number;
  /** ...or new requests for this long; those in flight at the deadline still finish and count. */
  durationMs?: number;
};

export type LevelProgress = { started: number; finished: number; errors: number; elapsedMs: number };

/**
 * One concurrency level: `concurrency` clients, each sending its next request as soon as its
 * last one ended (closed loop, as `vllm bench serve --max-concurrency` does), so the level's
 * rates are what the endpoint sustains with that many requests in flight.
 */
export async function runLevel(
  plan: LevelPlan,
  send: () => Promise<RequestSample>,
  onProgress: (p: LevelProgress) => void,
): Promise<LevelResult> {
  const samples: RequestSample[] = [];
  const t0 = performance.now();
  let started = 0;
  let errors = 0;
  const more = () =>
    plan.requests !== undefined ? started < plan.requests : performance.now() - t0 < (plan.durationMs ?? 0);
  const report = () => onProgress({ started, finished: samples.length, errors, elapsedMs: performance.now() - t0 });
  const client = async () => {
    while (more()) {
      started++;
      const sample = await send();
      samples.push(sample);
      if (!sample.ok) errors++;
      report();
    }
  };
  const ticker = setInterval(report, 250);
  try {
    await Promise.all(Array.from({ length: plan.concurrency }, client));
  } finally {
    clearInterval(ticker);
  }
  return levelResult(plan.concurrency, samples, (performance.now() - t0) / 1000);
}

/** Microseconds are below what a client on another host can tell apart; more digits only clutter the JSON. */
const round3 = (v: number) => Math.round(v * 1000) / 1000;
const rounded = (s: Summary | null): Summary | null =>
  s === null
    ? null
    : { count: s.count, mean: round3(s.mean), p50: round3(s.p50), p90: round3(s.p90), p99: round3(s.p99) };

/** What a level's samples add up to; rates over the whole level, latencies over the requests that succeeded. */
export function levelResult(concurrency: number, samples: RequestSample[], durationS: number): LevelResult {
  const ok = samples.filter((s) => s.ok);
  const outputTokens = ok.reduce((sum, s) => sum + s.output_tokens, 0);
  const tpot = ok.flatMap((s) =>
    s.ttft_ms !== undefined && s.output_tokens > 1 ? [(s.e2e_ms - s.ttft_ms) / (s.output_tokens - 1)] : [],
  );
  return {
    concurrency,
    requests: samples.length,
    completed: ok.length,
    errors: samples.length - ok.length,
    error_samples: [...new Set(samples.flatMap((s) => (s.error ? [s.error] : [])))].slice(0, 5),
    duration_s: round3(durationS),
    requests_per_s: round3(durationS > 0 ? ok.length / durationS : 0),
    output_tokens_per_s: round3(durationS > 0 ? outputTokens / durationS : 0),
    output_tokens: outputTokens,
    prompt_tokens: ok.reduce((sum, s) => sum + s.prompt_tokens, 0),
    tokens_exact: ok.every((s) => s.tokens_exact),
    ttft_ms: rounded(summarizeSamples(ok.flatMap((s) => (s.ttft_ms !== undefined ? [s.ttft_ms] : [])))),
    itl_ms: rounded(summarizeSamples(ok.flatMap((s) => s.itl_ms))),
    e2e_ms: rounded(summarizeSamples(ok.map((s) => s.e2e_ms))),
    tpot_ms: rounded(summarizeSamples(tpot)),
    ...(ok.some((s) => s.images !== undefined) ? imageFigures(ok, durationS) : {}),
  };
}

/** Time per image and per step, per request (its end-to-end time over what it made), and images/s. */
function imageFigures(ok: RequestSample[], durationS: number) {
  const made = ok.filter((s) => (s.images ?? 0) > 0);
  const images = made.reduce((sum, s) => sum + (s.images ?? 0), 0);
  return {
    images_per_s: round3(durationS > 0 ? images / durationS : 0),
    image_ms: rounded(summarizeSamples(made.map((s) => s.e2e_ms / (s.images as number)))),
    step_ms: rounded(
      summarizeSamples(made.filter((s) => (s.steps ?? 0) > 0).map((s) => s.e2e_ms / (s.steps as number))),
    ),
  };
}
