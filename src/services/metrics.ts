/**
 * Services' replica gauges on the gateway's `/metrics` (docs/services.md, "Metrics"):
 * `platform_service_replicas{org,service,state}` and `platform_service_replicas_desired{org,service}`,
 * read at scrape time from the directory (every gateway reports the same values: take max, not
 * sum). The availability alert compares the two.
 */
import { Gauge, type Registry } from "prom-client";
import type { ServiceDirectory } from "./directory.ts";

const STATES = ["starting", "ready", "draining", "crashed"] as const;

export function registerServiceMetrics(registry: Registry, directory: Pick<ServiceDirectory, "all">): void {
  let snapshot: ReturnType<ServiceDirectory["all"]> | undefined;
  // Both gauges are collected in one scrape: one directory read serves them.
  const read = () => {
    snapshot ??= directory.all().finally(() => setTimeout(() => (snapshot = undefined), 100));
    return snapshot;
  };
  new Gauge({
    name: "platform_service_replicas",
    help: "Replicas of each deployed service by state (starting, ready, draining, crashed)",
    labelNames: ["org", "service", "state"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const { record, replicas } of await read().catch(() => [])) {
        for (const state of STATES)
          this.set({ org: record.org, service: record.name, state }, replicas.filter((r) => r.state === state).length);
      }
    },
  });
  new Gauge({
    name: "platform_service_replicas_desired",
    help: "Replicas each deployed service should have",
    labelNames: ["org", "service"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const { record } of await read().catch(() => []))
        this.set({ org: record.org, service: record.name }, record.replicas);
    },
  });
}
