/**
 * Stopping a long-running process (`platform gateway`, `platform up`): each step bounded, so a
 * dead dependency can never leave the process hanging.
 */

/** `work`, given at most `ms`; its failure is ignored (a stop goes on with the next step). */
export function bounded(work: Promise<unknown>, ms: number): Promise<unknown> {
  return Promise.race([work.catch(() => undefined), new Promise((r) => setTimeout(r, ms).unref())]);
}

/** Calls `stop` with the signal's name on each of `signals` (SIGINT and SIGTERM unless told). */
export function onStopSignals(stop: (signal: string) => void, signals: NodeJS.Signals[] = ["SIGINT", "SIGTERM"]): void {
  for (const signal of signals) process.on(signal, () => stop(signal));
}
