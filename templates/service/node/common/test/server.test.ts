/**
 * The server around the handlers: health (HTTP and grpc.health.v1), readiness, Prometheus metrics,
 * and a graceful shutdown that ends open health watches instead of waiting for the deadline.
 */
import type { DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../src/__generated__/grpc/health/v1/health_pb.js";
import { createLogger } from "../src/logger.js";
import { type RunningServer, startServer } from "../src/server.js";
import { service } from "../src/service.js";

const start = (options: Partial<Parameters<typeof startServer>[0]> = {}) =>
  startServer({
    port: 0,
    host: "127.0.0.1",
    db: undefined,
    shutdownTimeoutMs: 5_000,
    log: createLogger("silent"),
    ...options,
  });

/** The service's first unary RPC, which the shutdown tests stand in for with a slow handler. */
const unary = service.methods.find((m): m is DescMethodUnary => m.methodKind === "unary");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let server: RunningServer;
beforeAll(async () => {
  server = await start();
  await server.ready;
});
afterAll(() => server?.shutdown());

describe("health and metrics", () => {
  it("answers /healthz and /readyz", async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready" });
    expect((await fetch(`${server.url}/nothing-here`)).status).toBe(404);
  });

  it("serves grpc.health.v1 for the server and the service", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
    expect((await health.check({})).status).toBe(Status.SERVING);
    expect((await health.check({ service: service.typeName })).status).toBe(Status.SERVING);
    await expect(health.check({ service: "no.such.Service" })).rejects.toMatchObject({ code: Code.NotFound });
  });

  it("counts RPCs, failures and latency per method at /metrics", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
    await health.check({});
    await health.check({ service: "no.such.Service" }).catch((e: unknown) => ConnectError.from(e));
    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(text).toMatch(/rpc_server_requests_total\{service="grpc.health.v1.Health",method="Check",code="ok"\} \d+/);
    expect(text).toMatch(/rpc_server_errors_total\{service="grpc.health.v1.Health",method="Check",code="not_found"\} \d+/);
    expect(text).toContain('rpc_server_duration_seconds_count{service="grpc.health.v1.Health",method="Check"}');
    expect(text).toContain("process_cpu_seconds_total");
  });
});

describe("shutdown", () => {
  it("reports NOT_SERVING to watchers, ends their streams and stops well before the deadline", async () => {
    const other = await start();
    await other.ready;
    const health = createClient(Health, createGrpcTransport({ baseUrl: other.url }));
    const seen: Status[] = [];
    const watching = (async () => {
      for await (const res of health.watch({})) {
        seen.push(res.status);
        if (seen.length === 1) void other.shutdown();
      }
    })();
    const started = Date.now();
    await watching;
    await other.shutdown();
    expect(seen).toEqual([Status.SERVING, Status.NOT_SERVING]);
    expect(Date.now() - started).toBeLessThan(4_000);
    await expect(fetch(`${other.url}/healthz`)).rejects.toThrow();
  });

  it.runIf(unary)("lets an in-flight call finish, refusing new connections meanwhile", async () => {
    const method = unary as DescMethodUnary;
    const other = await start({ handlers: { [method.localName]: async () => (await sleep(500), {}) } });
    await other.ready;
    const transport = createConnectTransport({ baseUrl: other.url, httpVersion: "1.1" });
    const call = transport.unary(method, undefined, undefined, undefined, {});
    await sleep(100);
    const started = Date.now();
    const stopping = other.shutdown();
    await expect(fetch(`${other.url}/healthz`)).rejects.toThrow();
    expect((await call).message).toBeDefined();
    await stopping;
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it.runIf(unary)("ends a call still running at the deadline, and stops then", async () => {
    const method = unary as DescMethodUnary;
    const other = await start({
      shutdownTimeoutMs: 300,
      handlers: { [method.localName]: () => new Promise(() => {}) },
    });
    await other.ready;
    const transport = createConnectTransport({ baseUrl: other.url, httpVersion: "1.1" });
    const call = transport.unary(method, undefined, undefined, undefined, {}).catch((e: unknown) => e);
    await sleep(100);
    const started = Date.now();
    await other.shutdown();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await call).toBeInstanceOf(ConnectError);
  });
});
