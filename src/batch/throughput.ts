/** Small helpers for the coordinator's loop: a throughput meter and a change signal. */
import type { BatchThroughput } from "./record.ts";

const WINDOW_MS = 10_000;

/** Records and tokens per second over the last ten seconds. */
export class Meter {
  private records = 0;
  private tokens = 0;
  private readonly samples: { at: number; records: number; tokens: number }[] = [];

  add(records: number, tokens: number): void {
    this.records += records;
    this.tokens += tokens;
  }

  /** Call periodically; returns the current rates (null until two samples exist). */
  sample(now = Date.now()): BatchThroughput | null {
    this.samples.push({ at: now, records: this.records, tokens: this.tokens });
    while (this.samples.length > 2 && (this.samples[0] as { at: number }).at < now - WINDOW_MS) this.samples.shift();
    const first = this.samples[0];
    if (!first || first.at === now) return null;
    const seconds = (now - first.at) / 1000;
    const round = (x: number) => Math.round(x * 10) / 10;
    return {
      records_per_second: round((this.records - first.records) / seconds),
      tokens_per_second: round((this.tokens - first.tokens) / seconds),
    };
  }
}

/** Lets a loop sleep until something it waits on may have changed. */
export class Changes {
  private waiters: (() => void)[] = [];

  notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  next(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}
