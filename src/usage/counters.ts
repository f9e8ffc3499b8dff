/**
 * Usage counters in Redis: requests, prompt and completion tokens, errors and rate-limit
 * refusals per API key, model and version, in minute buckets (kept 48 h) and hour buckets
 * (kept 90 days). A request's counters are one pipeline of HINCRBYs into its minute's and its
 * hour's hash; a query reads the buckets its span covers, at most 59 minute hashes plus one
 * hash per hour. docs/traffic.md ("Usage") documents the layout and retention.
 */
import type { ChainableCommander } from "ioredis";
import {
  HOUR_RETENTION_MS,
  MINUTE_RETENTION_MS,
  USAGE_METRICS,
  type UsageCounts,
  type UsageDimension,
  type UsageMetric,
} from "./query.ts";
import type { Control } from "../redis/connection.ts";

const MINUTE = 60_000;
const HOUR = 3_600_000;

/** Resolution letter, bucket size, how long a bucket is kept past its start. */
const BUCKETS: ["m" | "h", number, number][] = [
  ["m", MINUTE, MINUTE + MINUTE_RETENTION_MS],
  ["h", HOUR, HOUR + HOUR_RETENTION_MS],
];

/** Field names carry one letter per metric: the hashes hold a field per key, model, version and metric. */
const LETTER: Record<UsageMetric, string> = {
  requests: "r",
  prompt_tokens: "p",
  cached_tokens: "k",
  completion_tokens: "c",
  errors: "e",
  rate_limited: "l",
  images: "i",
  steps: "s",
};
const METRIC_OF = Object.fromEntries(Object.entries(LETTER).map(([m, l]) => [l, m])) as Record<string, UsageMetric>;

export type UsageLabels = { key: string; model: string; version: string };
export type UsageDelta = UsageLabels & Partial<UsageCounts>;

/** Adds a request's counts to its minute and hour (by `at`, the gateway's clock). Zero counts cost nothing. */
export async function recordUsage(ctl: Control, delta: UsageDelta, at = Date.now()): Promise<void> {
  const pipeline = ctl.redis.pipeline();
  addUsage(pipeline, ctl, delta, at);
  const results = await pipeline.exec();
  const failed = results?.find(([err]) => err);
  if (failed) throw failed[0];
}

/**
 * recordUsage's commands, appended to a pipeline that carries other writes too (the gateway
 * sends the usage of the requests that ended together with their rate-limit settlements,
 * src/ratelimit/settlements.ts). All in the `{usage}` slot.
 */
export function addUsage(pipeline: ChainableCommander, ctl: Control, delta: UsageDelta, at = Date.now()): void {
  const base = `${delta.key}\t${delta.model}\t${delta.version}\t`;
  for (const [resolution, size, keep] of BUCKETS) {
    const start = Math.floor(at / size) * size;
    const key = ctl.keys.usage(`${resolution}:${start / 1000}`);
    for (const metric of USAGE_METRICS) {
      const n = delta[metric];
      if (n) pipeline.hincrby(key, base + LETTER[metric], n);
    }
    // Idempotent: every write names the same moment, so the bucket goes once its retention is over.
    pipeline.pexpireat(key, start + keep);
  }
}

/**
 * Usage summed per minute and labels in the gateway's memory, written in one pipeline every
 * USAGE_FLUSH_MS (src/ratelimit/settlements.ts): under load a second's requests of
 * one key, model and version cost one set of HINCRBYs instead of one each.
 */
export class UsageTally {
  private readonly sums = new Map<string, { minute: number; delta: UsageDelta }>();

  get size(): number {
    return this.sums.size;
  }

  add(delta: UsageDelta, at: number): void {
    const minute = Math.floor(at / MINUTE) * MINUTE;
    const id = `${minute}\t${delta.key}\t${delta.model}\t${delta.version}`;
    const sum = this.sums.get(id);
    if (!sum) {
      this.sums.set(id, { minute, delta: { ...delta } });
      return;
    }
    for (const metric of USAGE_METRICS) {
      const n = delta[metric];
      if (n) sum.delta[metric] = (sum.delta[metric] ?? 0) + n;
    }
  }

  /** Appends every sum to the pipeline, each in its own minute and hour, and forgets them. */
  drainInto(pipeline: ChainableCommander, ctl: Control): void {
    for (const { minute, delta } of this.sums.values()) addUsage(pipeline, ctl, delta, minute);
    this.sums.clear();
  }
}

export type UsageQueryOptions = {
  sinceMs: number;
  key?: string;
  /** Only these keys' (and users') rows: an organization's, for its admin. */
  keys?: ReadonlySet<string>;
  model?: string;
  version?: string;
  by: UsageDimension[];
  interval?: "minute" | "hour";
  now?: number;
};

export type UsageTotals = { key?: string; model?: string; version?: string; start?: number } & UsageCounts;

/**
 * The counts of [now - since, now], grouped by `by` (and by bucket with an interval). Within the
 * minute buckets' retention the span starts at its exact minute: the part of it before the first
 * whole hour is read from minute buckets, the rest from hour buckets, which are always current.
 * Further back, minute buckets are gone and the span starts at the hour.
 */
export async function queryUsage(
  ctl: Control,
  q: UsageQueryOptions,
): Promise<{ from: number; to: number; rows: UsageTotals[] }> {
  const now = q.now ?? Date.now();
  const exact = q.sinceMs <= MINUTE_RETENTION_MS;
  const from = exact ? Math.floor((now - q.sinceMs) / MINUTE) * MINUTE : Math.floor((now - q.sinceMs) / HOUR) * HOUR;
  const lastMinute = Math.floor(now / MINUTE) * MINUTE;
  const lastHour = Math.floor(now / HOUR) * HOUR;
  const firstWholeHour = Math.ceil(from / HOUR) * HOUR;

  const reads: { key: string; start: number }[] = [];
  if (q.interval === "minute" || firstWholeHour > lastHour) {
    for (let m = from; m <= lastMinute; m += MINUTE) reads.push({ key: ctl.keys.usage(`m:${m / 1000}`), start: m });
  } else {
    for (let m = from; m < firstWholeHour; m += MINUTE) reads.push({ key: ctl.keys.usage(`m:${m / 1000}`), start: m });
    for (let h = firstWholeHour; h <= lastHour; h += HOUR)
      reads.push({ key: ctl.keys.usage(`h:${h / 1000}`), start: h });
  }

  const pipeline = ctl.redis.pipeline();
  for (const r of reads) pipeline.hgetall(r.key);
  const results = (await pipeline.exec()) ?? [];

  const groups = new Map<string, UsageTotals>();
  results.forEach(([err, value], i) => {
    if (err) throw err;
    const start = (reads[i] as { start: number }).start;
    const bucket =
      q.interval === "minute" ? start : q.interval === "hour" ? Math.floor(start / HOUR) * HOUR : undefined;
    for (const [field, count] of Object.entries(value as Record<string, string>)) {
      const [key, model, version, letter] = field.split("\t");
      const metric = METRIC_OF[letter ?? ""];
      if (!metric || key === undefined || model === undefined || version === undefined) continue;
      if (
        (q.key !== undefined && key !== q.key) ||
        (q.keys !== undefined && !q.keys.has(key)) ||
        (q.model !== undefined && model !== q.model) ||
        (q.version !== undefined && version !== q.version)
      )
        continue;
      const labels = { key, model, version };
      const id = [...q.by.map((d) => labels[d]), bucket ?? ""].join("\t");
      let row = groups.get(id);
      if (!row) {
        row = {
          ...Object.fromEntries(q.by.map((d) => [d, labels[d]])),
          ...(bucket === undefined ? {} : { start: bucket }),
          ...zero(),
        };
        groups.set(id, row);
      }
      row[metric] += Number(count);
    }
  });
  const rows = [...groups.values()].sort(
    (a, b) =>
      (a.start ?? 0) - (b.start ?? 0) ||
      (a.key ?? "").localeCompare(b.key ?? "") ||
      (a.model ?? "").localeCompare(b.model ?? "") ||
      (a.version ?? "").localeCompare(b.version ?? ""),
  );
  return { from, to: now, rows };
}

function zero(): UsageCounts {
  return {
    requests: 0,
    prompt_tokens: 0,
    cached_tokens: 0,
    completion_tokens: 0,
    errors: 0,
    rate_limited: 0,
    images: 0,
    steps: 0,
  };
}
