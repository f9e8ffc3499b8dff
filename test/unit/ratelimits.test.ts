/** The pure parts of rate limits: limit changes, the CLI's limit flags, reset durations, reservations. */
import { describe, expect, it } from "vitest";
import { Command, CommanderError } from "commander";
import { limitsFromFlags, modelLimit, registerKeys } from "../../src/cli/keys.ts";
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
    const gather = (update: boolean, specs: string[]) => specs.reduce((all, spec) => modelLimit(update)(spec, all), {});
    expect(
      limitsFromFlags({
        rpm: 60,
        maxConcurrency: 2,
        modelLimit: gather(false, ["tiny:rpm=5,tpm=100", "big:max-concurrency=1"]),
      }),
    ).toEqual({
      rpm: 60,
      max_concurrency: 2,
      models: { tiny: { rpm: 5, tpm: 100 }, big: { max_concurrency: 1 } },
    });
    expect(limitsFromFlags({ tpm: "none", modelLimit: gather(true, ["tiny:none", "big:rpm=none"]) })).toEqual({
      tpm: null,
      models: { tiny: null, big: { rpm: null } },
    });
    expect(limitsFromFlags({ modelLimit: {} })).toBeUndefined();
  });

  it("parses the flags as commander hands them over, none included", async () => {
    const program = new Command().exitOverride();
    registerKeys(program);
    let parsed: Parameters<typeof limitsFromFlags>[0] | undefined;
    program.commands[0]?.commands.find((c) => c.name() === "update")?.action((_id, opts) => (parsed = opts));
    const args = ["--tpm", "none", "--rpm", "7", "--model-limit", "tiny:none", "--model-limit", "big:tpm=5"];
    await program.parseAsync(["keys", "update", "key_0123456789ab", ...args], { from: "user" });
    expect(limitsFromFlags(parsed as NonNullable<typeof parsed>)).toEqual({
      rpm: 7,
      tpm: null,
      models: { tiny: null, big: { tpm: 5 } },
    });
  });

  it("names the flag and the value of bad input, before the command runs", async () => {
    const bad = async (args: string[]) => {
      let written = "";
      const program = new Command()
        .exitOverride()
        .configureOutput({ writeErr: (text) => (written += text), writeOut: () => undefined });
      registerKeys(program);
      const error = await program.parseAsync(["keys", ...args], { from: "user" }).then(
        () => undefined,
        (e: unknown) => e,
      );
      // main.ts exits 2 on a CommanderError.
      expect(error).toBeInstanceOf(CommanderError);
      return written;
    };
    expect(await bad(["create", "x", "--rpm", "1e3"])).toBe(
      "error: option '--rpm <n>' argument '1e3' is invalid. expected a whole number from 1 to 1000000000\n",
    );
    expect(await bad(["create", "x", "--tpm", "none"])).toMatch(/option '--tpm <n>' argument 'none' is invalid/);
    expect(await bad(["update", "key_0123456789ab", "--tpm", "0"])).toMatch(
      /option '--tpm <n\|none>' argument '0' is invalid\. expected a whole number from 1 to 1000000000 or none/,
    );
    expect(await bad(["create", "x", "--model-limit", "tiny"])).toMatch(
      /option '--model-limit <spec>' argument 'tiny' is invalid\. expected <model>:rpm=N/,
    );
    expect(await bad(["create", "x", "--model-limit", "bad name:rpm=1"])).toMatch(/'--model-limit <spec>'/);
    expect(await bad(["create", "x", "--model-limit", "tiny:none"])).toMatch(/none removes limits/);
    expect(await bad(["update", "key_0123456789ab", "--model-limit", "tiny:rpm=0"])).toMatch(
      /argument 'tiny:rpm=0' is invalid\. rpm: expected a whole number from 1 to 1000000000 or none/,
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

describe("a key's default priority", () => {
  it("is kept, changed and removed like a limit, is shown, and alone costs no rate-limit round trip", () => {
    const set = applyLimitsChange(undefined, { priority: -2 });
    expect(set).toEqual({ priority: -2 });
    expect(hasLimits(set)).toBe(false);
    expect(describeLimits(set)).toBe("priority -2");
    const both = applyLimitsChange(set, { rpm: 10 });
    expect(both).toEqual({ rpm: 10, priority: -2 });
    expect(describeLimits(both)).toBe("rpm 10; priority -2");
    expect(applyLimitsChange(both, { priority: null })).toEqual({ rpm: 10 });
    expect(applyLimitsChange(set, { priority: null })).toBeUndefined();
  });
});
