/**
 * `platform_scaling_decisions_total{model_name,action}`. The scaler may run in
 * another process (or pod) than the gateway Prometheus scrapes, so the counts
 * live in Redis and every gateway reports the same totals at scrape time.
 */
import { Counter, type Registry } from "prom-client";
import { decisionCounts } from "../control/autoscaling.ts";
import type { Control } from "../control/redis.ts";

export function registerScalingMetrics(registry: Registry, ctl: Control): void {
  new Counter({
    name: "platform_scaling_decisions_total",
    help: "Autoscaler decisions by action (scale_up, scale_down, hold), one per endpoint per scaler tick",
    labelNames: ["model_name", "action"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const c of await decisionCounts(ctl).catch(() => [])) this.inc({ model_name: c.endpoint, action: c.action }, c.count);
    },
  });
}
