/**
 * Services on this machine (`platform up`; docs/services.md, "Local backend"): each replica is a
 * process started from the published image (scaler/container-images/: pulled by digest, verified, unpacked,
 * run unprivileged in a sandbox with a network of its own), its port forwarded to a free port of
 * the host's loopback, where only the platform listens. A rollout starts the
 * new release's replicas beside the serving ones, waits for each to pass its health check (GET
 * /readyz for Connect services, grpc.health.v1 Check for gRPC ones), then ends the rollout; the old
 * replicas are marked draining (the gateways stop routing to them), given DRAIN_DELAY_MS for the
 * notice to arrive, and stopped with SIGTERM (the scaffolds finish calls in flight). A new replica
 * that exits or is not ready within the rollout's deadline fails the rollout and the old release
 * keeps serving. A serving replica that crashes is restarted with exponential back-off.
 */
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import { createInterface } from "node:readline";
import { freePort } from "../../../src/process/free-port.ts";
import { serviceKey } from "../../../src/services/store.ts";
import type { ServiceBackend, ServiceRecord, ServiceReplica, ServiceReports } from "./backend.ts";
import { backoffDelay, nextFailures } from "../backoff.ts";

/** How a published image becomes a process (scaler/container-images/; tests stand in host processes). */
export interface ImageRunner {
  /**
   * Pulls, verifies and unpacks the image (once per digest) with `org`'s pull credential; rejects
   * with a reason a user can act on.
   */
  prepare(repository: string, digest: string, org: string): Promise<unknown>;
  /**
   * Starts the image's command with exactly `env` added to the image's own, in a process group of
   * its own; each of `ports` (PORT, METRICS_PORT) is reachable on the host's 127.0.0.1, and nothing else of it.
   */
  spawn(prepared: unknown, env: Record<string, string>, ports: number[]): ChildProcess;
}

export type LocalServicesOptions = {
  reports: ServiceReports;
  runner: ImageRunner;
  onEvent?: (message: string) => void;
  /** How long draining replicas stay up after the gateways are told (the notice's way through Redis). */
  drainDelayMs?: number;
  /** How long a stopped replica may take to exit before it is killed. */
  stopTimeoutMs?: number;
};

type Proc = {
  id: string;
  revision: string;
  tag: string;
  digest: string;
  child?: ChildProcess;
  url: string;
  metricsUrl?: string;
  state: ServiceReplica["state"];
  started: number;
  readyAt?: number;
  restarts: number;
  /** Consecutive failed starts, for the back-off; reset by a long enough life. */
  failures: number;
  lastExit?: ServiceReplica["last_exit"];
  /** Set when it exited before becoming ready: what a failed rollout reports. */
  startFailure?: string;
  lastProbe?: string;
  tail: string[];
  stopping: boolean;
  exited?: Promise<void>;
  timer?: NodeJS.Timeout;
};

type Svc = { record: ServiceRecord; procs: Proc[] };

const TAIL_LINES = 20;
const PROBE_MS = 300;

export class LocalServiceBackend implements ServiceBackend {
  readonly kind = "local" as const;
  private readonly options: LocalServicesOptions;
  private readonly running = new Map<string, Svc>();
  private closed = false;

  constructor(options: LocalServicesOptions) {
    this.options = options;
  }

  private get reports() {
    return this.options.reports;
  }

  private event(message: string) {
    this.options.onEvent?.(message);
  }

  async apply(record: ServiceRecord): Promise<void> {
    if (this.closed) return;
    const key = serviceKey(record.org, record.name);
    let svc = this.running.get(key);
    if (!svc) {
      svc = { record, procs: [] };
      this.running.set(key, svc);
    }
    svc.record = record;
    const { rollout, current } = record;
    const target = rollout.release;
    // Which releases run: the rollout's beside the serving one while it progresses, else the serving one.
    const wanted = new Map<string, ServiceRecord["current"]>();
    if (rollout.phase === "progressing") wanted.set(target.revision, target);
    if (current) wanted.set(current.revision, current);

    for (const p of svc.procs) if (!p.stopping && !wanted.has(p.revision)) void this.stop(svc, p, true);
    for (const [revision, release] of wanted) {
      if (!release) continue;
      const mine = svc.procs.filter((p) => !p.stopping && p.revision === revision);
      for (let i = mine.length; i < record.replicas; i++) this.start(svc, release);
      for (const p of mine.slice(record.replicas).reverse()) void this.stop(svc, p, true);
    }
    if (rollout.phase === "progressing") await this.judge(svc);
    // Every replica's record rewritten: the heartbeat the gateways' freshness check reads.
    const now = Date.now();
    await Promise.all(
      svc.procs.filter((p) => !p.stopping || p.state === "draining").map((p) => this.report(svc, p, now)),
    );
  }

  /** Ends a progressing rollout when its replicas are ready, one failed to start, or the deadline passed. */
  private async judge(svc: Svc): Promise<void> {
    const { record } = svc;
    const { rollout } = record;
    const mine = svc.procs.filter((p) => !p.stopping && p.revision === rollout.release.revision);
    const failed = mine.find((p) => p.startFailure);
    const finish = (outcome: Parameters<ServiceReports["rolloutFinished"]>[3]) =>
      this.reports.rolloutFinished(record.org, record.name, rollout.id, outcome);
    if (failed?.startFailure) {
      this.event(
        `${record.name}: rollout ${rollout.id} (${rollout.release.tag}) failed: ${failed.startFailure.split("\n")[0]}`,
      );
      return finish({ phase: "failed", reason: failed.startFailure });
    }
    if (mine.length >= record.replicas && mine.filter((p) => p.state === "ready").length >= record.replicas) {
      this.event(`${record.name}: rollout ${rollout.id} complete: ${rollout.release.tag} serves`);
      return finish({ phase: "complete" });
    }
    if (Date.now() - rollout.started > rollout.deadline_ms) {
      const waiting = mine.find((p) => p.state !== "ready");
      const why = waiting
        ? `replica ${waiting.id} not ready within ${Math.round(rollout.deadline_ms / 1000)} s${waiting.lastProbe ? `: ${waiting.lastProbe}` : ""}${tailText(waiting)}`
        : `replicas not started within ${Math.round(rollout.deadline_ms / 1000)} s`;
      this.event(`${record.name}: rollout ${rollout.id} (${rollout.release.tag}) failed: ${why.split("\n")[0]}`);
      return finish({ phase: "failed", reason: why });
    }
  }

  private start(svc: Svc, release: NonNullable<ServiceRecord["current"]>): void {
    const { record } = svc;
    const proc: Proc = {
      id: `${record.name}-${release.revision}-${randomBytes(3).toString("hex")}`,
      revision: release.revision,
      tag: release.tag,
      digest: release.digest,
      url: "",
      state: "starting",
      started: Date.now(),
      restarts: 0,
      failures: 0,
      tail: [],
      stopping: false,
    };
    svc.procs.push(proc);
    void this.launch(svc, proc);
  }

  /** Starts (or restarts) the process of `proc`; a failure is recorded on it, never thrown. */
  private async launch(svc: Svc, proc: Proc): Promise<void> {
    const { org, name, image_repository, repo_type } = svc.record;
    try {
      const [env, prepared, port, metricsPort] = await Promise.all([
        this.reports.environment(org, name, proc.revision),
        this.options.runner.prepare(image_repository, proc.digest, org),
        freePort(),
        repo_type === "python" ? freePort() : Promise.resolve(undefined),
      ]);
      if (proc.stopping || this.closed) return;
      proc.url = `http://127.0.0.1:${port}`;
      proc.metricsUrl = metricsPort === undefined ? `${proc.url}/metrics` : `http://127.0.0.1:${metricsPort}/metrics`;
      const child = this.options.runner.spawn(
        prepared,
        {
          ...env,
          PORT: String(port),
          HOST: "127.0.0.1",
          ...(metricsPort === undefined ? {} : { METRICS_PORT: String(metricsPort) }),
        },
        metricsPort === undefined ? [port] : [port, metricsPort],
      );
      proc.child = child;
      proc.started = Date.now();
      proc.state = "starting";
      this.event(`${name}: started replica ${proc.id} (${proc.tag}) on ${proc.url}`);
      for (const stream of [child.stdout, child.stderr]) {
        if (!stream) continue;
        createInterface({ input: stream }).on("line", (text) => {
          proc.tail.push(text);
          if (proc.tail.length > TAIL_LINES) proc.tail.shift();
          void this.reports.log(org, name, { replica: proc.id, tag: proc.tag, text }).catch(() => undefined);
        });
      }
      proc.exited = new Promise((resolve) => {
        child.once("exit", (code, signal) => {
          resolve();
          void this.exited(svc, proc, code, signal);
        });
        child.once("error", (e) => {
          proc.tail.push(e.message);
          resolve();
          void this.exited(svc, proc, null, null);
        });
      });
      this.probe(svc, proc);
    } catch (e) {
      const message = (e as Error).message;
      if (/not written yet/.test(message)) {
        // The rollout is still writing its environment: the next reconcile starts it again.
        svc.procs = svc.procs.filter((p) => p !== proc);
        return;
      }
      proc.startFailure = `replica ${proc.id} could not start: ${message}`;
      proc.lastProbe = message;
      this.crashed(svc, proc);
    }
  }

  private probe(svc: Svc, proc: Proc): void {
    const check = async () => {
      if (proc.stopping || proc.state !== "starting" || !proc.child || proc.child.exitCode !== null) return;
      const failure = await (svc.record.repo_type === "python" ? grpcHealth(proc.url) : httpReady(proc.url));
      if (proc.stopping || proc.state !== "starting") return;
      if (failure === undefined) {
        proc.state = "ready";
        proc.readyAt = Date.now();
        this.event(`${svc.record.name}: replica ${proc.id} (${proc.tag}) is ready`);
        await this.report(svc, proc);
        if (svc.record.rollout.phase === "progressing") await this.judge(svc);
        return;
      }
      proc.lastProbe = failure;
      proc.timer = setTimeout(() => void check(), PROBE_MS);
    };
    proc.timer = setTimeout(() => void check(), PROBE_MS);
  }

  private async exited(svc: Svc, proc: Proc, code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    clearTimeout(proc.timer);
    proc.lastExit = { code, signal, at: Date.now() };
    if (proc.stopping) return;
    const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
    this.event(`${svc.record.name}: replica ${proc.id} (${proc.tag}) ${how}`);
    if (
      proc.state === "starting" &&
      svc.record.rollout.phase === "progressing" &&
      proc.revision === svc.record.rollout.release.revision
    ) {
      // A new release that cannot start fails its rollout at once: no point waiting for the deadline.
      proc.startFailure = `replica ${proc.id} ${how} before becoming ready${tailText(proc)}`;
      await this.judge(svc);
      return;
    }
    this.crashed(svc, proc);
  }

  /** Restarts a replica that died, backing off while it keeps dying young. */
  private crashed(svc: Svc, proc: Proc): void {
    if (proc.stopping || this.closed) return;
    const lived = Date.now() - proc.started;
    proc.failures = nextFailures(proc.failures, lived);
    proc.state = "crashed";
    proc.child = undefined;
    void this.report(svc, proc);
    const delay = backoffDelay(proc.failures);
    proc.timer = setTimeout(() => {
      if (proc.stopping || this.closed) return;
      proc.restarts++;
      proc.startFailure = undefined;
      void this.launch(svc, proc);
    }, delay);
  }

  /** Drains (gateways told first, `drain`), then SIGTERM to the group, SIGKILL after the timeout. */
  private async stop(svc: Svc, proc: Proc, drain: boolean): Promise<void> {
    if (proc.stopping) return;
    proc.stopping = true;
    clearTimeout(proc.timer);
    const { org, name } = svc.record;
    if (drain && proc.state === "ready") {
      proc.state = "draining";
      await this.report(svc, proc).catch(() => undefined);
      await sleep(this.options.drainDelayMs ?? 1500);
    }
    const child = proc.child;
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      signalGroup(child, "SIGTERM");
      const killer = setTimeout(() => signalGroup(child, "SIGKILL"), this.options.stopTimeoutMs ?? 30_000);
      await proc.exited;
      clearTimeout(killer);
    }
    svc.procs = svc.procs.filter((p) => p !== proc);
    await this.reports.replicaGone(org, name, proc.id).catch(() => undefined);
  }

  private async report(svc: Svc, proc: Proc, now = Date.now()): Promise<void> {
    if (!proc.url) return;
    const { org, name } = svc.record;
    await this.reports
      .replica(org, name, {
        id: proc.id,
        revision: proc.revision,
        tag: proc.tag,
        digest: proc.digest,
        state: proc.state,
        url: proc.url,
        ...(proc.metricsUrl ? { metrics_url: proc.metricsUrl } : {}),
        started: proc.started,
        ...(proc.readyAt ? { ready_at: proc.readyAt } : {}),
        restarts: proc.restarts,
        ...(proc.lastExit ? { last_exit: proc.lastExit } : {}),
        heartbeat: now,
      })
      .catch(() => undefined);
  }

  async remove(org: string, name: string): Promise<void> {
    const key = serviceKey(org, name);
    const svc = this.running.get(key);
    if (!svc) return;
    this.running.delete(key);
    await Promise.all(svc.procs.map((p) => this.stop(svc, p, false)));
    this.event(`${name}: removed`);
  }

  services(): string[] {
    return [...this.running.keys()];
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running.values()].flatMap((svc) => svc.procs.map((p) => this.stop(svc, p, false))));
    this.running.clear();
  }
}

function tailText(proc: Proc): string {
  return proc.tail.length > 0 ? `; its last lines:\n${proc.tail.slice(-10).join("\n")}` : "";
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    child.kill(signal);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** undefined when GET /readyz answers 200; else what it answered. */
function httpReady(url: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = http.get(`${url}/readyz`, { timeout: 2000 }, (res) => {
      let body = "";
      res.on("data", (d) => {
        if (body.length < 500) body += d;
      });
      res.on("end", () =>
        resolve(res.statusCode === 200 ? undefined : `GET /readyz answered ${res.statusCode} ${body.trim()}`),
      );
    });
    req.on("timeout", () => req.destroy(new Error("no answer within 2 s")));
    req.on("error", (e) => resolve(`GET /readyz: ${(e as NodeJS.ErrnoException).code ?? e.message}`));
  });
}

/** undefined when grpc.health.v1.Health/Check (the server as a whole) answers SERVING; else what it answered. */
function grpcHealth(url: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const session = http2.connect(url);
    const done = (why: string | undefined) => {
      session.close();
      resolve(why);
    };
    session.on("error", (e) => done(`gRPC health check: ${(e as NodeJS.ErrnoException).code ?? e.message}`));
    session.setTimeout(2000, () => done("gRPC health check: no answer within 2 s"));
    const req = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/grpc",
      te: "trailers",
    });
    const chunks: Buffer[] = [];
    let status: string | undefined;
    req.on("response", (headers) => {
      if (headers["grpc-status"] !== undefined) status = String(headers["grpc-status"]);
    });
    req.on("trailers", (trailers) => {
      status = String(trailers["grpc-status"]);
    });
    req.on("data", (d: Buffer) => chunks.push(d));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      // A 5-byte frame header, then HealthCheckResponse: field 1 (status), varint; SERVING = 1.
      if (status === "0" && body.length >= 7 && body[5] === 0x08 && body[6] === 0x01) return done(undefined);
      done(`gRPC health check: status ${status ?? "none"}, ${body[6] === 0x02 ? "NOT_SERVING" : "not SERVING"}`);
    });
    req.on("error", (e) => done(`gRPC health check: ${e.message}`));
    req.end(Buffer.from([0, 0, 0, 0, 0]));
  });
}
