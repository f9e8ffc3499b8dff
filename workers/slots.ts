/**
 * The engine's sequences as slots a replica's jobs take in turn. The worker
 * takes more jobs from the queue than the engine runs at once (a prefetch):
 * the extra ones wait here, first come first served, so a sequence that
 * finishes starts its next job at once instead of after a Redis round trip.
 * A waiting job leaves when its client cancels it, or with 503
 * `queue_timeout` when its queue deadline passes: held here, a request is
 * still waiting for capacity, and admission control's bound must hold.
 */
import { PlatformError } from "../src/contracts/errors.ts";
import { RETRY_AFTER_S } from "../src/contracts/job.ts";

export class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(size: number) {
    this.free = size;
  }

  /** Resolves once a slot is this caller's; `release()` gives it back. */
  acquire(signal: AbortSignal, startBy?: number): Promise<void> {
    if (signal.aborted) return Promise.reject(cancelled());
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const leave = (error: PlatformError) => {
        this.waiting.splice(this.waiting.indexOf(take), 1);
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        reject(error);
      };
      const take = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => leave(cancelled());
      const timer =
        startBy === undefined
          ? undefined
          : setTimeout(
              () =>
                leave(
                  new PlatformError(
                    503,
                    "queue_timeout",
                    "no sequence of the replica came free before the request's max queue wait; the endpoint is overloaded or still scaling up, retry later",
                    null,
                    RETRY_AFTER_S.queue_timeout,
                  ),
                ),
              Math.max(0, startBy - Date.now()),
            );
      signal.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(take);
    });
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }
}

function cancelled(): PlatformError {
  return new PlatformError(499, "cancelled", "the request was cancelled by its client");
}
