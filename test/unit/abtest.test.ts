/** The A/B split's pure parts: parsing `v1=70,v2=30`, and how a variant is picked (weights, stickiness). */
import { describe, expect, it } from "vitest";
import { formatSplit, parseSplit, pickVariant, SplitError, variantName } from "../../src/abtests/record.ts";

describe("parseSplit", () => {
  it("reads versions and relative weights in order", () => {
    expect(parseSplit("v1=70, v2=30")).toEqual([
      { version: "v1", weight: 70 },
      { version: "v2", weight: 30 },
    ]);
    expect(formatSplit(parseSplit("a=1,b=0,c=2"))).toBe("a=1,b=0,c=2");
  });

  it.each([
    ["v1", /"v1" is not <version>=<weight>/],
    ["v1=-3", /"v1=-3" is not <version>=<weight>/],
    ["v1=0,v2=0", /at least one weight must be above 0/],
    ["v1=5,v1=5", /version v1 appears twice/],
    ["latest=100", /"latest" is not a version a split can pin/],
    ["v1=5000", /a weight is a whole number from 0 to 1000/],
    ["v/1=5", /a version is letters, digits/],
  ])("refuses %s", (text, message) => {
    expect(() => parseSplit(text)).toThrow(SplitError);
    expect(() => parseSplit(text)).toThrow(message);
  });

  it("names variant deployments within the name limit", () => {
    expect(variantName("chat", "v2")).toBe("chat--v2");
    expect(() => variantName("x".repeat(60), "v2")).toThrow(/over 63 characters/);
  });
});

describe("pickVariant", () => {
  const split = [
    { version: "v1", weight: 70 },
    { version: "v2", weight: 30 },
  ];
  const share = (pick: (i: number) => string, n = 20_000) =>
    Array.from({ length: n }, (_, i) => pick(i)).filter((v) => v === "v2").length / n;

  it("follows the weights, drawn or sticky", () => {
    expect(share(() => pickVariant(split, undefined).version)).toBeCloseTo(0.3, 1);
    expect(share((i) => pickVariant(split, `user-${i}`).version)).toBeCloseTo(0.3, 1);
  });

  it("gives a sticky value the same variant every time, and a zero weight nothing", () => {
    for (let i = 0; i < 200; i++) expect(pickVariant(split, `key_${i}`)).toBe(pickVariant(split, `key_${i}`));
    const off = [
      { version: "v1", weight: 0 },
      { version: "v2", weight: 1 },
    ];
    expect(new Set(Array.from({ length: 500 }, (_, i) => pickVariant(off, String(i)).version))).toEqual(
      new Set(["v2"]),
    );
  });

  it("moves sticky callers only toward a variant whose weight grew", () => {
    const before = Array.from({ length: 2000 }, (_, i) => pickVariant(split, `u${i}`).version);
    const after = Array.from(
      { length: 2000 },
      (_, i) =>
        pickVariant(
          [
            { version: "v1", weight: 50 },
            { version: "v2", weight: 50 },
          ],
          `u${i}`,
        ).version,
    );
    before.forEach((v, i) => {
      if (v === "v2") expect(after[i]).toBe("v2");
    });
  });
});
