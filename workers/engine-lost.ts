/**
 * A dead engine: when the engine's own process ends (Engine.lost) the replica is dead, and a job's
 * error that came from that death is not the request's failure (WorkerOptions.onEngineLost).
 */
import { PlatformError } from "../src/contracts/errors.ts";
import { logger } from "../src/telemetry/log.ts";
import type { Engine } from "./engines/engine.ts";
import type { WorkerState } from "./state.ts";

/** A job's error and its engine process's exit arrive in either order; this long apart they are one event. */
const ENGINE_EXIT_GRACE_MS = 1_000;
const log = logger("worker");

/** Once the engine's process ends, unless the drain ended it: the replica fails, says why, then `onLost`. */
export function watchEngine(
  w: WorkerState,
  engine: Engine,
  beat: () => Promise<void>,
  onLost: (why: string) => void,
): void {
  void engine.lost?.then(async (why) => {
    if (w.draining) return;
    w.engineLost = why;
    w.state = "failed";
    w.error = `the engine stopped: ${why}`;
    log.error({ replica: w.replicaId }, `replica ${w.replicaId}: ${w.error}`);
    await beat(); // so that status says why before the process goes
    onLost(why);
  });
}

/** Whether `e` came from the engine's process dying: it ends within ENGINE_EXIT_GRACE_MS of the error. */
export async function diedWithEngine(w: WorkerState, e: unknown): Promise<boolean> {
  if (w.engineLost !== undefined) return true;
  if (!w.engine?.lost || (e instanceof PlatformError && e.status < 500)) return false;
  const lost = await Promise.race([
    w.engine.lost,
    new Promise<undefined>((r) => setTimeout(() => r(undefined), ENGINE_EXIT_GRACE_MS).unref()),
  ]);
  return lost !== undefined;
}
