/**
 * src/process/idle-memory.ts: a process that has been busy and falls idle gives its young generation
 * back at once, instead of whenever V8's next collection happens to come.
 */
import { getHeapSpaceStatistics } from "node:v8";
import { describe, expect, it } from "vitest";
import { trimMemoryWhenIdle } from "../../src/process/idle-memory.ts";

const youngBytes = () => getHeapSpaceStatistics().find((s) => s.space_name === "new_space")?.space_size ?? 0;

/** Keeps the event loop busy allocating: objects that survive a scavenge or two make V8 grow the young generation. */
function allocateFor(ms: number): unknown[] {
  const kept: unknown[] = [];
  const end = performance.now() + ms;
  while (performance.now() < end) {
    for (let i = 0; i < 10_000; i++) kept.push({ i, s: `item ${i}` });
    if (kept.length > 400_000) kept.splice(0, 200_000);
  }
  return kept;
}

describe("trimMemoryWhenIdle", () => {
  it("shrinks the young generation a busy spell grew, once the process is idle", async () => {
    const stop = trimMemoryWhenIdle({ checkMs: 200 });
    try {
      // Busy for a whole check period and more, in slices so that the timer gets to look.
      for (let i = 0; i < 6; i++) {
        allocateFor(100);
        await new Promise((r) => setImmediate(r));
      }
      const grown = youngBytes();
      // Idle: the poll's cheap reads leave the event loop quiet, so the next whole check period trims.
      await expect.poll(youngBytes, { timeout: 5_000 }).toBeLessThan(grown / 2);
    } finally {
      stop();
    }
  });
});
