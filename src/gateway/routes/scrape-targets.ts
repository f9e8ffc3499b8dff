/**
 * `GET /admin/v1/scrape-targets`: what a Prometheus should scrape, in its HTTP service-discovery
 * format (`http_sd_configs`): this gateway (its metrics port) and every live replica that serves /metrics (a
 * health port in its heartbeat record). On one machine (`platform up` with
 * PLATFORM_WORKER_METRICS) that finds the workers' ephemeral ports; in Kubernetes, PodMonitors
 * (deploy/prometheus/) find pods directly and this route is not needed. Deployed services'
 * replicas are listed too, each at its own `/metrics` (docs/services.md, "Metrics"): Prometheus
 * scrapes them directly, no federation.
 */
import { hostname } from "node:os";
import { Hono } from "hono";
import { listEndpoints } from "../../endpoints/store.ts";
import type { Control } from "../../redis/connection.ts";
import { readReplicas } from "../../services/replicas.ts";
import { readAllServices } from "../../services/store.ts";
import { listReplicas } from "../../replicas/heartbeats.ts";
import type { GatewayEnv } from "../env.ts";

type TargetGroup = { targets: string[]; labels: Record<string, string> };

/** `gatewayUrl`: where the gateway's own metrics are read (its metrics port). */
export function scrapeTargetRoutes(ctl: Control, gatewayUrl: () => string) {
  const app = new Hono<GatewayEnv>();
  app.get("/", async (c) => {
    const groups: TargetGroup[] = [{ targets: [new URL(gatewayUrl()).host], labels: { platform_role: "gateway" } }];
    const here = hostname();
    for (const endpoint of await listEndpoints(ctl)) {
      for (const r of await listReplicas(ctl, endpoint.name)) {
        if (r.health_port === undefined) continue;
        // A replica on this machine is reached on loopback: its host name may not resolve here.
        const host = r.host === here ? "127.0.0.1" : r.host;
        groups.push({
          targets: [`${host}:${r.health_port}`],
          // Not model_name/version/replica: the worker's own series carry those, and target labels of the same name would displace them.
          labels: { platform_role: "worker", platform_replica: r.id },
        });
      }
    }
    for (const service of (await readAllServices(ctl)).services) {
      for (const r of await readReplicas(ctl, service.org, service.name)) {
        if (!r.metrics_url) continue;
        const url = new URL(r.metrics_url);
        groups.push({
          targets: [url.host],
          labels: {
            platform_role: "service",
            platform_org: service.org,
            platform_service: service.name,
            platform_replica: r.id,
            __metrics_path__: url.pathname,
          },
        });
      }
    }
    return c.json(groups);
  });
  return app;
}
