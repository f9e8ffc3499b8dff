/**
 * How tests wait (docs/testing.md, "Waiting in tests"): poll a condition until it holds, and fail
 * naming what never came; or ask whether it held within a time, where the timeout is the answer.
 */

export type WaitOptions = {
  timeoutMs?: number;
  intervalMs?: number;
  /** More to say when it times out (a process's output, the last state seen). */
  detail?: () => string;
};

/**
 * Polls `check` until it holds (a throw counts as not yet); `what` names it in the timeout's error.
 * A number for `options` is the timeout.
 */
export async function waitUntil(
  what: string | (() => string),
  check: () => boolean | Promise<boolean>,
  options: WaitOptions | number = {},
): Promise<void> {
  const {
    timeoutMs = 20_000,
    intervalMs = 100,
    detail,
  } = typeof options === "number" ? { timeoutMs: options } : options;
  const t0 = Date.now();
  while (
    !(await Promise.resolve()
      .then(check)
      .catch(() => false))
  ) {
    if (Date.now() - t0 > timeoutMs) {
      const name = typeof what === "string" ? what : what();
      throw new Error(`timed out waiting for ${name}${detail ? `; ${detail()}` : ""}`);
    }
    await sleep(intervalMs);
  }
}

/** Reads until `done` holds for what was read, and returns that; the last read is in the timeout's error. */
export async function readUntil<T>(
  what: string,
  read: () => Promise<T>,
  done: (value: T) => boolean,
  options: WaitOptions | number = {},
): Promise<T> {
  let last: { value: T } | undefined;
  const opts = typeof options === "number" ? { timeoutMs: options } : options;
  await waitUntil(
    what,
    async () => {
      last = { value: await read() };
      return done(last.value);
    },
    { ...opts, detail: () => opts.detail?.() ?? `last read: ${JSON.stringify(last?.value)}` },
  );
  return (last as { value: T }).value;
}

/** Whether `check` holds within `ms`: for a test whose answer is that something did or did not happen in time. */
export async function holdsWithin(
  check: () => boolean | Promise<boolean>,
  ms: number,
  intervalMs = 25,
): Promise<boolean> {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await check()) return true;
    await sleep(intervalMs);
  }
  return check();
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
