/**
 * The replica's HTTP port: /livez and /readyz for Kubernetes' probes, /metrics for Prometheus
 * (docs/observability.md). Only a worker given a health port serves them, and only it loads the
 * metrics (workers/metrics.ts), before its first job.
 */
import type { Server, ServerResponse } from "node:http";
import { http } from "../src/process/node-http.ts";
import { relabelExposition } from "./engine-metrics.ts";
import type { Engine } from "./engines/engine.ts";
import type { WorkerMetrics } from "./metrics.ts";
import type { WorkerState } from "./state.ts";

/** The replica's metrics, counting its held jobs as they are when scraped. */
export function loadMetrics(w: WorkerState): Promise<WorkerMetrics> {
  return import("./metrics.ts").then(
    ({ WorkerMetrics }) =>
      new WorkerMetrics(
        w.endpoint,
        w.replicaId,
        () => ({
          running: w.generating.size,
          waiting: w.inFlight.size - w.generating.size,
        }),
        () => w.engine?.adapterStats?.(),
      ),
  );
}

/** `beat`: the heartbeat's, to publish the port (port 0 asks for any free one) once it is known. */
export function serveHealth(
  w: WorkerState,
  port: number,
  metrics: Promise<WorkerMetrics> | undefined,
  beat: () => Promise<void>,
): Server {
  const server = http.createServer((req, res) => {
    if (req.url === "/metrics" && metrics) return void serveMetrics(metrics, w.engine, res);
    const ok = req.url === "/livez" ? w.state !== "failed" : req.url === "/readyz" ? w.state === "ready" : false;
    res.writeHead(req.url === "/livez" || req.url === "/readyz" ? (ok ? 200 : 503) : 404, {
      "content-type": "application/json",
    });
    res.end(JSON.stringify({ state: w.state, replica: w.replicaId }));
  });
  return server.listen(port, () => {
    w.healthPort = (server.address() as { port: number } | null)?.port;
    void beat(); // published at once: a scraper finds the replica by its record
  });
}

/** The replica's metrics, then its engine's own (vLLM's) with the replica's labels; an engine that cannot answer only loses its part. */
function serveMetrics(loaded: Promise<WorkerMetrics>, engine: Engine | undefined, res: ServerResponse): void {
  loaded
    .then(async (m) => {
      const own = await m.registry.metrics();
      const names = new Set(m.registry.getMetricsAsArray().map((metric) => metric.name));
      const engineText = engine?.metrics
        ? await engine
            .metrics()
            .then((text) => relabelExposition(text, m.labels, names))
            .catch(() => "")
        : "";
      res.writeHead(200, { "content-type": m.registry.contentType });
      res.end(engineText ? `${own}\n${engineText}` : own);
    })
    .catch((e: unknown) => {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(`metrics unavailable: ${e instanceof Error ? e.message : String(e)}\n`);
    });
}
