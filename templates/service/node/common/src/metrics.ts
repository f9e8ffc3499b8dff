/**
 * Prometheus metrics, served at /metrics: per RPC, how many calls, how many failed (by Connect
 * code) and how long they took; plus Node's process metrics. The platform's dashboards and alerts
 * on error rate and latency read these names.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Counter, collectDefaultMetrics, Histogram, Registry } from "prom-client";

/** The code as Connect and gRPC write it on the wire (`Code.NotFound` → `not_found`). */
export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

export type Metrics = { registry: Registry; interceptor: Interceptor };

export function createMetrics(): Metrics {
  // A registry of its own, not prom-client's global one: tests start several servers in one process.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const labelNames = ["service", "method", "code"] as const;
  const requests = new Counter({
    name: "rpc_server_requests_total",
    help: "RPCs handled, by service, method and result code (ok or the Connect error code)",
    labelNames,
    registers: [registry],
  });
  const errors = new Counter({
    name: "rpc_server_errors_total",
    help: "RPCs that failed, by service, method and Connect error code",
    labelNames,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "rpc_server_duration_seconds",
    help: "Time to handle an RPC (for streaming responses: until the response starts), by service and method",
    labelNames: ["service", "method"],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });

  const interceptor: Interceptor = (next) => async (req) => {
    const labels = { service: req.service.typeName, method: req.method.name };
    const end = duration.startTimer(labels);
    try {
      const res = await next(req);
      requests.inc({ ...labels, code: "ok" });
      return res;
    } catch (e) {
      const code = codeName(ConnectError.from(e).code);
      requests.inc({ ...labels, code });
      errors.inc({ ...labels, code });
      throw e;
    } finally {
      end();
    }
  };
  return { registry, interceptor };
}
