/**
 * `GET /admin/v1/scrape-targets`: what a Prometheus should scrape, in its HTTP service-discovery
 * format (`http_sd_configs`): this gateway and every live replica that serves /metrics (a
 * health port in its heartbeat record). On one machine (`platform up` with
 * PLATFORM_WORKER_METRICS) that finds the workers' ephemeral ports; in Kubernetes, PodMonitors
 * (deploy/prometheus/) find pods directly and this route is not needed.
 */
import { hostname } from "node:os";
import { Hono } from "hono";
import { listEndpoints } from "../../endpoints/store.ts";
import type { Control } from "../../redis/connection.ts";
import { listReplicas } from "../../replicas/heartbeats.ts";
import type { GatewayEnv } from "../env.ts";

type TargetGroup = { targets: string[]; labels: Record<string, string> };

export function scrapeTargetRoutes(ctl: Control, baseUrl: () => string) {
  const app = new Hono<GatewayEnv>();
  app.get("/", async (c) => {
    const groups: TargetGroup[] = [{ targets: [new URL(baseUrl()).host], labels: { platform_role: "gateway" } }];
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
    return c.json(groups);
  });
  return app;
}
