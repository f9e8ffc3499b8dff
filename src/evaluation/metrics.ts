/**
 * The numbers: a metric's value and standard error from per-item scores, and the difference of two
 * results with its 95% confidence interval. How each is computed is in docs/evaluation.md; acc and
 * exact_match follow lm-evaluation-harness (mean, and `mean_stderr`: the sample standard deviation
 * over √n), perplexity transformers' pooled exp(total NLL / total predicted tokens).
 */
import type { EvaluationResult, ItemScore, Metric } from "./record.ts";

const Z95 = 1.959963984540054;

/** `scores`: per item, in dataset order. */
export function summarize(metric: Metric, scores: ItemScore[]): EvaluationResult {
  const n = scores.length;
  if (metric === "perplexity") {
    const tokens = scores.reduce((s, x) => s + (x.tokens ?? 0), 0);
    const nll = scores.reduce((s, x) => s + x.x, 0);
    const rate = tokens > 0 ? nll / tokens : Number.NaN;
    const value = Math.exp(rate);
    return { metric, value, n, stderr: perplexityStderr(scores, value, rate), tokens };
  }
  const xs = scores.map((s) => s.x);
  const merges = scores.reduce((s, x) => s + (x.merged ?? 0), 0);
  return {
    metric,
    value: mean(xs),
    n,
    stderr: n > 1 ? sampleStddev(xs) / Math.sqrt(n) : null,
    ...(metric === "accuracy" ? { boundary_merges: merges } : {}),
  };
}

/**
 * Delta method on the pooled (ratio) estimator r = ΣNLLᵢ / ΣTᵢ: each line's influence on r is
 * (NLLᵢ − r·Tᵢ) / T̄, and on exp(r) that times exp(r); the standard error is the sample standard
 * deviation of the influences over √n.
 */
function perplexityStderr(scores: ItemScore[], value: number, rate: number): number | null {
  const psi = perplexityInfluence(scores, value, rate);
  return psi && psi.length > 1 ? sampleStddev(psi) / Math.sqrt(psi.length) : null;
}

function perplexityInfluence(scores: ItemScore[], value: number, rate: number): number[] | undefined {
  const n = scores.length;
  const meanTokens = scores.reduce((s, x) => s + (x.tokens ?? 0), 0) / n;
  if (!(meanTokens > 0)) return undefined;
  return scores.map((s) => (value * (s.x - rate * (s.tokens ?? 0))) / meanTokens);
}

/** Per-item contributions whose mean difference is the difference of the two values (to first order). */
function contributions(metric: Metric, scores: ItemScore[]): number[] | undefined {
  if (metric !== "perplexity") return scores.map((s) => s.x);
  const tokens = scores.reduce((s, x) => s + (x.tokens ?? 0), 0);
  const rate = scores.reduce((s, x) => s + x.x, 0) / tokens;
  return perplexityInfluence(scores, Math.exp(rate), rate);
}

export type Comparison = {
  difference: number;
  stderr: number | null;
  ci95: [number, number] | null;
  /** paired: both scored the same dataset (same digest), item by item; else from the two standard errors. */
  method: "paired" | "unpaired";
};

/** b − a, and its 95% interval (normal approximation). */
export function compare(
  metric: Metric,
  a: { value: number; stderr: number | null; sha256: string; scores?: ItemScore[] },
  b: { value: number; stderr: number | null; sha256: string; scores?: ItemScore[] },
): Comparison {
  const difference = b.value - a.value;
  const ca = a.scores && contributions(metric, a.scores);
  const cb = b.scores && contributions(metric, b.scores);
  if (a.sha256 === b.sha256 && ca && cb && ca.length === cb.length && ca.length > 1) {
    const d = cb.map((x, i) => x - (ca[i] as number));
    const stderr = sampleStddev(d) / Math.sqrt(d.length);
    return { difference, stderr, ci95: [difference - Z95 * stderr, difference + Z95 * stderr], method: "paired" };
  }
  if (a.stderr === null || b.stderr === null) return { difference, stderr: null, ci95: null, method: "unpaired" };
  const stderr = Math.sqrt(a.stderr ** 2 + b.stderr ** 2);
  return { difference, stderr, ci95: [difference - Z95 * stderr, difference + Z95 * stderr], method: "unpaired" };
}

function mean(xs: number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((s, x) => s + x, 0) / xs.length;
}

/** With n − 1, as lm-eval's sample_stddev. */
function sampleStddev(xs: number[]): number {
  const mu = mean(xs);
  return Math.sqrt(xs.reduce((s, x) => s + (x - mu) ** 2, 0) / (xs.length - 1));
}
