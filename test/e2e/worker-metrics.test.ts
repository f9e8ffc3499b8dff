/**
 * Workers' /metrics under `platform up` (PLATFORM_WORKER_METRICS): each worker serves it on a
 * free port it publishes in its heartbeat, and `GET /admin/v1/scrape-targets` lists the gateway
 * and those workers in Prometheus' HTTP service-discovery format.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { moved, scrape } from "../helpers/metrics-text.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type OwnStack, startStack } from "../helpers/stack.ts";

type TargetGroup = { targets: string[]; labels: Record<string, string> };
type Status = { replica_list: { id: string; health_port?: number }[] };

let withMetrics: OwnStack;

beforeAll(async () => {
  withMetrics = await startStack({
    model: await tinyModelPath(),
    args: ["--name", "tiny"],
    env: { PLATFORM_WORKER_METRICS: "true" },
  });
}, 120_000);

afterAll(async () => {
  await withMetrics?.stop();
});

const complete = (stack: OwnStack) =>
  fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", prompt: "Once upon a time", max_tokens: 3 }),
  });

describe("worker metrics under platform up", () => {
  it("lists the gateway and each worker as scrape targets, and the worker's /metrics counts what it served", async () => {
    await withMetrics.waitFor(
      async () =>
        (await withMetrics.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.replica_list.some(
          (r) => r.health_port !== undefined,
        ),
      "a worker with a health port",
    );
    const targets = (await withMetrics.admin<TargetGroup[]>("GET", "/admin/v1/scrape-targets")).body;
    expect(targets[0]).toEqual({
      targets: [new URL(withMetrics.metricsUrl).host],
      labels: { platform_role: "gateway" },
    });
    const workers = targets.filter((t) => t.labels.platform_role === "worker");
    expect(workers).toHaveLength(1);
    const worker = workers[0] as TargetGroup;
    const url = `http://${worker.targets[0]}/metrics`;
    const before = await scrape(url);
    for (let i = 0; i < 3; i++) expect((await complete(withMetrics)).status).toBe(200);
    const after = await scrape(url);
    expect(
      moved(before, after, "platform_requests_total", {
        model_name: "tiny",
        version: "v1",
        replica: worker.labels.platform_replica as string,
      }),
    ).toBe(3);
    // A user key may not list targets.
    const user = (await withMetrics.admin<{ key: string }>("POST", "/admin/v1/keys", { name: "u", role: "user" })).body
      .key;
    const refused = await fetch(`${withMetrics.baseUrl.replace(/\/v1$/, "")}/admin/v1/scrape-targets`, {
      headers: { authorization: `Bearer ${user}` },
    });
    expect(refused.status).toBe(403);
  });
});
