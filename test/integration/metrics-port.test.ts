/**
 * The gateway's metrics port (docs/observability.md, "The metrics port"): anonymous callers of the
 * API port read no metrics (every organization's services, RPC methods and adapters are in their
 * labels); the scraper reads them on the metrics port, which serves nothing else; the dashboard's
 * `/admin/v1/metrics` needs a key and gives a tenant its own organization's series only. A real
 * gateway and Redis; an RPC to a tenant's service (a loopback stand-in) puts `org` labels in.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { privateRedis } from "../helpers/redis.ts";

let redis: Awaited<ReturnType<typeof privateRedis>>;
let ctl: Control;
let gateway: RunningGateway;
let upstream: Server;
const keys = { operator: "", alpha: "", beta: "" };

beforeAll(async () => {
  redis = await privateRedis();
  const settings = { ...loadSettings({}), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  await createOrg(ctl, "alpha");
  await createOrg(ctl, "beta");
  keys.operator = (await createApiKey(ctl, "operator", "admin")).key;
  keys.alpha = (await createApiKey(ctl, "alpha", "user", undefined, "alpha")).key;
  keys.beta = (await createApiKey(ctl, "beta", "user", undefined, "beta")).key;
  // Each organization's service answers a Connect unary call with an empty message.
  upstream = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const port = (upstream.address() as AddressInfo).port;
  gateway = await startGateway({
    ctl,
    settings,
    host: "127.0.0.1",
    port: 0,
    rpcResolver: async (org) => ({
      org,
      service: `${org}-items`,
      protocol: "connect",
      replicas: [{ id: `${org}-items-1`, url: `http://127.0.0.1:${port}` }],
      descriptors: () => Promise.reject(new Error("a Connect upstream needs no descriptors")),
    }),
  });
  for (const who of ["alpha", "beta"] as const)
    await fetch(`${gateway.url}/rpc/items.v1.ItemService/GetItem`, {
      method: "POST",
      headers: { authorization: `Bearer ${keys[who]}`, "content-type": "application/json" },
      body: "{}",
    }).then((r) => r.arrayBuffer());
});

afterAll(async () => {
  await gateway?.close();
  await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
  await ctl?.redis.quit();
  await redis?.stop();
});

describe("the metrics port", () => {
  it("the API port serves no /metrics to an anonymous caller", async () => {
    const res = await fetch(`${gateway.url}/metrics`);
    expect(res.status).toBe(404);
    expect(await res.text()).not.toContain("vllm:");
  });

  it("the metrics port serves the whole exposition, and nothing else", async () => {
    expect(new URL(gateway.metricsUrl).port).not.toBe(new URL(gateway.url).port);
    const text = await (await fetch(gateway.metricsUrl)).text();
    expect(text).toContain("vllm:num_requests_waiting");
    expect(text).toContain('org="alpha"');
    expect(text).toContain('org="beta"');
    for (const path of ["/v1/models", "/admin/v1/whoami", "/healthz"])
      expect((await fetch(new URL(path, gateway.metricsUrl))).status).toBe(404);
  });

  it("/admin/v1/metrics needs a key, and gives a tenant only its organization's series", async () => {
    const read = async (key?: string) => {
      const res = await fetch(`${gateway.url}/admin/v1/metrics`, {
        headers: key ? { authorization: `Bearer ${key}` } : {},
      });
      return { status: res.status, text: await res.text() };
    };
    expect((await read()).status).toBe(401);
    const beta = await read(keys.beta);
    expect(beta.status).toBe(200);
    expect(beta.text).toContain('org="beta"');
    expect(beta.text).not.toContain('org="alpha"');
    expect(beta.text).not.toMatch(/model_name="/);
    const operator = await read(keys.operator);
    expect(operator.text).toContain('org="alpha"');
    expect(operator.text).toContain('org="beta"');
  });

  it("PLATFORM_METRICS_ON_API_PORT=true puts the old /metrics back on the API port", async () => {
    const settings = { ...loadSettings({ PLATFORM_METRICS_ON_API_PORT: "true" }), redisUrl: redis.url };
    const old = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
    try {
      expect((await fetch(`${old.url}/metrics`)).status).toBe(200);
    } finally {
      await old.close();
    }
  });
});
