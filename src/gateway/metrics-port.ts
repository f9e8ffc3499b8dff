/**
 * Where the gateway's Prometheus metrics are read (docs/observability.md, "The metrics port"):
 * a listener of its own (PLATFORM_METRICS_PORT) that serves only `/metrics`, for the scraper; and
 * `GET /admin/v1/metrics` on the API port for a key holder (the dashboard): an operator reads every
 * series, anyone else only its own organization's (series labelled `org="<its org>"`). The API
 * port's unauthenticated `/metrics` is off unless the operator turns it on
 * (PLATFORM_METRICS_ON_API_PORT): its labels name every organization's services, RPC methods and
 * adapters.
 */
import type { Server } from "node:http";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { Registry } from "prom-client";
import type { Caller } from "./env.ts";

/** The exposition `caller` may read: all of it for an operator, else its organization's series alone. */
export async function metricsFor(registry: Registry, caller: Pick<Caller, "org" | "operator">): Promise<string> {
  const text = await registry.metrics();
  if (caller.operator) return text;
  const own = `org="${caller.org}"`;
  // Comments (HELP, TYPE) stay, so the text parses; a sample stays when one of its labels is the org.
  return text
    .split("\n")
    .filter((line) => line.startsWith("#") || line === "" || labelsOf(line).includes(own))
    .join("\n");
}

/** A sample line's label set, `{…}`, as written (label values are escaped, so `org="a"` matches whole). */
function labelsOf(line: string): string[] {
  const open = line.indexOf("{");
  const close = line.lastIndexOf("}");
  if (open < 0 || close < open) return [];
  return line.slice(open + 1, close).split(/,(?=[a-zA-Z_][a-zA-Z0-9_]*=")/);
}

export type MetricsListener = { url: string; port: number; close: () => Promise<void> };

/** Serves `registry` at `http://<host>:<port>/metrics` (port 0: any free port) and nothing else. */
export async function serveMetrics(registry: Registry, host: string, port: number): Promise<MetricsListener> {
  const app = new Hono();
  app.get("/metrics", async (c) => c.text(await registry.metrics(), 200, { "content-type": registry.contentType }));
  app.notFound((c) => c.text("only /metrics is served on this port\n", 404));
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: host, port }, () => resolve(s as Server)) as Server;
    s.once("error", reject);
  });
  const address = server.address();
  const bound = typeof address === "object" && address ? address.port : port;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${bound}/metrics`,
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
