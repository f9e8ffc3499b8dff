/**
 * Restart back-off, shared by the local backends (model replicas, spares, service replicas): 0.5 s
 * doubling to 30 s while a process keeps dying young; one that lived HEALTHY_UPTIME_MS starts over.
 */
const MAX_BACKOFF_MS = 30_000;
/** A process that lived this long resets the failure count. */
const HEALTHY_UPTIME_MS = 60_000;

/** The consecutive failures after one more death, given how long the process lived. */
export function nextFailures(failures: number, livedMs: number): number {
  return livedMs > HEALTHY_UPTIME_MS ? 1 : failures + 1;
}

/** How long to wait before the next start after `failures` consecutive ones. */
export function backoffDelay(failures: number): number {
  return Math.min(MAX_BACKOFF_MS, 500 * 2 ** (failures - 1));
}
