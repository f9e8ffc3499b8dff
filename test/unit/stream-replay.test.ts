/**
 * A stream's replay after its replica died (src/gateway/serve-text.ts, Replay): the new attempt's
 * repeat of what was sent is swallowed, what follows goes on, and an answer that parts from it ends
 * the stream with replica_lost; the log says where they parted, never the text.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { Replay } from "../../src/gateway/serve-text.ts";
import { captureLogs } from "../helpers/logs.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

describe("Replay", () => {
  it("swallows the repeat, chunked differently, and passes on what comes after it", () => {
    const replay = new Replay("Once upon a time");
    expect(replay.next("Once up", false)).toBe("");
    expect(replay.done).toBe(false);
    expect(replay.next("on a time, there", false)).toBe(", there");
    expect(replay.done).toBe(true);
  });

  it("ends with replica_lost where the new attempt differs, logging the offset and not the text", () => {
    const logs = captureLogs();
    const replay = new Replay("Once upon a secret");
    expect(replay.next("Once upon ", false)).toBe("");
    expect(() => replay.next("a sunny day", false)).toThrow(expect.objectContaining({ code: "replica_lost" }));
    expect(logs.text()).toContain("differs at character 13 of the 18 sent (a 11-character chunk)");
    expect(logs.text()).not.toContain("secret");
    expect(logs.text()).not.toContain("sunny");
  });

  it("names a partial character on either side, and refuses a stream with logprobs without looking", () => {
    const logs = captureLogs();
    expect(() => new Replay("caf\uFFFD").next("café", false)).toThrow(
      expect.objectContaining({ code: "replica_lost" }),
    );
    expect(logs.text()).toContain("one side holds a partial character");
    expect(() => new Replay("same").next("same", true)).toThrow(expect.objectContaining({ code: "replica_lost" }));
  });
});
