/** Asking whether a process still runs, and stopping children, for tests that kill, stop or orphan processes. */
import type { ChildProcess } from "node:child_process";

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SIGKILLs every child still running and resolves once all have exited. */
export async function killAll(children: Iterable<ChildProcess>): Promise<void> {
  await Promise.all(
    [...children].map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once("exit", () => resolve());
          c.kill("SIGKILL");
        }),
    ),
  );
}

/**
 * SIGKILLs the first replica `busy` finds serving a job (polled every 20 ms until one is), then reads
 * the rest of the client's stream: what a client sees when its replica dies mid-answer.
 */
export async function killBusyReplica(
  busy: () => Promise<{ pid: number } | undefined>,
  reader: ReadableStreamDefaultReader<Uint8Array>,
): Promise<string> {
  let victim = await busy();
  while (!victim) {
    await new Promise((r) => setTimeout(r, 20));
    victim = await busy();
  }
  process.kill(victim.pid, "SIGKILL");
  const decoder = new TextDecoder();
  let rest = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return rest + decoder.decode();
    rest += decoder.decode(value, { stream: true });
  }
}
