/** Prefix-affine dispatch's pure parts: the prompt prefix a conversation is keyed by, CHWBL's choice and bound, lane names. */
import { describe, expect, it } from "vitest";
import { chooseReplica, laneName, prefixOf, sharedOf } from "../../src/queue/lanes.ts";

const replicas = (loads: number[]) =>
  loads.map((load, i) => ({ id: `r${i}`, lane: laneName("{m@v1}", `r${i}`), load, parallel: 4 }));

describe("prefix-affine dispatch's choice (src/queue/lanes.ts)", () => {
  it("keys a conversation by what its turns share: messages up to the first user turn", () => {
    const first = [
      { role: "system", content: "You are kind." },
      { role: "user", content: "Hi" },
    ];
    const later = [...first, { role: "assistant", content: "Hello!" }, { role: "user", content: "More" }];
    expect(prefixOf({ kind: "chat", messages: first })).toBe(prefixOf({ kind: "chat", messages: later }));
    expect(prefixOf({ kind: "completion", prompt: "x".repeat(1000) })).toHaveLength(256);
    expect(prefixOf({ kind: "embedding" })).toBeUndefined();
    expect(prefixOf({ kind: "image", prompt: "a cat" })).toBeUndefined();
  });

  it("sends a prefix to the same replica while loads are even, elsewhere once that one is past 1.25 × the average", () => {
    const even = replicas([2, 2, 2]);
    const chosen = chooseReplica("the same system prompt", even);
    for (let i = 0; i < 5; i++) expect(chooseReplica("the same system prompt", even)?.id).toBe(chosen?.id);
    const spread = new Set(Array.from({ length: 40 }, (_, i) => chooseReplica(`conversation ${i}`, even)?.id));
    expect(spread.size).toBe(3);
    const loaded = replicas([2, 2, 2]).map((r) => (r.id === chosen?.id ? { ...r, load: 9 } : r));
    const next = chooseReplica("the same system prompt", loaded);
    expect(next).toBeDefined();
    expect(next?.id).not.toBe(chosen?.id);
    expect(chooseReplica("x", [])).toBeUndefined();
  });

  it("names a lane in its queue's hash slot and finds the queue back", () => {
    expect(laneName("{m@v1}", "m-1")).toBe("{m@v1}~lane~m-1");
    expect(sharedOf("{m@v1}~lane~m-1")).toBe("{m@v1}");
    expect(sharedOf("{m@v1}")).toBeUndefined();
  });
});
