/**
 * `platform_scaling_decisions_total{model_name,version,action}`. The scaler may run in another
 * process (or pod) than the gateway Prometheus scrapes, so the counts live in Redis and every
 * gateway reports the same totals at scrape time (dashboards take max, not sum).
 */
import { Counter, type Registry } from "prom-client";
import type { Endpoint } from "../endpoints/record.ts";
import { decisionCounts } from "./store.ts";
import type { Control } from "../redis/connection.ts";
import { servedOf } from "../telemetry/request-metrics.ts";

/** `endpoints`: the deployments now known, to label an A/B variant's decisions with its endpoint and version. */
export function registerScalingMetrics(registry: Registry, ctl: Control, endpoints: () => Promise<Endpoint[]>): void {
  new Counter({
    name: "platform_scaling_decisions_total",
    help: "Autoscaler decisions by action (scale_up, scale_down, hold), one per endpoint version per scaler tick",
    labelNames: ["model_name", "version", "action"],
    registers: [registry],
    async collect() {
      this.reset();
      const [counts, known] = await Promise.all([decisionCounts(ctl).catch(() => []), endpoints().catch(() => [])]);
      const byName = new Map(known.map((e) => [e.name, e]));
      for (const c of counts) {
        const endpoint = byName.get(c.endpoint);
        // A deployment deleted since keeps its counts under its own name.
        const served = endpoint ? servedOf(endpoint) : { model_name: c.endpoint, version: "" };
        this.inc({ ...served, action: c.action }, c.count);
      }
    },
  });
}
