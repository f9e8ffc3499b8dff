/**
 * The `/rpc/*` series on the gateway's `/metrics` (docs/services.md, "Metrics"): every call
 * counted by its Connect code (`ok` for success) and timed until its last byte, per
 * organization, deployed service and method. Labels name only services that resolved, so a
 * caller cannot grow the series by inventing paths.
 */
import { Counter, Histogram, type Registry } from "prom-client";

export type RpcLabels = { org: string; service: string; method: string };

/** Unary calls take milliseconds; server streams may run for minutes. */
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

export class RpcMetrics {
  private readonly requests: Counter<"org" | "service" | "method" | "code">;
  private readonly duration: Histogram<"org" | "service" | "method">;

  constructor(registry: Registry) {
    this.requests = new Counter({
      name: "platform_rpc_requests_total",
      help: "Calls through /rpc/ to deployed services, by Connect code (ok for success)",
      labelNames: ["org", "service", "method", "code"],
      registers: [registry],
    });
    this.duration = new Histogram({
      name: "platform_rpc_request_duration_seconds",
      help: "Calls through /rpc/, from the request to the response's last byte",
      labelNames: ["org", "service", "method"],
      buckets: BUCKETS,
      registers: [registry],
    });
  }

  observe(labels: RpcLabels, code: string, seconds: number): void {
    this.requests.inc({ ...labels, code });
    this.duration.observe(labels, seconds);
  }
}
