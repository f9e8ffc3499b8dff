/**
 * The embedded backend: replicas are child processes on this machine.
 * It also supervises them: a replica that dies is replaced, with exponential
 * back-off while replicas keep failing to start.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { EndpointRecord } from "../../src/contracts/records.ts";
import type { Control } from "../../src/control/redis.ts";
import { removeReplica } from "../../src/control/replicas.ts";
import type { BackendReplicas, ReplicaBackend } from "../backend.ts";

export type LocalBackendOptions = {
  ctl: Control;
  /** Command and arguments that start a worker; `--endpoint` and `--replica-id` are appended. */
  workerCommand: [string, ...string[]];
  env: NodeJS.ProcessEnv;
  logDir: string;
  /** How long a draining worker may take before it is killed. */
  drainTimeoutMs?: number;
  onEvent?: (message: string) => void;
};

type Replica = { id: string; version: string; child: ChildProcess; startedAt: number; stopping: boolean; exited: Promise<void> };
type Pool = { endpoint: EndpointRecord; wanted: number; replicas: Replica[]; failures: number; restartTimer?: NodeJS.Timeout };

const MAX_BACKOFF_MS = 30_000;
/** A replica that lived this long resets the failure count. */
const HEALTHY_UPTIME_MS = 60_000;

export class LocalBackend implements ReplicaBackend {
  readonly kind = "local" as const;
  private readonly options: LocalBackendOptions;
  private readonly pools = new Map<string, Pool>();
  private closed = false;

  constructor(options: LocalBackendOptions) {
    this.options = options;
    mkdirSync(options.logDir, { recursive: true });
  }

  async scale(endpoint: EndpointRecord, replicas: number): Promise<void> {
    let pool = this.pools.get(endpoint.name);
    if (!pool) {
      pool = { endpoint, wanted: replicas, replicas: [], failures: 0 };
      this.pools.set(endpoint.name, pool);
    }
    pool.endpoint = endpoint;
    pool.wanted = replicas;
    // A new version replaces the old replicas: start the new ones first, then drain the old.
    const current = pool.replicas.filter((r) => !r.stopping && r.version === endpoint.version);
    const stale = pool.replicas.filter((r) => !r.stopping && r.version !== endpoint.version);
    if (pool.restartTimer === undefined) {
      for (let i = current.length; i < replicas; i++) this.start(pool);
    }
    for (const r of stale) void this.stop(pool, r);
    // Scale down newest first: older replicas have warm caches.
    for (const r of current.slice(replicas).reverse()) void this.stop(pool, r);
  }

  async observe(endpointName: string): Promise<BackendReplicas> {
    const pool = this.pools.get(endpointName);
    return { requested: pool ? pool.replicas.filter((r) => !r.stopping).length : 0 };
  }

  async remove(endpointName: string): Promise<void> {
    const pool = this.pools.get(endpointName);
    if (!pool) return;
    pool.wanted = 0;
    clearTimeout(pool.restartTimer);
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
    await Promise.all([...this.pools.keys()].map((name) => this.remove(name)));
  }

  /** The forced stop (a second Ctrl-C): SIGKILL every replica now; their jobs' locks lapse and BullMQ requeues them. */
  async kill(): Promise<void> {
    this.closed = true;
    const all = [...this.pools.values()].flatMap((pool) => {
      clearTimeout(pool.restartTimer);
      return pool.replicas;
    });
    for (const r of all) {
      r.stopping = true;
      r.child.kill("SIGKILL");
    }
    await Promise.all(all.map((r) => r.exited));
  }

  private start(pool: Pool): void {
    const id = `${pool.endpoint.name}-${randomBytes(4).toString("hex")}`;
    const [command, ...args] = this.options.workerCommand;
    const log = createWriteStream(join(this.options.logDir, `${id}.log`), { flags: "a" });
    const child = spawn(command, [...args, "--endpoint", pool.endpoint.name, "--replica-id", id], {
      env: { ...this.options.env, PLATFORM_EXIT_WITH_PARENT: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      // Own process group: a terminal's Ctrl-C reaches `up`, which drains replicas in order.
      detached: true,
    });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    const replica: Replica = { id, version: pool.endpoint.version, child, startedAt: Date.now(), stopping: false, exited };
    pool.replicas.push(replica);
    this.options.onEvent?.(`replica ${id} starting (pid ${child.pid}, log ${join(this.options.logDir, `${id}.log`)})`);
    child.once("exit", (code, signal) => void this.onExit(pool, replica, code, signal));
  }

  private onExit(pool: Pool, replica: Replica, code: number | null, signal: NodeJS.Signals | null): void {
    pool.replicas = pool.replicas.filter((r) => r !== replica);
    if (replica.stopping || this.closed) return;
    const lived = Date.now() - replica.startedAt;
    pool.failures = lived > HEALTHY_UPTIME_MS ? 1 : pool.failures + 1;
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** (pool.failures - 1));
    this.options.onEvent?.(`replica ${replica.id} exited (${signal ?? `code ${code}`}); replacing it in ${delay} ms`);
    clearTimeout(pool.restartTimer);
    pool.restartTimer = setTimeout(() => {
      pool.restartTimer = undefined;
      if (!this.closed && this.pools.get(pool.endpoint.name) === pool) void this.scale(pool.endpoint, pool.wanted);
    }, delay);
    // Died on its own: drop its heartbeat now rather than waiting for its TTL. Exit code 1 is a
    // failed start, whose "failed" record stays so that `status` can say why.
    if (code !== 1) void removeReplica(this.options.ctl, pool.endpoint.name, replica.id).catch(() => undefined);
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
