/**
 * A trainer's HTTP port (`platform trainer --health-port`), as a worker's (workers/health-server.ts):
 * /livez and /readyz for Kubernetes' probes, /metrics for Prometheus (docs/observability.md,
 * "Trainers"). Live while it serves; ready while it reads its queues and reaches Redis. Its metrics
 * use the workers' names where they mean the same (jobs ended, jobs failed by code) and say what
 * only a trainer has (jobs it trains now, by queue; whether it offers a GPU).
 */
import type { Server } from "node:http";
import { hostname } from "node:os";
import { Counter, Gauge, Registry } from "prom-client";
import { http } from "../../src/process/node-http.ts";

export type QueueKind = "cpu" | "gpu";

/** What the trainer tells its port: runs starting and ending, and its state. */
export class TrainerHealth {
  readonly registry = new Registry();
  /** This process: host and pid, the label every series carries. */
  readonly id = `${hostname()}-${process.pid}`;
  readonly running: Record<QueueKind, number> = { cpu: 0, gpu: 0 };
  /** `offersGpu`: takes GPU jobs; `serving`: reads its queues (false before it started and once it stops). */
  readonly state = { offersGpu: false, serving: false };
  private readonly redisReady: () => boolean;
  private readonly ended: Counter<"kind" | "status">;
  private readonly errors: Counter<"kind" | "code">;

  /** `redisReady`: whether its Redis connection is up now. */
  constructor(redisReady: () => boolean) {
    this.redisReady = redisReady;
    this.registry.setDefaultLabels({ trainer: this.id });
    const { running, state } = this;
    new Gauge({
      name: "platform_trainer_jobs_running",
      help: "Fine-tuning jobs this trainer trains now, by the queue it took them from",
      labelNames: ["queue"],
      registers: [this.registry],
      collect() {
        for (const queue of ["cpu", "gpu"] as const) this.set({ queue }, running[queue]);
      },
    });
    new Gauge({
      name: "platform_trainer_offers_gpu",
      help: "1 when this trainer takes GPU jobs (its torch sees a GPU and it was asked to offer one)",
      registers: [this.registry],
      collect() {
        this.set(state.offersGpu ? 1 : 0);
      },
    });
    this.ended = new Counter({
      name: "platform_requests_total",
      help: "Fine-tuning jobs this trainer ended, by how (succeeded, failed, cancelled)",
      labelNames: ["kind", "status"],
      registers: [this.registry],
    });
    this.errors = new Counter({
      name: "platform_request_errors_total",
      help: "Fine-tuning jobs this trainer failed, by error code",
      labelNames: ["kind", "code"],
      registers: [this.registry],
    });
  }

  /** A run ended on this trainer; handed-off runs (another trainer resumes them) are not an end. */
  finished(status: "succeeded" | "failed" | "cancelled", code?: string): void {
    this.ended.inc({ kind: "fine_tune", status });
    if (status === "failed") this.errors.inc({ kind: "fine_tune", code: code ?? "unknown" });
  }

  get ready(): boolean {
    return this.state.serving && this.redisReady();
  }

  /** Serves the probes and metrics on `port` (0: any free one); resolves the port once listening. */
  serve(port: number): Promise<{ server: Server; port: number }> {
    const server = http.createServer((req, res) => {
      if (req.url === "/metrics") {
        this.registry
          .metrics()
          .then((text) => {
            res.writeHead(200, { "content-type": this.registry.contentType });
            res.end(text);
          })
          .catch((e: unknown) => {
            res.writeHead(500, { "content-type": "text/plain" });
            res.end(`metrics unavailable: ${e instanceof Error ? e.message : String(e)}\n`);
          });
        return;
      }
      const probe = req.url === "/livez" || req.url === "/readyz";
      const ok = req.url === "/livez" || (req.url === "/readyz" && this.ready);
      res.writeHead(probe ? (ok ? 200 : 503) : 404, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          state: this.ready ? "ready" : this.state.serving ? "redis_unavailable" : "not_serving",
          trainer: this.id,
          running: this.running.cpu + this.running.gpu,
          offers_gpu: this.state.offersGpu,
        }),
      );
    });
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, () => resolve({ server, port: (server.address() as { port: number }).port }));
    });
  }
}
