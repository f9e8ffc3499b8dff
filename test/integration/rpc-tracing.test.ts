/**
 * With tracing on, an RPC through `/rpc/*` reaches the service with the gateway's SERVER span as
 * its parent (the caller's trace continued). Its own file: tracing is switched on per process.
 */
import http from "node:http";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { startTracing, stopTracing } from "../../src/telemetry/tracing.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
let receiver: OtlpReceiver;
let upstream: http.Server;
let key: string;
const traceparents: (string | undefined)[] = [];

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  // Any Connect server will do for a passthrough: this one answers every unary call with `{}`.
  upstream = http.createServer((req, res) => {
    traceparents.push(req.headers.traceparent as string | undefined);
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const port = (upstream.address() as { port: number }).port;

  redis = await privateRedis();
  const env = {
    PLATFORM_DATA_DIR: await mkdtemp(join(tmpdir(), "platform-rpc-trace-")),
    OTEL_TRACES_EXPORTER: "otlp",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_BSP_SCHEDULE_DELAY: "100",
  };
  const settings = { ...loadSettings(env), redisUrl: redis.url };
  await startTracing(settings.tracing, "gateway");
  ctl = connectControl(redis.url, settings.prefix);
  key = (await createApiKey(ctl, "user", "user")).key;
  gateway = await startGateway({
    ctl,
    settings,
    host: "127.0.0.1",
    port: 0,
    rpcResolver: async (org) => ({
      org,
      service: "items",
      protocol: "connect",
      replicas: [{ id: "r0", url: `http://127.0.0.1:${port}` }],
      descriptors: () => Promise.reject(new Error("not needed for a passthrough")),
    }),
  });
});

afterAll(async () => {
  await gateway?.close();
  await stopTracing();
  upstream?.close();
  await receiver?.close();
  await ctl?.redis.quit().catch(() => undefined);
  await redis?.stop();
});

it("sends the gateway's span as the service's parent, in the caller's trace", async () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const res = await fetch(`${gateway.url}/rpc/test.rpc.v1.ItemService/GetItem`, {
    method: "POST",
    body: "{}",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
    },
  });
  expect(res.status).toBe(200);
  expect(await res.text()).toBe("{}");
  const sent = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(traceparents.at(-1) ?? "");
  expect(sent?.[1]).toBe(traceId);
  expect(sent?.[2]).not.toBe("00f067aa0ba902b7");
  await expect
    .poll(() => receiver.spans.find((s) => s.traceId === traceId && s.kind === 2))
    .toMatchObject({ spanId: sent?.[2], parentSpanId: "00f067aa0ba902b7" });
});
