/**
 * The engine's sequences as slots a replica's jobs take in turn. The worker
 * takes more jobs from the queue than the engine runs at once (a prefetch):
 * the extra ones wait here, so a sequence that finishes starts its next job at
 * once instead of after a Redis round trip. A freed sequence goes to the
 * waiting job of the best band (src/queue/fair-share.ts `bandOf`), then of the
 * tenant with the fewest sequences on this replica, then to the one that came
 * first: a quiet organization's job, taken behind a flood's prefetched ones,
 * takes the next sequence that frees. A waiting job leaves when its client
 * cancels it, or with 503 `queue_timeout` when its queue deadline passes: held
 * here, a request is still waiting for capacity, and admission control's bound
 * must hold.
 */
import { PlatformError } from "../src/contracts/errors.ts";
import { RETRY_AFTER_S } from "../src/contracts/job.ts";

/** Which waiting job goes first: the lower band, then the tenant (`flow`) holding fewer sequences. */
export type SlotRank = { band: number; flow: string };

type Waiter = SlotRank & { take: () => void };

export class Slots {
  private free: number;
  private readonly waiting: Waiter[] = [];
  /** Sequences each tenant holds now. */
  private readonly holding = new Map<string, number>();

  constructor(size: number) {
    this.free = size;
  }

  /** Resolves once a slot is this caller's; `release(rank.flow)` gives it back. */
  acquire(signal: AbortSignal, startBy?: number, rank: SlotRank = { band: 0, flow: "" }): Promise<void> {
    if (signal.aborted) return Promise.reject(cancelled());
    if (this.free > 0) {
      this.free--;
      this.hold(rank.flow, 1);
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const leave = (error: PlatformError) => {
        this.waiting.splice(this.waiting.indexOf(waiter), 1);
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        reject(error);
      };
      const take = () => {
        this.hold(rank.flow, 1);
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
      const waiter = { ...rank, take };
      this.waiting.push(waiter);
    });
  }

  release(flow = ""): void {
    this.hold(flow, -1);
    const next = this.next();
    if (next === undefined) {
      this.free++;
      return;
    }
    this.waiting.splice(next, 1)[0]?.take();
  }

  /** The waiter a freed slot goes to (its index), or undefined when none waits. */
  private next(): number | undefined {
    let best: number | undefined;
    for (let i = 0; i < this.waiting.length; i++) {
      const w = this.waiting[i] as Waiter;
      const b = best === undefined ? undefined : (this.waiting[best] as Waiter);
      if (!b || w.band < b.band || (w.band === b.band && this.held(w.flow) < this.held(b.flow))) best = i;
    }
    return best;
  }

  private held(flow: string): number {
    return this.holding.get(flow) ?? 0;
  }

  private hold(flow: string, by: number): void {
    const n = this.held(flow) + by;
    if (n > 0) this.holding.set(flow, n);
    else this.holding.delete(flow);
  }
}

function cancelled(): PlatformError {
  return new PlatformError(499, "cancelled", "the request was cancelled by its client");
}
