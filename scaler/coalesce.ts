/**
 * Wraps a pass (reconcile, scaling tick) so that only one runs at a time, and
 * a call that arrives during a run schedules exactly one more run after it:
 * triggers from timers and notifications never pile up, and none is lost.
 */
export type Coalesced = (() => Promise<void>) & {
  /** Resolves when no run is in progress, without starting one (for shutdown). */
  settled: () => Promise<void>;
};

export function coalesced(pass: () => Promise<void>, shouldRepeat: () => boolean = () => true): Coalesced {
  let running: Promise<void> | undefined;
  let again = false;
  const run = () => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await pass();
      } while (again && shouldRepeat());
    })().finally(() => {
      running = undefined;
    });
    return running;
  };
  return Object.assign(run, { settled: async () => void (await running) });
}
