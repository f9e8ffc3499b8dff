/**
 * Supervision of the `vllm serve` child: started under the pipe watchdog (src/process/watchdog.ts) in
 * its own process group, ready once `GET /health` answers 200, stopped with everything it
 * started. A vLLM left behind holds GPU memory, so every way out (dispose, a failed start, the
 * worker exiting, the worker killed outright) ends the whole group.
 */
import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { PlatformError } from "../../src/contracts/errors.ts";
import { spawnWatched } from "../../src/process/watchdog.ts";

const HEALTH_POLL_MS = 500;
/** A worker killed outright: vLLM gets SIGTERM at once, and its whole group SIGKILL this much later. */
const ORPHAN_KILL_AFTER_S = 30;
/** Lines of the child's output kept for error messages. */
const OUTPUT_TAIL_LINES = 30;

type ExitInfo = { code: number | null; signal: NodeJS.Signals | null; error?: Error };

/** How errors name the child (the diffusers engine supervises its Python child with this class too). */
export type ChildNames = { engine: string; install: string; timeoutSetting: string };
const VLLM_NAMES: ChildNames = {
  engine: "vLLM",
  install: "Install vLLM on this node or set VLLM_BIN to its executable.",
  timeoutSetting: "PLATFORM_VLLM_START_TIMEOUT_MS",
};

/** The `vllm serve` child: its output tail, its exit, and stopping it with everything it started. */
export class VllmProcess {
  readonly pid: number | undefined;
  readonly exited: Promise<ExitInfo>;
  exit: ExitInfo | undefined;
  private readonly bin: string;
  private readonly child: ChildProcess;
  private readonly tail: string[] = [];
  private readonly outputClosed: Promise<unknown>;
  private readonly killOnExit = () => this.signal("SIGKILL");
  private readonly names: ChildNames;

  constructor(
    bin: string,
    args: string[],
    env: NodeJS.ProcessEnv,
    log: (line: string) => void,
    names: ChildNames = VLLM_NAMES,
  ) {
    this.bin = bin;
    this.names = names;
    // Under the pipe watchdog (src/process/watchdog.ts): a worker killed outright (SIGKILL, OOM) runs no
    // exit handler, and vLLM would hold the GPU on. Its own process group: vLLM starts engine-core
    // and tensor-parallel workers, and all of them must go when it does.
    this.child = spawnWatched(bin, args, { env, output: "pipe", killAfterSeconds: ORPHAN_KILL_AFTER_S }).process;
    this.pid = this.child.pid;
    const closed: Promise<unknown>[] = [];
    for (const stream of [this.child.stdout, this.child.stderr]) {
      if (!stream) continue;
      const lines = createInterface({ input: stream, crlfDelay: Infinity });
      lines.on("line", (line) => {
        this.tail.push(line);
        if (this.tail.length > OUTPUT_TAIL_LINES) this.tail.shift();
        log(line);
      });
      closed.push(new Promise((resolve) => lines.once("close", resolve)));
    }
    this.outputClosed = Promise.all(closed);
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => resolve({ code, signal }));
      this.child.once("error", (error) => resolve({ code: null, signal: null, error }));
    });
    void this.exited.then((info) => {
      this.exit = info;
      process.off("exit", this.killOnExit);
    });
    // A worker that exits without disposing must not leave a server holding GPU memory.
    process.on("exit", this.killOnExit);
  }

  async waitHealthy(baseUrl: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.exit) throw await this.startError();
      if (await healthy(baseUrl)) return;
      if (Date.now() >= deadline) {
        throw new PlatformError(
          503,
          "engine_start_timeout",
          `${this.names.engine} did not become healthy within ${Math.round(timeoutMs / 1000)} s (${this.names.timeoutSetting}); last output:\n${this.tail.join("\n")}`,
        );
      }
      await Promise.race([sleep(HEALTH_POLL_MS), this.exited]);
    }
  }

  /** Why the server is not there, for errors after start-up. */
  describeExit(): string {
    if (!this.exit) return `${this.names.engine} is not answering`;
    const how = this.exit.error
      ? this.exit.error.message
      : this.exit.signal
        ? `signal ${this.exit.signal}`
        : `code ${this.exit.code}`;
    return `${this.names.engine} exited (${how}); last output:\n${this.tail.join("\n")}`;
  }

  async stop(graceMs: number): Promise<void> {
    if (this.exit) return;
    this.signal("SIGTERM");
    if (!(await settlesWithin(this.exited, graceMs))) this.signal("SIGKILL");
    await this.exited;
    // The watchdog can end a moment before the rest of its group: vLLM itself after a SIGKILL (no
    // longer its child to reap), what vLLM started. Disposed means the GPU is free: wait for all.
    if (!(await this.groupGone(2_000))) {
      this.signal("SIGKILL");
      await this.groupGone(2_000);
    }
  }

  private async groupGone(ms: number): Promise<boolean> {
    if (this.pid === undefined) return true;
    const deadline = Date.now() + ms;
    for (;;) {
      try {
        process.kill(-this.pid, 0);
      } catch {
        return true;
      }
      if (Date.now() >= deadline) return false;
      await sleep(20);
    }
  }

  private async startError(): Promise<PlatformError> {
    const exit = this.exit as ExitInfo;
    // 127/126: the watchdog's shell found no such executable, or could not run it.
    if (exit.error || exit.code === 127 || exit.code === 126) {
      await settlesWithin(this.outputClosed, 2_000);
      const why = exit.error?.message ?? (this.tail.at(-1) || `exit code ${exit.code}`);
      return new PlatformError(
        500,
        "engine_start_failed",
        `could not run ${this.names.engine} ("${this.bin}"): ${why}. ${this.names.install}`,
      );
    }
    // The last lines usually say why (a traceback, "CUDA out of memory", …); let the pipes drain first.
    await settlesWithin(this.outputClosed, 2_000);
    const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
    return new PlatformError(
      500,
      "engine_start_failed",
      `${this.names.engine} ${how} before it was ready:\n${this.tail.join("\n")}`,
    );
  }

  private signal(signal: NodeJS.Signals): void {
    if (this.pid === undefined) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      // Already gone.
    }
  }
}

async function healthy(baseUrl: string): Promise<boolean> {
  try {
    const res = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(5_000) });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false; // not listening yet: vLLM binds its port only after loading the model
  }
}

/** Whether `promise` settles within `ms`; the timer never outlives the answer (it would hold a stopping worker open). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
