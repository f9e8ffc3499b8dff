/** A stream's tokens, a few to a reply entry: the first at once, the rest per window or size, in order, none lost. */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { JobEvent } from "../../src/contracts/job.ts";
import { TOKEN_FLUSH_CHARS, TOKEN_FLUSH_MS, TokenCoalescer } from "../../src/queue/replies.ts";

describe("TokenCoalescer", () => {
  let sent: JobEvent[];
  let tokens: TokenCoalescer;
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    sent = [];
    tokens = new TokenCoalescer((e) => sent.push(e));
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("sends the first token at once and gathers the next ones until the window ends", () => {
    tokens.push("Once");
    expect(sent).toEqual([{ type: "token", text: "Once" }]);
    tokens.push(" upon");
    tokens.push(" a");
    expect(sent).toHaveLength(1);
    vi.advanceTimersByTime(TOKEN_FLUSH_MS);
    expect(sent).toEqual([
      { type: "token", text: "Once" },
      { type: "token", text: " upon a" },
    ]);
  });

  it("sends a token at once after a quiet window (a slow engine gets no added delay)", () => {
    tokens.push("a");
    vi.advanceTimersByTime(TOKEN_FLUSH_MS);
    tokens.push("b");
    expect(sent.map((e) => (e as { text: string }).text)).toEqual(["a", "b"]);
  });

  it("flushes on size, and flush() sends what waits, keeping order and every logprob", () => {
    const lp = (token: string) => ({ token, logprob: -1, bytes: [], top_logprobs: [] });
    tokens.push("x", [lp("x")]);
    tokens.push("y".repeat(TOKEN_FLUSH_CHARS), [lp("y")]);
    tokens.push("z", [lp("z")]);
    tokens.push("", [lp("partial")]);
    tokens.flush();
    tokens.flush(); // nothing left: nothing sent
    expect(sent).toEqual([
      { type: "token", text: "x", logprobs: [lp("x")] },
      { type: "token", text: "y".repeat(TOKEN_FLUSH_CHARS), logprobs: [lp("y")] },
      { type: "token", text: "z", logprobs: [lp("z"), lp("partial")] },
    ]);
    vi.advanceTimersByTime(TOKEN_FLUSH_MS * 2);
    expect(sent).toHaveLength(3);
  });
});
