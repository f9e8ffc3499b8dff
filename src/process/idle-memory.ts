/**
 * Gives memory back once a long-running process (`up`, a gateway, a worker, the scaler) falls
 * idle. V8 sizes the young generation for the allocation rate it last saw (up to 3 × 16 MiB
 * semi-spaces under load) and shrinks it only at a garbage collection that finds the rate low;
 * an idle process allocates so little that its next collection comes minutes later, so it stays
 * at its busiest size (`platform up`: ~170 MiB resident after a burst of chats, ~120 MiB once a
 * collection finally runs). A process here watches its event loop and its work in flight: after
 * a busy spell, once it has been idle for a whole check period with nothing in flight, it runs
 * one memory-reducing collection (what V8's own low-memory notification does), then none until
 * it has been busy again. Under load this costs nothing; the collection takes ~30 ms, when
 * nothing is waiting.
 */
import { performance } from "node:perf_hooks";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { logger } from "../telemetry/log.ts";

/** How long the event loop must stay idle before memory is given back. */
export const IDLE_CHECK_MS = 5_000;
/** Event-loop utilisation below which a check period counts as idle, and above which as busy. */
const IDLE_BELOW = 0.02;
const BUSY_ABOVE = 0.05;

type GcOptions = { type: "major"; execution: "sync"; flavor: "last-resort" };

/**
 * V8's `gc()` without exposing it as a global: the flag is on only while a fresh context is made,
 * the way Node's own documentation for `v8.setFlagsFromString` obtains it.
 */
function memoryReducingGc(): (options: GcOptions) => void {
  setFlagsFromString("--expose-gc");
  try {
    return runInNewContext("gc") as (options: GcOptions) => void;
  } finally {
    setFlagsFromString("--no-expose-gc");
  }
}

/**
 * Starts watching; the timer never keeps the process alive. Returns a stop function. `busy`: work
 * in flight that a quiet event loop does not show (a slow model's tokens, a long stream), during
 * which nothing is trimmed.
 */
export function trimMemoryWhenIdle(options: { checkMs?: number; busy?: () => boolean } = {}): () => void {
  const gc = memoryReducingGc();
  const log = logger("memory");
  // Start-up itself is the first busy spell: its garbage goes at the first idle period.
  let busySinceTrim = true;
  let last = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const utilisation = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    if (utilisation > BUSY_ABOVE || options.busy?.()) busySinceTrim = true;
    else if (utilisation < IDLE_BELOW && busySinceTrim) {
      busySinceTrim = false;
      const before = process.memoryUsage.rss();
      gc({ type: "major", execution: "sync", flavor: "last-resort" });
      log.debug(
        {
          rss_before_mib: Math.round(before / 1048576),
          rss_after_mib: Math.round(process.memoryUsage.rss() / 1048576),
        },
        "idle: memory given back",
      );
    }
  }, options.checkMs ?? IDLE_CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}
