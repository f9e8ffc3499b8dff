/**
 * Workers' /metrics under `platform up` (PLATFORM_WORKER_METRICS, on for the shared stack): each
 * worker serves it on a free port it publishes in its heartbeat, and `GET /admin/v1/scrape-targets`
 * lists the gateway and those workers in Prometheus' HTTP service-discovery format.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { moved, scrape } from "../helpers/metrics-text.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";

type TargetGroup = { targets: string[]; labels: Record<string, string> };
type Status = { replica_list: { id: string; health_port?: number }[] };

const MODEL = unique("tiny");
let stack: Stack;

beforeAll(async () => {
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: await tinyModelPath() });
}, 120_000);

afterAll(() => undeploy(stack, MODEL));

const complete = (stack: Stack) =>
  fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt: "Once upon a time", max_tokens: 3 }),
  });

describe("worker metrics under platform up", () => {
  it("lists the gateway and each worker as scrape targets, and the worker's /metrics counts what it served", async () => {
    await stack.waitFor(
      async () =>
        (await stack.admin<Status>("GET", `/admin/v1/endpoints/${MODEL}`)).body.replica_list.some(
          (r) => r.health_port !== undefined,
        ),
      "a worker with a health port",
    );
    const targets = (await stack.admin<TargetGroup[]>("GET", "/admin/v1/scrape-targets")).body;
    expect(targets[0]).toEqual({
      targets: [new URL(stack.metricsUrl).host],
      labels: { platform_role: "gateway" },
    });
    // The shared stack's other files have workers of their own: this file's is its endpoint's replica.
    const { replica_list } = (await stack.admin<Status>("GET", `/admin/v1/endpoints/${MODEL}`)).body;
    expect(replica_list).toHaveLength(1);
    const replica = replica_list[0] as Status["replica_list"][number];
    const workers = targets.filter((t) => t.labels.platform_role === "worker");
    expect(workers.every((w) => w.targets.length === 1 && w.labels.platform_replica)).toBe(true);
    const mine = workers.filter((t) => t.labels.platform_replica === replica.id);
    expect(mine).toHaveLength(1);
    expect(mine[0]?.targets[0]).toMatch(new RegExp(`:${replica.health_port}$`));
    const worker = mine[0] as TargetGroup;
    const url = `http://${worker.targets[0]}/metrics`;
    const before = await scrape(url);
    for (let i = 0; i < 3; i++) expect((await complete(stack)).status).toBe(200);
    const after = await scrape(url);
    expect(
      moved(before, after, "platform_requests_total", {
        model_name: MODEL,
        version: "v1",
        replica: worker.labels.platform_replica as string,
      }),
    ).toBe(3);
    // A user key may not list targets.
    const user = (await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: unique("u"), role: "user" }))
      .body.key;
    const refused = await fetch(`${stack.baseUrl.replace(/\/v1$/, "")}/admin/v1/scrape-targets`, {
      headers: { authorization: `Bearer ${user}` },
    });
    expect(refused.status).toBe(403);
  });
});
