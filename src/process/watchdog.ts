/**
 * Children that must not outlive the Node process that started them (the embedded Redis, a
 * worker's `vllm serve`) even when it dies without running any code: SIGKILL, the OOM killer.
 * Each runs under a tiny `sh` watchdog whose stdin is a pipe from this process; the kernel closes
 * that pipe however this process ends, and the watchdog then stops the child. No PID is polled,
 * so a reused PID can never be signalled.
 */
import { type ChildProcess, type SpawnOptions, spawn } from "node:child_process";

export type WatchdogOptions = {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where the child's stdout and stderr go ("pipe" to read them from `process.stdout`/`stderr`). */
  output?: "pipe" | "ignore";
  /** After the parent is gone, how long the child runs on before SIGTERM (others may still need it). */
  graceSeconds?: number;
  /** After that SIGTERM, how long before SIGKILL to the whole group; unset: never. */
  killAfterSeconds?: number;
};

export type Watched = {
  /** The watchdog itself: the leader of a process group holding the command and all it starts. */
  process: ChildProcess;
  /** SIGTERM to the command now, with no grace (a deliberate stop). */
  stop: () => void;
};

/**
 * The script. fd 3 keeps the pipe: a background job of a non-interactive shell otherwise reads
 * /dev/null. The watcher reads until end of file (the parent is gone: grace, then SIGTERM) or a
 * `stop` line (at once). The shell catches SIGTERM, SIGINT and SIGHUP rather than dying, so a
 * signal to the whole group stops the command while the shell stays to report how it ended. It
 * catches them before the command starts, and passes one that came that early on as SIGTERM: a
 * signal in that window would end the shell with nobody left to wait for the command.
 * Once the command has ended, whatever is left in the group (the watcher, anything the command
 * started and left behind) gets SIGTERM, and the shell exits with the command's status or dies
 * of its signal. The shell itself writes nowhere: with its parent gone, a write to the parent's
 * pipe (a job's "Terminated" notice) would kill it by SIGPIPE before it could clean up. A command
 * that cannot be found exits 127 at once, as a shell does.
 */
const SCRIPT = [
  'grace="$1"; killafter="$2"; shift 2',
  'command -v "$1" >/dev/null 2>&1 || { echo "$1: not found" >&2; exit 127; }',
  "trap 'interrupted=1' TERM INT HUP",
  "exec 3<&0",
  '"$@" </dev/null 3<&- &',
  "pid=$!",
  "(",
  "  now=",
  '  while read -r line; do if [ "$line" = stop ]; then now=1; break; fi; done',
  '  [ -n "$now" ] || sleep "$grace"',
  '  kill -TERM "$pid" 2>/dev/null || exit 0',
  '  [ -n "$killafter" ] || exit 0',
  '  sleep "$killafter"; kill -KILL 0',
  ") <&3 3<&- >/dev/null 2>&1 &",
  "exec 3<&- </dev/null >/dev/null 2>&1",
  '[ -z "$interrupted" ] || kill -TERM "$pid" 2>/dev/null',
  "while :; do",
  '  interrupted=; wait "$pid"; code=$?',
  '  [ -n "$interrupted" ] || break',
  "done",
  "trap '' TERM INT HUP",
  "kill -TERM 0 2>/dev/null",
  "trap - TERM INT HUP",
  'if [ "$code" -gt 128 ] && [ "$code" -lt 160 ]; then kill -s "$(kill -l "$code")" "$$"; fi',
  'exit "$code"',
].join("\n");

/** Starts `command` under the watchdog, in its own process group (so a terminal's Ctrl-C does not reach it). */
export function spawnWatched(command: string, args: string[], options: WatchdogOptions = {}): Watched {
  const spawnOptions: SpawnOptions = {
    env: options.env,
    cwd: options.cwd,
    stdio: ["pipe", options.output ?? "ignore", options.output ?? "ignore"],
    detached: true,
  };
  const child = spawn(
    "sh",
    [
      "-c",
      SCRIPT,
      "platform-watchdog",
      String(options.graceSeconds ?? 0),
      options.killAfterSeconds === undefined ? "" : String(options.killAfterSeconds),
      command,
      ...args,
    ],
    spawnOptions,
  );
  child.stdin?.on("error", () => undefined); // EPIPE once the watchdog is gone
  return {
    process: child,
    stop: () => {
      if (!child.stdin || child.stdin.destroyed) return;
      child.stdin.end("stop\n");
    },
  };
}
