/**
 * The services' alerting rules (deploy/prometheus/alerts.yml, group platform-services) in a real
 * Prometheus (Debian's package): a tiny HTTP server in the test exposes the gateway's series for
 * a few services (one failing, one slow, one down, one short of replicas, one healthy), moving
 * its counters at each scrape. The rules as shipped load and turn pending for exactly the
 * services they are about; a copy of the same expressions without `for:` fires, so the alerts
 * are shown to fire without waiting minutes. Skipped, with a message, where the `prometheus`
 * binary is absent (.ci/run installs it).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { type Alert, prometheusBinary, type RunningPrometheus, startPrometheus } from "../helpers/prometheus.ts";
import { holdsWithin } from "../helpers/wait.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const RULES = join(ROOT, "deploy/prometheus/alerts.yml");
const binary = prometheusBinary();
if (!binary)
  console.warn(
    "prometheus-services.test: no `prometheus` binary on PATH (Debian: apt-get install prometheus; .ci/run installs it); skipping",
  );

type Rule = { alert: string; expr: string; for?: string; labels?: Record<string, string> };
type Group = { name: string; rules: Rule[] };

/** What each scrape adds per service: calls by code, and latency bucket counts (cumulative, as exposed). */
const TRAFFIC: Record<string, { codes: Record<string, number>; buckets: Record<string, number> }> = {
  // 2% server faults: above 14.4 x the 0.1% budget in both windows.
  flaky: { codes: { ok: 98, unavailable: 2 }, buckets: { "0.1": 100, "1": 100, "2.5": 100, "+Inf": 100 } },
  // A tenth of its calls in 1-2.5 s: p99 about 2.35 s.
  slow: { codes: { ok: 100 }, buckets: { "0.1": 90, "1": 90, "2.5": 100, "+Inf": 100 } },
  // Many client errors: no budget spent.
  healthy: { codes: { ok: 50, not_found: 50 }, buckets: { "0.1": 100, "1": 100, "2.5": 100, "+Inf": 100 } },
};
/** Desired and ready replicas per service, as the gateway reads them from Redis. */
const REPLICAS: Record<string, { desired: number; ready: number }> = {
  down: { desired: 2, ready: 0 },
  short: { desired: 2, ready: 1 },
  healthy: { desired: 2, ready: 2 },
  flaky: { desired: 1, ready: 1 },
  slow: { desired: 1, ready: 1 },
};

/** The gateway's series for these services, in the text format, counters moved by one scrape's worth. */
function exposition(scrape: number): string {
  const lines = [
    "# TYPE platform_rpc_requests_total counter",
    ...Object.entries(TRAFFIC).flatMap(([service, t]) =>
      Object.entries(t.codes).map(
        ([code, n]) =>
          `platform_rpc_requests_total{org="acme",service="${service}",method="items.v1.Items/List",code="${code}"} ${n * scrape}`,
      ),
    ),
    "# TYPE platform_rpc_request_duration_seconds histogram",
    ...Object.entries(TRAFFIC).flatMap(([service, t]) => [
      ...Object.entries(t.buckets).map(
        ([le, n]) =>
          `platform_rpc_request_duration_seconds_bucket{org="acme",service="${service}",method="items.v1.Items/List",le="${le}"} ${n * scrape}`,
      ),
      `platform_rpc_request_duration_seconds_sum{org="acme",service="${service}",method="items.v1.Items/List"} ${scrape}`,
      `platform_rpc_request_duration_seconds_count{org="acme",service="${service}",method="items.v1.Items/List"} ${t.buckets["+Inf"]! * scrape}`,
    ]),
    "# TYPE platform_service_replicas gauge",
    ...Object.entries(REPLICAS).flatMap(([service, r]) => [
      `platform_service_replicas{org="acme",service="${service}",state="ready"} ${r.ready}`,
      `platform_service_replicas{org="acme",service="${service}",state="crashed"} ${r.desired - r.ready}`,
    ]),
    "# TYPE platform_service_replicas_desired gauge",
    ...Object.entries(REPLICAS).map(
      ([service, r]) => `platform_service_replicas_desired{org="acme",service="${service}"} ${r.desired}`,
    ),
  ];
  return `${lines.join("\n")}\n`;
}

describe.skipIf(!binary)("the services' alerting rules in a real Prometheus", () => {
  let server: Server;
  let prometheus: RunningPrometheus;
  let dir: string;
  let scrapes = 0;

  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url !== "/metrics") {
        res.writeHead(404).end();
        return;
      }
      scrapes += 1;
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(exposition(scrapes));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    // The shipped group as it is, and a copy that fires at once: the same expressions, no `for:`.
    const groups = (parse(await readFile(RULES, "utf8")) as { groups: Group[] }).groups;
    const services = groups.find((g) => g.name === "platform-services")!;
    const immediate: Group = {
      name: "platform-services-immediate",
      rules: services.rules.map(({ for: _for, ...rule }) => ({
        ...rule,
        labels: { ...rule.labels, copy: "immediate" },
      })),
    };
    dir = await mkdtemp(join(tmpdir(), "platform-service-rules-"));
    await writeFile(join(dir, "immediate.yml"), stringify({ groups: [immediate] }));
    prometheus = await startPrometheus(binary as string, {
      jobs: [{ job: "platform-gateway", targets: [`127.0.0.1:${(server.address() as AddressInfo).port}`] }],
      ruleFiles: [RULES, join(dir, "immediate.yml")],
    });
  }, 120_000);

  afterAll(async () => {
    await prometheus?.stop();
    server?.closeAllConnections();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const names = (alerts: Alert[]) =>
    alerts.map((a) => `${a.labels.alertname} ${a.labels.org}/${a.labels.service} ${a.state}`).sort();

  it("each alert fires for the service it is about, and none for the healthy one", { timeout: 90_000 }, async () => {
    const expected = (state: string) =>
      [
        `PlatformServiceHighErrorRate acme/flaky ${state}`,
        `PlatformServiceHighLatencyP99 acme/slow ${state}`,
        `PlatformServiceReplicasBelowDesired acme/down ${state}`,
        `PlatformServiceReplicasBelowDesired acme/short ${state}`,
        `PlatformServiceUnavailable acme/down ${state}`,
      ].sort();
    let copies: string[] = [];
    let shipped: string[] = [];
    // Rates need two samples in their window: a few scrapes (one a second) and evaluations.
    await holdsWithin(
      async () => {
        const alerts = await prometheus.alerts();
        copies = names(alerts.filter((a) => a.labels.copy === "immediate"));
        shipped = names(alerts.filter((a) => a.labels.copy === undefined));
        return JSON.stringify(copies) === JSON.stringify(expected("firing")) && shipped.length === copies.length;
      },
      60_000,
      500,
    );
    expect(copies, `prometheus output:\n${prometheus.output()}`).toEqual(expected("firing"));
    // The rules as shipped are loaded and true for the same services, held back by their `for:`.
    expect(shipped).toEqual(expected("pending"));
    expect(scrapes).toBeGreaterThanOrEqual(2);
  });
});
