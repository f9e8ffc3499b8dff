/**
 * JSON schemas turned into GBNF text on worker threads (json-gbnf.ts), never on the replica's event
 * loop: that loop drives every sequence's batches, and checking and converting a large schema takes
 * a tenth of a second or more (docs/performance.md, "Structured outputs"). A schema travels as JSON
 * text, which its sender has at hand as the cache's key and which is cheaper to send than the object.
 *
 * Bounded: `size` threads, each converting one schema at a time (the rest wait in order), each
 * with a heap of its own of at most THREAD_HEAP_MB, started on first use and stopped after
 * IDLE_STOP_MS without a schema (a thread costs ~30 MiB resident). Each schema has a time budget:
 * a thread still converting past it is stopped, and that request alone fails with 400
 * `schema_too_complex`, as does one whose conversion runs out of its thread's heap.
 */
import { Worker } from "node:worker_threads";
import { PlatformError } from "../../src/contracts/errors.ts";

type Task = { json: string; param: string; resolve: (gbnf: string) => void; reject: (e: PlatformError) => void };
type Thread = { worker: Worker; ready: boolean; task?: Task; timer?: NodeJS.Timeout };
type Failure = { status: number; code: string; message: string; param: string | null };
type Reply = { ready: true } | { grammar: string } | { error: Failure };

/** One thread: conversions are rare next to generation, and each one held to a core leaves the others to llama.cpp. */
export const DEFAULT_GRAMMAR_THREADS = 1;
/** The largest schema the default limits allow needs ~40 MiB of heap to convert. */
const THREAD_HEAP_MB = 256;
const IDLE_STOP_MS = 30_000;

export class GrammarPool {
  private readonly size: number;
  private readonly timeoutMs: number;
  private readonly threads: Thread[] = [];
  private readonly waiting: Task[] = [];
  private idle: NodeJS.Timeout | undefined;
  private closed = false;

  /** `timeoutMs`: the budget of one schema's conversion, from when a thread takes it. */
  constructor(options: { timeoutMs: number; size?: number }) {
    this.timeoutMs = options.timeoutMs;
    this.size = options.size ?? DEFAULT_GRAMMAR_THREADS;
  }

  /** The GBNF of the schema written as `json`; `param` names it in the request, for the 400s. */
  gbnf(json: string, param: string): Promise<string> {
    if (this.closed) return Promise.reject(closedError(param));
    return new Promise((resolve, reject) => {
      this.waiting.push({ json, param, resolve, reject });
      this.dispatch();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.idle);
    for (const task of this.waiting.splice(0)) task.reject(closedError(task.param));
    await Promise.all([...this.threads].map((t) => this.stop(t, closedError)));
  }

  private dispatch(): void {
    for (const thread of this.threads) {
      const task = thread.ready && !thread.task ? this.waiting.shift() : undefined;
      if (task) this.start(thread, task);
    }
    // Threads starting or free take the tasks still waiting; more are started up to the bound.
    let available = this.threads.filter((t) => !t.task).length;
    while (this.waiting.length > available && this.threads.length < this.size) {
      this.spawn();
      available++;
    }
    clearTimeout(this.idle);
    if (this.waiting.length === 0 && this.threads.every((t) => !t.task)) {
      this.idle = setTimeout(() => {
        for (const thread of [...this.threads]) void this.stop(thread, closedError);
      }, IDLE_STOP_MS).unref();
    }
  }

  private start(thread: Thread, task: Task): void {
    thread.task = task;
    thread.timer = setTimeout(
      () =>
        void this.stop(thread, (param) =>
          tooComplex(param, `took longer than ${this.timeoutMs} ms (PLATFORM_GRAMMAR_TIMEOUT_MS)`),
        ).then(() => this.dispatch()),
      this.timeoutMs,
    );
    thread.worker.postMessage({ json: task.json, param: task.param });
  }

  private spawn(): void {
    const worker = new Worker(new URL("./grammar-thread.ts", import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB },
    });
    // A thread never keeps the process alive: a replica that stops does not wait for a conversion.
    worker.unref();
    const thread: Thread = { worker, ready: false };
    this.threads.push(thread);
    worker.on("message", (reply: Reply) => {
      if ("ready" in reply) thread.ready = true;
      else this.finish(thread, reply);
      this.dispatch();
    });
    // A thread that dies takes only its own task with it, and is replaced on demand.
    worker.on("error", (e: Error & { code?: string }) => {
      this.remove(thread);
      clearTimeout(thread.timer);
      const param = thread.task?.param ?? "";
      thread.task?.reject(
        e.code === "ERR_WORKER_OUT_OF_MEMORY"
          ? tooComplex(param, `needed more than ${THREAD_HEAP_MB} MiB`)
          : new PlatformError(500, "engine_error", `building a grammar failed: ${e.message}`),
      );
      thread.task = undefined;
      this.dispatch();
    });
  }

  private finish(thread: Thread, reply: { grammar: string } | { error: Failure }): void {
    const task = thread.task;
    clearTimeout(thread.timer);
    thread.task = undefined;
    if (!task) return;
    if ("grammar" in reply) task.resolve(reply.grammar);
    else task.reject(new PlatformError(reply.error.status, reply.error.code, reply.error.message, reply.error.param));
  }

  /** Ends a thread (there is no other way to stop a conversion), failing its task with `why`. */
  private async stop(thread: Thread, why: (param: string) => PlatformError): Promise<void> {
    this.remove(thread);
    clearTimeout(thread.timer);
    if (thread.task) thread.task.reject(why(thread.task.param));
    thread.task = undefined;
    await thread.worker.terminate();
  }

  private remove(thread: Thread): void {
    const i = this.threads.indexOf(thread);
    if (i >= 0) this.threads.splice(i, 1);
  }
}

function tooComplex(param: string, what: string): PlatformError {
  return new PlatformError(
    400,
    "schema_too_complex",
    `${param}: building a grammar for this JSON schema ${what}; send a smaller or simpler schema`,
    param,
  );
}

function closedError(param: string): PlatformError {
  return new PlatformError(503, "not_ready", `${param}: the replica is stopping`, null);
}
