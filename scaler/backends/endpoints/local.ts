/**
 * The embedded backend: replicas are child processes on this machine.
 * It also supervises them: a replica that dies is replaced, with exponential
 * back-off while replicas keep failing to start, and its jobs are taken back
 * at once. With `standby` it keeps one spare worker process loaded (code and
 * engine binding, no model) and makes the next replica of it, so a scale-up
 * or a replacement skips the process start (docs/fleet.md, "Standby worker").
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import type { Endpoint } from "../../../src/endpoints/record.ts";
import type { Control } from "../../../src/redis/connection.ts";
import { readReplica, removeReplica } from "../../../src/replicas/heartbeats.ts";
import { QueueBase } from "../../../src/queue/base.ts";
import { reclaimJobs } from "../../../src/queue/reclaim.ts";
import type { BackendReplicas, ReplicaBackend } from "./backend.ts";
import { withWorkerAllocator } from "../../../src/process/worker-env.ts";
import { runningRevisions } from "../../../src/endpoints/rollout.ts";
import { backoffDelay, nextFailures } from "../backoff.ts";

export type LocalBackendOptions = {
  ctl: Control;
  /** Command and arguments that start a worker; `--endpoint` and `--replica-id` are appended. */
  workerCommand: [string, ...string[]];
  env: NodeJS.ProcessEnv;
  logDir: string;
  /** How long a draining worker may take before it is killed. */
  drainTimeoutMs?: number;
  /** Keep a spare worker (`worker --standby`) ready to become the next replica. */
  standby?: boolean;
  /** Give each worker a health port of its own (any free one), where it serves /metrics. */
  workerMetrics?: boolean;
  onEvent?: (message: string) => void;
};

type Replica = {
  id: string;
  /** The endpoint's revision it runs (src/endpoints/rollout.ts). */
  revision: string;
  child: ChildProcess;
  startedAt: number;
  stopping: boolean;
  exited: Promise<void>;
};
type Spare = { child: ChildProcess; startedAt: number };
/** Replicas that keep failing back off per revision: an update that cannot start never holds up the one serving. */
type Backoff = { failures: number; timer?: NodeJS.Timeout };
type Pool = { endpoint: Endpoint; wanted: number; replicas: Replica[]; backoff: Map<string, Backoff> };

/**
 * A new spare starts this long after the last one was taken: the replica made of it is loading
 * its model meanwhile and should have the CPU. Spares that die young back off like replicas.
 */
const SPARE_DELAY_MS = 2_000;

export class LocalBackend implements ReplicaBackend {
  readonly kind = "local" as const;
  private readonly options: LocalBackendOptions;
  private readonly pools = new Map<string, Pool>();
  private readonly queues: QueueBase;
  private spare: Spare | undefined;
  private spareTimer: NodeJS.Timeout | undefined;
  private spareFailures = 0;
  private closed = false;

  constructor(options: LocalBackendOptions) {
    this.options = options;
    this.queues = new QueueBase(options.ctl);
    if (options.standby) this.startSpare();
    mkdirSync(options.logDir, { recursive: true });
  }

  async scale(endpoint: Endpoint, replicas: number): Promise<void> {
    // Closed or killed: the scaler may still be running (a second Ctrl-C kills before it stops),
    // and a replica started now would outlive `up`.
    if (this.closed) return;
    let pool = this.pools.get(endpoint.name);
    if (!pool) {
      pool = { endpoint, wanted: replicas, replicas: [], backoff: new Map() };
      this.pools.set(endpoint.name, pool);
    }
    pool.endpoint = endpoint;
    pool.wanted = replicas;
    // Every revision the record runs (an update rolling out runs beside the one serving, drained
    // ones finish their queue): which replicas of which revision run is the record's to say.
    const revisions = runningRevisions(endpoint, replicas);
    const live = pool.replicas.filter((r) => !r.stopping);
    for (const r of live) if (!revisions.some((rev) => rev.id === r.revision)) void this.stop(pool, r);
    for (const rev of revisions) {
      const mine = live.filter((r) => r.revision === rev.id);
      if (pool.backoff.get(rev.id)?.timer === undefined) {
        for (let i = mine.length; i < rev.replicas; i++) this.start(pool, rev.id);
      }
      // Scale down newest first: older replicas have warm caches.
      for (const r of mine.slice(rev.replicas).reverse()) void this.stop(pool, r);
    }
    for (const id of pool.backoff.keys()) {
      if (!revisions.some((rev) => rev.id === id)) this.clearBackoff(pool, id);
    }
  }

  async observe(endpointName: string): Promise<BackendReplicas> {
    const pool = this.pools.get(endpointName);
    return { requested: pool ? pool.replicas.filter((r) => !r.stopping).length : 0 };
  }

  async remove(endpointName: string): Promise<void> {
    const pool = this.pools.get(endpointName);
    if (!pool) return;
    pool.wanted = 0;
    for (const id of pool.backoff.keys()) this.clearBackoff(pool, id);
    await Promise.all(pool.replicas.map((r) => this.stop(pool, r)));
    this.pools.delete(endpointName);
  }

  endpoints(): string[] {
    return [...this.pools.keys()];
  }

  /** Process ids of the running replicas, for tests and diagnostics. */
  pids(endpointName: string): number[] {
    return (this.pools.get(endpointName)?.replicas ?? []).filter((r) => !r.stopping).map((r) => r.child.pid as number);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.dropSpare();
    await Promise.all([...this.pools.keys()].map((name) => this.remove(name)));
    await this.queues.close();
  }

  /** The forced stop (a second Ctrl-C): SIGKILL every replica now; their jobs' locks lapse and BullMQ requeues them. */
  async kill(): Promise<void> {
    this.closed = true;
    this.dropSpare();
    const all = [...this.pools.values()].flatMap((pool) => {
      for (const id of pool.backoff.keys()) this.clearBackoff(pool, id);
      return pool.replicas;
    });
    for (const r of all) {
      r.stopping = true;
      r.child.kill("SIGKILL");
    }
    await Promise.all(all.map((r) => r.exited));
  }

  private clearBackoff(pool: Pool, revision: string): void {
    clearTimeout(pool.backoff.get(revision)?.timer);
    pool.backoff.delete(revision);
  }

  private start(pool: Pool, revision: string): void {
    const id = `${pool.endpoint.name}-${randomBytes(4).toString("hex")}`;
    const logPath = join(this.options.logDir, `${id}.log`);
    const log = createWriteStream(logPath, { flags: "a" });
    const spare = this.takeSpare();
    let child: ChildProcess;
    if (spare) {
      child = spare;
      child.stdin?.end(`${JSON.stringify({ endpoint: pool.endpoint.name, replicaId: id, revision })}\n`);
    } else {
      child = this.spawnWorker(["--endpoint", pool.endpoint.name, "--replica-id", id, "--revision", revision]);
    }
    logTo(child, log);
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once("exit", () => resolve());
    });
    const replica: Replica = {
      id,
      revision,
      child,
      startedAt: Date.now(),
      stopping: false,
      exited,
    };
    pool.replicas.push(replica);
    this.options.onEvent?.(
      `replica ${id} starting (pid ${child.pid}${spare ? ", from the standby worker" : ""}, log ${logPath})`,
    );
    child.once("exit", (code, signal) => void this.onExit(pool, replica, code, signal));
  }

  private spawnWorker(args: string[]): ChildProcess {
    const [command, ...base] = this.options.workerCommand;
    const metrics = this.options.workerMetrics ? ["--health-port", "0"] : [];
    return spawn(command, [...base, ...args, ...metrics], {
      env: { ...withWorkerAllocator(this.options.env), PLATFORM_EXIT_WITH_PARENT: "1" },
      stdio: [args.includes("--standby") ? "pipe" : "ignore", "pipe", "pipe"],
      // Own process group: a terminal's Ctrl-C reaches `up`, which drains replicas in order.
      detached: true,
    });
  }

  /** The spare, if one is loaded and alive; a new one follows shortly. */
  private takeSpare(): ChildProcess | undefined {
    const spare = this.spare;
    if (!spare) return undefined;
    this.spare = undefined;
    spare.child.removeAllListeners("exit");
    spare.child.stdout?.unpipe();
    spare.child.stderr?.unpipe();
    this.scheduleSpare(SPARE_DELAY_MS);
    return spare.child.exitCode === null && spare.child.signalCode === null ? spare.child : undefined;
  }

  private startSpare(): void {
    if (this.closed || this.spare) return;
    const child = this.spawnWorker(["--standby"]);
    logTo(child, createWriteStream(join(this.options.logDir, "standby.log"), { flags: "a" }));
    const spare: Spare = { child, startedAt: Date.now() };
    this.spare = spare;
    child.once("exit", (code, signal) => {
      if (this.spare !== spare) return;
      this.spare = undefined;
      if (this.closed) return;
      this.spareFailures = nextFailures(this.spareFailures, Date.now() - spare.startedAt);
      const delay = backoffDelay(this.spareFailures);
      this.options.onEvent?.(
        `standby worker exited (${signal ?? `code ${code}`}, log ${join(this.options.logDir, "standby.log")}); another in ${delay} ms`,
      );
      this.scheduleSpare(delay);
    });
  }

  private scheduleSpare(delayMs: number): void {
    clearTimeout(this.spareTimer);
    this.spareTimer = setTimeout(() => this.startSpare(), delayMs);
    this.spareTimer.unref();
  }

  private dropSpare(): void {
    clearTimeout(this.spareTimer);
    const spare = this.spare;
    this.spare = undefined;
    spare?.child.kill("SIGKILL");
  }

  private onExit(pool: Pool, replica: Replica, code: number | null, signal: NodeJS.Signals | null): void {
    pool.replicas = pool.replicas.filter((r) => r !== replica);
    if (replica.stopping || this.closed) return;
    const lived = Date.now() - replica.startedAt;
    const backoff = pool.backoff.get(replica.revision) ?? { failures: 0 };
    pool.backoff.set(replica.revision, backoff);
    backoff.failures = nextFailures(backoff.failures, lived);
    const delay = backoffDelay(backoff.failures);
    this.options.onEvent?.(`replica ${replica.id} exited (${signal ?? `code ${code}`}); replacing it in ${delay} ms`);
    clearTimeout(backoff.timer);
    backoff.timer = setTimeout(() => {
      backoff.timer = undefined;
      if (!this.closed && this.pools.get(pool.endpoint.name) === pool) void this.scale(pool.endpoint, pool.wanted);
    }, delay);
    // Died on its own: its jobs go back to the queue now, not when their locks lapse, and its
    // heartbeat goes rather than waiting for its TTL. Exit code 1 is a failed start, whose
    // "failed" record stays so that `status` can say why.
    void this.reclaim(replica.id).finally(() => {
      if (code !== 1) void removeReplica(this.options.ctl, pool.endpoint.name, replica.id).catch(() => undefined);
    });
  }

  private async reclaim(replicaId: string): Promise<void> {
    try {
      const record = await readReplica(this.options.ctl, replicaId);
      if (!record) return;
      const { requeued, failed } = await reclaimJobs(this.queues, record);
      if (requeued.length + failed.length > 0) {
        this.options.onEvent?.(
          `replica ${replicaId}: ${requeued.length} job(s) back in the queue, ${failed.length} failed after losing too many replicas`,
        );
      }
    } catch (e) {
      // Redis away: the jobs' locks lapse and BullMQ's stalled check requeues them instead.
      this.options.onEvent?.(
        `replica ${replicaId}: could not take its jobs back (${(e as Error).message}); they return when their locks lapse`,
      );
    }
  }

  /** SIGTERM lets the worker drain; SIGKILL if it takes longer than allowed. */
  private async stop(pool: Pool, replica: Replica): Promise<void> {
    if (!replica.stopping) {
      replica.stopping = true;
      this.options.onEvent?.(`replica ${replica.id} draining`);
      replica.child.kill("SIGTERM");
    }
    const timer = setTimeout(() => replica.child.kill("SIGKILL"), this.options.drainTimeoutMs ?? 30_000);
    await replica.exited;
    clearTimeout(timer);
    await removeReplica(this.options.ctl, pool.endpoint.name, replica.id).catch(() => undefined);
  }
}

/**
 * Both of a child's streams into one log. `pipe`'s default would end the log when the first stream
 * ends, and the other's last bytes would then be a write after end (an uncaught error).
 */
function logTo(child: ChildProcess, log: WriteStream): void {
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  child.once("close", () => log.end());
}
