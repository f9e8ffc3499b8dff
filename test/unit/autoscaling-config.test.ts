import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import {
  AUTOSCALING_DEFAULTS,
  AutoscalingSettings,
  autoscalingDocument,
  describeAutoscaling,
  formatDuration,
  parseAutoscalingConfig,
  parseAutoscalingFor,
  parseDuration,
} from "../../src/autoscaling/config.ts";

const SEED = `
endpoint: llama-7b
autoscaling:
  enabled: true
  min_replicas: 0
  max_replicas: 3
  target_queue_depth: 6
  scale_up_cooldown: 30s
  scale_down_cooldown: 60s
  scale_down_delay: 120s
`;

function errorOf(input: unknown): string {
  const result = parseAutoscalingConfig(input);
  if (result.ok) throw new Error(`expected a validation error, got ${JSON.stringify(result.value)}`);
  return result.error;
}

describe("autoscaling configuration", () => {
  it("parses the documented file, durations in milliseconds", () => {
    expect(parseAutoscalingConfig(parseYaml(SEED))).toEqual({
      ok: true,
      value: {
        endpoint: "llama-7b",
        autoscaling: {
          enabled: true,
          min_replicas: 0,
          max_replicas: 3,
          target_queue_depth: 6,
          scale_up_cooldown_ms: 30_000,
          scale_down_cooldown_ms: 60_000,
          scale_down_delay_ms: 120_000,
        },
      },
    });
  });

  it("fills every omitted field with the documented default", () => {
    expect(parseAutoscalingConfig({ endpoint: "m", autoscaling: {} })).toEqual({
      ok: true,
      value: { endpoint: "m", autoscaling: { ...AUTOSCALING_DEFAULTS } },
    });
    expect(AUTOSCALING_DEFAULTS).toEqual({
      enabled: true,
      min_replicas: 1,
      max_replicas: 4,
      target_queue_depth: 4,
      scale_up_cooldown_ms: 30_000,
      scale_down_cooldown_ms: 60_000,
      scale_down_delay_ms: 300_000,
    });
  });

  it("lets the CLI argument name the endpoint", () => {
    const result = parseAutoscalingConfig({ autoscaling: { enabled: false } });
    expect(result.ok && result.value.endpoint).toBeUndefined();
    expect(result.ok && result.value.autoscaling.enabled).toBe(false);
  });

  it("checks a file for the endpoint it is applied to, as the CLI and the admin route both do", () => {
    const named = "the endpoint on the command line";
    expect(parseAutoscalingFor({ endpoint: "m", autoscaling: { max_replicas: 2 } }, "m", named)).toEqual({
      ok: true,
      value: { ...AUTOSCALING_DEFAULTS, max_replicas: 2 },
    });
    expect(parseAutoscalingFor({ endpoint: "other", autoscaling: {} }, "m", named)).toEqual({
      ok: false,
      error: 'endpoint: "other" does not match the endpoint on the command line, "m"',
    });
    expect(parseAutoscalingFor({ autoscaling: { min_replicas: -1 } }, "m", named)).toEqual({
      ok: false,
      error: "autoscaling.min_replicas: expected a whole number from 0 to 64",
    });
  });

  it("accepts ms, s and m durations", () => {
    expect(parseDuration("250ms")).toBe(250);
    expect(parseDuration("30s")).toBe(30_000);
    expect(parseDuration("1.5s")).toBe(1_500);
    expect(parseDuration("5m")).toBe(300_000);
    expect(parseDuration("0s")).toBe(0);
    for (const bad of ["30", "30 s", "-5s", "5h", "s", "1e3s", ""]) expect(parseDuration(bad)).toBeUndefined();
  });

  it("round-trips through the document form", () => {
    const settings = AutoscalingSettings.parse({
      scale_up_cooldown: "1500ms",
      scale_down_cooldown: "90s",
      scale_down_delay: "10m",
    });
    const doc = autoscalingDocument(settings);
    expect(doc).toMatchObject({ scale_up_cooldown: "1500ms", scale_down_cooldown: "90s", scale_down_delay: "10m" });
    expect(AutoscalingSettings.parse(JSON.parse(JSON.stringify(doc)))).toEqual(settings);
    expect([0, 999, 1_000, 60_000, 61_000, 120_000].map(formatDuration)).toEqual([
      "0s",
      "999ms",
      "1s",
      "1m",
      "61s",
      "2m",
    ]);
  });

  it("describes itself on one line", () => {
    expect(describeAutoscaling(AutoscalingSettings.parse({ min_replicas: 0 }))).toBe(
      "on, 0-4 replicas, target 4/replica, up 30s, down 1m, delay 5m",
    );
  });
});

describe("autoscaling configuration errors name the field", () => {
  const doc = (autoscaling: Record<string, unknown>) => ({ endpoint: "m", autoscaling });

  it("rejects min_replicas above max_replicas", () => {
    expect(errorOf(doc({ min_replicas: 3, max_replicas: 2 }))).toBe(
      "autoscaling.min_replicas: min_replicas must be <= max_replicas (3 > 2)",
    );
    // Against the default max as well.
    expect(errorOf(doc({ min_replicas: 5 }))).toBe(
      "autoscaling.min_replicas: min_replicas must be <= max_replicas (5 > 4)",
    );
  });

  it("rejects a duration without a unit or with an unknown one", () => {
    for (const field of ["scale_up_cooldown", "scale_down_cooldown", "scale_down_delay"]) {
      expect(errorOf(doc({ [field]: 30 }))).toBe(`autoscaling.${field}: expected "<n>s" (also <n>ms, <n>m)`);
      expect(errorOf(doc({ [field]: "2h" }))).toBe(`autoscaling.${field}: expected "<n>s" (also <n>ms, <n>m)`);
    }
  });

  it("rejects bad counts and flags", () => {
    expect(errorOf(doc({ min_replicas: -1 }))).toBe("autoscaling.min_replicas: expected a whole number from 0 to 64");
    expect(errorOf(doc({ max_replicas: 0 }))).toBe("autoscaling.max_replicas: expected a whole number from 1 to 64");
    expect(errorOf(doc({ max_replicas: 65 }))).toBe("autoscaling.max_replicas: expected a whole number from 1 to 64");
    expect(errorOf(doc({ max_replicas: 2.5 }))).toBe("autoscaling.max_replicas: expected a whole number from 1 to 64");
    expect(errorOf(doc({ target_queue_depth: 0 }))).toBe(
      "autoscaling.target_queue_depth: expected a whole number >= 1",
    );
    expect(errorOf(doc({ target_queue_depth: "4" }))).toBe(
      "autoscaling.target_queue_depth: expected a whole number >= 1",
    );
    expect(errorOf(doc({ enabled: "yes" }))).toBe("autoscaling.enabled: expected true or false");
  });

  it("reports every problem at once, the bounds check included", () => {
    expect(errorOf(doc({ min_replicas: 6, scale_up_cooldown: "30", typo_field: 1 }))).toBe(
      'autoscaling.scale_up_cooldown: expected "<n>s" (also <n>ms, <n>m); autoscaling: unknown field(s) "typo_field"; ' +
        "autoscaling.min_replicas: min_replicas must be <= max_replicas (6 > 4)",
    );
  });

  it("rejects a missing block, unknown top-level fields and a bad endpoint name", () => {
    expect(errorOf({ endpoint: "m" })).toBe(
      "autoscaling: expected a mapping (enabled, min_replicas, max_replicas, target_queue_depth, cooldowns, delay)",
    );
    expect(errorOf({ endpoint: "m", autoscaling: [] })).toMatch(/^autoscaling: expected a mapping/);
    expect(errorOf({ endpoint: "m", autoscaling: {}, replicas: 2 })).toBe('unknown field(s) "replicas"');
    expect(errorOf({ endpoint: "no spaces", autoscaling: {} })).toMatch(/^endpoint: expected letters, digits/);
  });
});
