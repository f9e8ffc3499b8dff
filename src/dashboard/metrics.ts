/**
 * Live numbers from the gateway's /metrics, computed in the browser: the Prometheus text is
 * parsed, and two successive scrapes give rates (counter deltas over the time between them)
 * and latency percentiles (histogram bucket deltas), as PromQL's rate() and histogram_quantile()
 * would. Only the gateway's series count (no `replica` label, or an empty one): workers export
 * the same names, and counting both would count each request twice (docs/observability.md).
 */

export type Sample = { name: string; labels: Record<string, string>; value: number };
export type Scrape = { at: number; samples: Sample[] };

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text: string, at: number): Scrape {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = LINE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    if (labels.replica) continue;
    const value = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : Number(m[3]);
    samples.push({ name: m[1] as string, labels, value });
  }
  return { at, samples };
}

/** Which samples of a metric count: the labels of one endpoint, one service, ... */
export type Match = (labels: Record<string, string>) => boolean;

/** Sum of one metric's samples for one endpoint (`model_name`), over every version and source. */
export function sumFor(scrape: Scrape, name: string, endpoint: string, extra?: Match): number {
  return sumWhere(scrape, name, (l) => l.model_name === endpoint && (!extra || extra(l)));
}

/** Sum of one metric's samples whose labels `match`. */
export function sumWhere(scrape: Scrape, name: string, match: Match): number {
  let total = 0;
  for (const s of scrape.samples) if (s.name === name && match(s.labels)) total += s.value;
  return total;
}

/** Per second between two scrapes; a counter that went down (a gateway restart) counts from zero. */
export function rate(prev: number, next: number, seconds: number): number {
  if (seconds <= 0) return 0;
  return (next >= prev ? next - prev : next) / seconds;
}

/** Bucket counts by upper bound, summed over the matching series (an endpoint's versions and sources). */
function buckets(scrape: Scrape, histogram: string, match: Match): Map<number, number> {
  const out = new Map<number, number>();
  for (const s of scrape.samples) {
    if (s.name !== `${histogram}_bucket` || s.labels.le === undefined || !match(s.labels)) continue;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    out.set(le, (out.get(le) ?? 0) + s.value);
  }
  return out;
}

/**
 * The q-quantile of the observations made between two scrapes, interpolated linearly inside
 * the bucket that holds it (histogram_quantile's method); null when nothing was observed.
 */
export function quantileBetween(
  prev: Scrape,
  next: Scrape,
  histogram: string,
  endpoint: string,
  q: number,
): number | null {
  return quantileWhere(prev, next, histogram, (l) => l.model_name === endpoint, q);
}

/** quantileBetween over the series whose labels `match`. */
export function quantileWhere(prev: Scrape, next: Scrape, histogram: string, match: Match, q: number): number | null {
  const before = buckets(prev, histogram, match);
  const after = buckets(next, histogram, match);
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const deltas = bounds.map((le) => Math.max(0, (after.get(le) ?? 0) - (before.get(le) ?? 0)));
  const total = deltas.at(-1) ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    const count = deltas[i] as number;
    if (count < rank) continue;
    const upper = bounds[i] as number;
    const lower = i === 0 ? 0 : (bounds[i - 1] as number);
    // Past the last finite bound, the best answer is that bound (as Prometheus does).
    if (upper === Infinity) return lower;
    const below = i === 0 ? 0 : (deltas[i - 1] as number);
    const inBucket = count - below;
    return inBucket <= 0 ? upper : lower + (upper - lower) * ((rank - below) / inBucket);
  }
  return null;
}

export type Point = {
  at: number;
  requestsPerSecond: number;
  tokensPerSecond: number;
  p50: number | null;
  p99: number | null;
  queue: number;
};

/** One chart point per endpoint from two successive scrapes. */
export function pointBetween(prev: Scrape, next: Scrape, endpoint: string): Point {
  const seconds = (next.at - prev.at) / 1000;
  const counter = (name: string) => rate(sumFor(prev, name, endpoint), sumFor(next, name, endpoint), seconds);
  return {
    at: next.at,
    requestsPerSecond: counter("platform_requests_total"),
    tokensPerSecond: counter("vllm:generation_tokens_total"),
    p50: quantileBetween(prev, next, "vllm:e2e_request_latency_seconds", endpoint, 0.5),
    p99: quantileBetween(prev, next, "vllm:e2e_request_latency_seconds", endpoint, 0.99),
    queue: sumFor(next, "vllm:num_requests_waiting", endpoint),
  };
}
