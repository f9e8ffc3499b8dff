/** The pure parts of rate limits: limit changes, the CLI's limit flags, reset durations, reservations. */
import { describe, expect, it } from "vitest";
import { limitsFromFlags } from "../../src/cli/keys.ts";
import { CliError } from "../../src/cli/errors.ts";
import { applyLimitsChange, describeLimits, hasLimits } from "../../src/ratelimit/limits.ts";
import { parseDimensions, parseSince } from "../../src/usage/query.ts";
import { formatReset } from "../../src/ratelimit/headers.ts";
import { DEFAULT_COMPLETION_RESERVATION, estimateTokens, reservationOf } from "../../src/ratelimit/reservation.ts";

describe("limit changes", () => {
  it("sets, removes and keeps fields, merges models, and drops empty scopes", () => {
    const current = { rpm: 60, tpm: 1000, models: { a: { rpm: 5 }, b: { tpm: 10, max_concurrency: 1 } } };
    expect(
      applyLimitsChange(current, {
        rpm: null,
        max_concurrency: 3,
        models: { a: null, b: { tpm: null }, c: { rpm: 2 } },
      }),
    ).toEqual({
      tpm: 1000,
      max_concurrency: 3,
      models: { b: { max_concurrency: 1 }, c: { rpm: 2 } },
    });
    expect(applyLimitsChange(current, { rpm: null, tpm: null, models: { a: null, b: null } })).toBeUndefined();
    expect(applyLimitsChange(undefined, { models: { a: {} } })).toBeUndefined();
    expect(applyLimitsChange(current, {})).toEqual(current);
  });

  it("describes limits on one line, and knows an unlimited key", () => {
    expect(describeLimits({ rpm: 60, models: { tiny: { tpm: 100, max_concurrency: 2 } } })).toBe(
      "rpm 60; tiny: tpm 100, concurrency 2",
    );
    expect(describeLimits(undefined)).toBe("-");
    expect(hasLimits({ models: {} })).toBe(false);
    expect(hasLimits({ models: { a: { rpm: 1 } } })).toBe(true);
  });
});

describe("the CLI's limit flags", () => {
  it("builds the API's limits, none only where removing makes sense", () => {
    expect(
      limitsFromFlags(
        { rpm: "60", maxConcurrency: "2", modelLimit: ["tiny:rpm=5,tpm=100", "big:max-concurrency=1"] },
        false,
      ),
    ).toEqual({
      rpm: 60,
      max_concurrency: 2,
      models: { tiny: { rpm: 5, tpm: 100 }, big: { max_concurrency: 1 } },
    });
    expect(limitsFromFlags({ tpm: "none", modelLimit: ["tiny:none", "big:rpm=none"] }, true)).toEqual({
      tpm: null,
      models: { tiny: null, big: { rpm: null } },
    });
    expect(limitsFromFlags({ modelLimit: [] }, true)).toBeUndefined();
  });

  it("names the flag of bad input (exit 2)", () => {
    const bad = (flags: Parameters<typeof limitsFromFlags>[0], update = false) => {
      try {
        limitsFromFlags(flags, update);
      } catch (e) {
        expect(e).toBeInstanceOf(CliError);
        return [(e as CliError).exitCode, (e as CliError).message];
      }
      throw new Error("accepted");
    };
    expect(bad({ rpm: "1e3", modelLimit: [] })).toEqual([
      2,
      '--rpm: expected a whole number from 1 to 1000000000, got "1e3"',
    ]);
    expect(bad({ tpm: "none", modelLimit: [] })[1]).toMatch(/^--tpm/);
    expect(bad({ modelLimit: ["tiny"] })[1]).toMatch(/^--model-limit "tiny"/);
    expect(bad({ modelLimit: ["bad name:rpm=1"] })[1]).toMatch(/^--model-limit/);
    expect(bad({ modelLimit: ["tiny:rpm=0"] }, true)[1]).toMatch(
      /^--model-limit "tiny:rpm=0": expected a whole number/,
    );
  });
});

describe("usage query forms", () => {
  it("parses spans and groupings, within the retention", () => {
    expect(parseSince("1h")).toBe(3_600_000);
    expect(parseSince("90d")).toBe(90 * 86_400_000);
    for (const bad of ["91d", "0h", "1w", "h", "-1h", "1.5h"]) expect(parseSince(bad), bad).toBeUndefined();
    expect(parseDimensions("version,key")).toEqual(["key", "version"]);
    expect(parseDimensions("key,region")).toBeUndefined();
  });
});

describe("reservations and headers", () => {
  it("writes reset durations as OpenAI does", () => {
    expect([0, 250, 1000, 12_500, 59_999, 60_000].map(formatReset)).toEqual([
      "0ms",
      "250ms",
      "1s",
      "12.5s",
      "59.999s",
      "1m0s",
    ]);
  });

  it("reserves the prompt's estimate and max_tokens", () => {
    expect(estimateTokens(["Once upon a time"])).toBe(4);
    const base = { request_id: "r", model: "m", version: "v1" };
    expect(
      reservationOf({ ...base, kind: "completion", prompt: "Once upon a time", params: { max_tokens: 30 } }),
    ).toEqual({ promptTokens: 4, maxTokens: 30 });
    // Token ids are counted exactly.
    expect(
      reservationOf({ ...base, kind: "completion", prompt: [1, 403, 407, 261, 378], params: { max_tokens: 30 } }),
    ).toEqual({ promptTokens: 5, maxTokens: 30 });
    expect(
      reservationOf({
        ...base,
        kind: "chat",
        messages: [
          { role: "user", content: "abcd" },
          { role: "assistant", content: "efgh" },
        ],
        params: {},
      }),
    ).toEqual({ promptTokens: 2, maxTokens: undefined });
    expect(reservationOf({ ...base, kind: "embedding", input: ["abcdefgh"] })).toEqual({
      promptTokens: 2,
      maxTokens: 0,
    });
    expect(DEFAULT_COMPLETION_RESERVATION).toBeGreaterThan(0);
  });
});
