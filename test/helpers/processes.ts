/** Asking whether a process still runs, for tests that kill, stop or orphan processes. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
