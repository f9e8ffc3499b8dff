/**
 * A stream's replay after its replica died (src/gateway/stream-replay.ts): the new attempt's
 * repeat of what was sent is swallowed, what follows goes on, and an answer that parts from it ends
 * the stream with replica_lost; the log says where they parted, never the text. A reclaimer's
 * notice that comes late, after the new attempt's start and first tokens, changes nothing.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { Replay, StreamedText } from "../../src/gateway/stream-replay.ts";
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

describe("StreamedText", () => {
  const worker = (attempt: number) => ({ type: "started", replica: `r${attempt}`, attempt }) as const;
  const reclaimer = { type: "started", replica: "(requeued after replica r1 stopped)", attempt: 0 } as const;

  it("joins the new attempt to what was sent when the reclaimer's notice comes before it", () => {
    const text = new StreamedText();
    text.started(worker(1));
    expect(text.next("Once upon", false)).toBe("Once upon");
    text.started(reclaimer);
    text.started(worker(2));
    expect(text.next("Once", false)).toBe("");
    expect(text.next(" upon a time", false)).toBe(" a time");
    expect(() => text.ended()).not.toThrow();
  });

  it("ignores the reclaimer's notice that comes after the new attempt's start and first tokens", () => {
    // The CI failure: the notice reset the replay, and the new attempt's text from " a time" on
    // was compared with the sent text from its start ("differs at character 0").
    const text = new StreamedText();
    text.started(worker(1));
    expect(text.next("Once upon", false)).toBe("Once upon");
    text.started(worker(2));
    expect(text.next("Once up", false)).toBe("");
    text.started(reclaimer);
    expect(text.next("on a time", false)).toBe(" a time");
    expect(text.next(", there", false)).toBe(", there");
  });

  it("ends with replica_lost where the new attempt ends short of what was sent", () => {
    const text = new StreamedText();
    text.started(worker(1));
    text.next("Once upon", false);
    text.started(worker(2));
    expect(text.next("Once", false)).toBe("");
    expect(() => text.ended()).toThrow(expect.objectContaining({ code: "replica_lost" }));
  });

  it("starts no replay for a first attempt that sent nothing before its replica died", () => {
    const text = new StreamedText();
    text.started(worker(1));
    text.started(reclaimer);
    text.started(worker(2));
    expect(text.next("Once", false)).toBe("Once");
  });
});
