/**
 * Usage records as clients ask for them (`GET /v1/usage`, `platform usage`): the query's
 * fields, their forms and bounds, and the rows that come back. Kept apart from the Redis side
 * (src/usage/counters.ts) so the CLI can check a command line without loading it.
 */
import { z } from "zod";
import { ModelName, ModelVersion } from "../contracts/deployment.ts";

/** Minute buckets are kept this long: queries up to it are exact to the minute. */
export const MINUTE_RETENTION_MS = 48 * 3_600_000;
/** Hour buckets are kept this long: the furthest a query reaches back. */
export const HOUR_RETENTION_MS = 90 * 86_400_000;

/**
 * `images` and `steps`: images generated and their denoising steps (docs/images.md);
 * `cached_tokens`: the prompt tokens a replica's KV cache already held (part of `prompt_tokens`).
 */
export const USAGE_METRICS = [
  "requests",
  "prompt_tokens",
  "cached_tokens",
  "completion_tokens",
  "errors",
  "rate_limited",
  "images",
  "steps",
] as const;
export type UsageMetric = (typeof USAGE_METRICS)[number];
export type UsageCounts = Record<UsageMetric, number>;

export const USAGE_DIMENSIONS = ["key", "model", "version"] as const;
export type UsageDimension = (typeof USAGE_DIMENSIONS)[number];

const SINCE_UNITS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
export const SINCE_ERROR = `expected <n>m, <n>h or <n>d (e.g. 1h, 24h, 7d), at most ${HOUR_RETENTION_MS / 86_400_000}d`;

/** `"24h"` → 86400000; undefined when it is not such a span or reaches past the hour buckets' retention. */
export function parseSince(text: string): number | undefined {
  const m = /^(\d{1,6})(m|h|d)$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * SINCE_UNITS[m[2] as keyof typeof SINCE_UNITS];
  return ms > 0 && ms <= HOUR_RETENTION_MS ? ms : undefined;
}

/** Whose usage: an API key's id, or a signed-in user's (tokens count as their subject). */
export const USAGE_KEY_PATTERN = /^(key|usr)_[0-9a-f]{12}$/;
export const USAGE_KEY_ERROR = 'expected a key id such as "key_0123456789ab" (or a user\'s, "usr_…")';

export const DIMENSIONS_ERROR = `expected one or more of ${USAGE_DIMENSIONS.join(", ")}, comma-separated`;

/** `"key,model"` → ["key", "model"]; undefined when a name is not a dimension. */
export function parseDimensions(text: string): UsageDimension[] | undefined {
  const parts = text
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean);
  if (parts.length === 0 || parts.some((p) => !(USAGE_DIMENSIONS as readonly string[]).includes(p))) return undefined;
  return USAGE_DIMENSIONS.filter((d) => parts.includes(d));
}

/** The query string of `GET /v1/usage`. */
export const UsageQuery = z
  .object({
    since: z
      .string()
      .default("24h")
      .transform((text, ctx) => {
        const ms = parseSince(text);
        if (ms === undefined) {
          ctx.addIssue({ code: "custom", message: SINCE_ERROR });
          return z.NEVER;
        }
        return { text, ms };
      }),
    key: z.string().regex(USAGE_KEY_PATTERN, USAGE_KEY_ERROR).optional(),
    model: ModelName.optional(),
    version: ModelVersion.optional(),
    by: z
      .string()
      .default(USAGE_DIMENSIONS.join(","))
      .transform((text, ctx) => {
        const dims = parseDimensions(text);
        if (!dims) {
          ctx.addIssue({ code: "custom", message: DIMENSIONS_ERROR });
          return z.NEVER;
        }
        return dims;
      }),
    /** Rows per bucket as well as per group; minutes only within the minute buckets' retention. */
    interval: z.enum(["minute", "hour"]).optional(),
  })
  .strict()
  .superRefine((q, ctx) => {
    if (q.interval === "minute" && q.since.ms > MINUTE_RETENTION_MS) {
      ctx.addIssue({
        code: "custom",
        path: ["interval"],
        message: `minute rows reach back ${MINUTE_RETENTION_MS / 3_600_000}h at most; use interval=hour or a shorter since`,
      });
    }
  });
export type UsageQuery = z.infer<typeof UsageQuery>;

/** One row: the group's dimensions (those asked for), the bucket's start with an interval, and the counts. */
export type UsageRow = {
  key?: string;
  key_name?: string;
  model?: string;
  version?: string;
  start?: string;
} & UsageCounts & { total_tokens: number };

export type UsageReport = {
  object: "usage";
  since: string;
  /** The span counted: `from` is exact to the minute within the minute buckets' retention, else the start of its hour. */
  from: string;
  to: string;
  by: UsageDimension[];
  interval: "minute" | "hour" | null;
  data: UsageRow[];
};
