/**
 * The auto-scaling configuration document (YAML, docs/autoscaling.md), applied with
 * `platform inference autoscale <model> --config <file>`:
 *
 * ```yaml
 * endpoint: <name>
 * autoscaling:
 *   enabled: true
 *   min_replicas: 0..64
 *   max_replicas: 1..64
 *   target_queue_depth: 4
 *   scale_up_cooldown: 30s
 *   scale_down_cooldown: 60s
 *   scale_down_delay: 5m
 * ```
 *
 * Durations are written `<n>s`, `<n>ms` or `<n>m` and parsed to milliseconds,
 * so the parsed settings carry `*_ms` fields and cannot be confused with the
 * document. docs/autoscaling.md explains the policy and each default.
 */
import { z } from "zod";
import { ModelName } from "../contracts/deployment.ts";
import { describeIssues } from "../contracts/issues.ts";
import { Duration, formatDuration } from "../contracts/duration.ts";

export { formatDuration, parseDuration } from "../contracts/duration.ts";

/** Same ceiling as `resources.replicas`: one endpoint, one bound. */
export const MAX_REPLICAS_LIMIT = 64;

/**
 * Defaults, modelled on the anchors and on what a replica costs here:
 * - `enabled: true`: writing the file means wanting it on; `false` pauses it.
 * - `min_replicas: 1`: scale to zero is opt-in because the first request after
 *   it waits for a model load (seconds to minutes); Ray Serve also keeps 1.
 * - `max_replicas: 4`: a small bound so a burst cannot fill a single machine.
 * - `target_queue_depth: 4`: equals the default `resources.parallel`, so
 *   replicas are added only once the work exceeds what the replicas already
 *   run at once (pending = waiting + active).
 * - `scale_up_cooldown: 30s`: Ray Serve's upscale delay.
 * - `scale_down_cooldown: 60s`: the documented example; paces removal one replica
 *   a minute once the delay has passed.
 * - `scale_down_delay: 5m`: KEDA's cooldown period; between Knative's 0 s (cheap
 *   pods) and Ray Serve's 600 s, because reloading a model costs far more than
 *   keeping an idle replica a few more minutes.
 */
export const AUTOSCALING_DEFAULTS = {
  enabled: true,
  min_replicas: 1,
  max_replicas: 4,
  target_queue_depth: 4,
  scale_up_cooldown_ms: 30_000,
  scale_down_cooldown_ms: 60_000,
  scale_down_delay_ms: 300_000,
} as const;

function wholeNumber(min: number, max?: number) {
  const message =
    max === undefined ? `expected a whole number >= ${min}` : `expected a whole number from ${min} to ${max}`;
  const base = z.number({ error: message }).int({ error: message }).min(min, { error: message });
  return max === undefined ? base : base.max(max, { error: message });
}

const d = AUTOSCALING_DEFAULTS;

/** The `autoscaling:` block; also accepted inside a deployment file. */
export const AutoscalingSettings = z
  .object(
    {
      enabled: z.boolean({ error: "expected true or false" }).default(d.enabled),
      min_replicas: wholeNumber(0, MAX_REPLICAS_LIMIT).default(d.min_replicas),
      max_replicas: wholeNumber(1, MAX_REPLICAS_LIMIT).default(d.max_replicas),
      target_queue_depth: wholeNumber(1).default(d.target_queue_depth),
      scale_up_cooldown: Duration.default(d.scale_up_cooldown_ms),
      scale_down_cooldown: Duration.default(d.scale_down_cooldown_ms),
      scale_down_delay: Duration.default(d.scale_down_delay_ms),
    },
    { error: "expected a mapping (enabled, min_replicas, max_replicas, target_queue_depth, cooldowns, delay)" },
  )
  .strict()
  .refine((s) => s.min_replicas <= s.max_replicas, {
    path: ["min_replicas"],
    error: (issue) => {
      const s = issue.input as { min_replicas: number; max_replicas: number };
      return `min_replicas must be <= max_replicas (${s.min_replicas} > ${s.max_replicas})`;
    },
    // Report it alongside other fields' errors, as long as both bounds themselves are valid.
    when: (payload) =>
      payload.issues.every((issue) =>
        issue.path?.length
          ? issue.path[0] !== "min_replicas" && issue.path[0] !== "max_replicas"
          : issue.code === "unrecognized_keys",
      ),
  })
  .transform((s) => ({
    enabled: s.enabled,
    min_replicas: s.min_replicas,
    max_replicas: s.max_replicas,
    target_queue_depth: s.target_queue_depth,
    scale_up_cooldown_ms: s.scale_up_cooldown,
    scale_down_cooldown_ms: s.scale_down_cooldown,
    scale_down_delay_ms: s.scale_down_delay,
  }));
/** Parsed settings, durations in milliseconds: what the policy reads. */
export type AutoscalingSettings = z.output<typeof AutoscalingSettings>;
/** The block as written in YAML. */
export type AutoscalingSettingsInput = z.input<typeof AutoscalingSettings>;

/** The whole file. `endpoint` may be left out when the CLI argument names it. */
export const AutoscalingConfig = z
  .object({
    endpoint: ModelName.optional(),
    autoscaling: AutoscalingSettings,
  })
  .strict();
export type AutoscalingConfig = z.output<typeof AutoscalingConfig>;

export type ParseResult<T> = { ok: true; value: T } | { ok: false; error: string };

/** Validates a parsed YAML/JSON document; errors are one line per field. */
export function parseAutoscalingConfig(input: unknown): ParseResult<AutoscalingConfig> {
  const result = AutoscalingConfig.safeParse(input);
  return result.success ? { ok: true, value: result.data } : { ok: false, error: describeIssues(result.error) };
}

/**
 * The file (or a deployment's `autoscaling:` block) for the endpoint `name`, as the CLI checks it
 * before sending and the admin route before storing: the settings, or one line per wrong field.
 * `named`: how the caller names that endpoint when the file's `endpoint:` is another.
 */
export function parseAutoscalingFor(input: unknown, name: string, named: string): ParseResult<AutoscalingSettings> {
  const parsed = parseAutoscalingConfig(input);
  if (!parsed.ok) return parsed;
  const { endpoint, autoscaling } = parsed.value;
  if (endpoint !== undefined && endpoint !== name)
    return { ok: false, error: `endpoint: "${endpoint}" does not match ${named}, "${name}"` };
  return { ok: true, value: autoscaling };
}

/** Back to the document form, for `--json` output and status a user can paste into a file. */
export function autoscalingDocument(s: AutoscalingSettings): z.input<typeof AutoscalingSettings> {
  return {
    enabled: s.enabled,
    min_replicas: s.min_replicas,
    max_replicas: s.max_replicas,
    target_queue_depth: s.target_queue_depth,
    scale_up_cooldown: formatDuration(s.scale_up_cooldown_ms),
    scale_down_cooldown: formatDuration(s.scale_down_cooldown_ms),
    scale_down_delay: formatDuration(s.scale_down_delay_ms),
  };
}

/** One line for listings: "on, 0-4 replicas, target 4/replica, up 30s, down 1m, delay 5m". */
export function describeAutoscaling(s: AutoscalingSettings): string {
  return [
    s.enabled ? "on" : "off",
    `${s.min_replicas}-${s.max_replicas} replicas`,
    `target ${s.target_queue_depth}/replica`,
    `up ${formatDuration(s.scale_up_cooldown_ms)}`,
    `down ${formatDuration(s.scale_down_cooldown_ms)}`,
    `delay ${formatDuration(s.scale_down_delay_ms)}`,
  ].join(", ");
}
