/**
 * Order statistics for latency figures, shared by `platform inference benchmark` and the
 * benchmarks in bench/ so that both read their samples the same way.
 */

/**
 * The p-th percentile of an ascending list (nearest rank). Nearest rank, not interpolation: every
 * figure is a latency that was actually observed, and p50 ≤ p90 ≤ p99 holds for any sample.
 */
export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/** The middle value; of an even count, the mean of the two middle ones (two rounds: their mean, not the larger). */
export function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export type Summary = { count: number; mean: number; p50: number; p90: number; p99: number };

/** null for no samples: a level where every request failed has no latency, not a latency of 0. */
export function summarizeSamples(xs: number[]): Summary | null {
  if (xs.length === 0) return null;
  const sorted = [...xs].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return {
    count: sorted.length,
    mean,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
  };
}
