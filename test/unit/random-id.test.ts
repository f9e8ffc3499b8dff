// The gateway's pooled random ids (src/gateway/random-id.ts).
import { describe, expect, it } from "vitest";
import { randomHex } from "../../src/gateway/random-id.ts";

describe("randomHex", () => {
  it("gives ids of the asked length, all different, across refills of its pool", () => {
    // 12 bytes each: 1,000 ids draw about three pools' worth.
    const ids = Array.from({ length: 1000 }, () => randomHex(12));
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
    // A size that does not divide the pool: the id that would cross its end comes from a fresh one.
    const odd = Array.from({ length: 500 }, () => randomHex(13));
    for (const id of odd) expect(id).toMatch(/^[0-9a-f]{26}$/);
    expect(new Set(odd).size).toBe(odd.length);
  });
});
