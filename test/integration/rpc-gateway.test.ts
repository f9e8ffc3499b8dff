/**
 * Deployed services' RPCs through the gateway (`/rpc/*`, issue 24), against real upstreams: a
 * connect-node service (Connect, gRPC and gRPC-Web on one HTTP/1.1 port) passed through byte for
 * byte, and the same service served as gRPC only over h2c, transcoded. The descriptors come from a
 * .proto built by buf in a temp dir; nothing is generated. The resolver is injected.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import http from "node:http";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  create,
  createFileRegistry,
  type DescService,
  type FileRegistry,
  fromBinary,
  toBinary,
} from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectRouter, ConnectError, createClient, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import type { RpcTarget } from "../../src/gateway/rpc/types.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { freePort, type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const run = promisify(execFile);
const BUF = new URL("../../node_modules/.bin/buf", import.meta.url).pathname;
const SERVICE = "test.rpc.v1.ItemService";

const PROTO = `syntax = "proto3";

package test.rpc.v1;

// ItemService reads items.
service ItemService {
  // GetItem returns one item; delay_ms makes it wait first.
  rpc GetItem(GetItemRequest) returns (GetItemResponse) {
    option idempotency_level = NO_SIDE_EFFECTS;
  }
  // WatchItems streams count items, interval_ms apart.
  rpc WatchItems(WatchItemsRequest) returns (stream GetItemResponse);
}

message Item {
  string id = 1;
  string name = 2;
  int64 count = 3;
  repeated string tags = 4;
}

message GetItemRequest {
  string id = 1;
  int32 delay_ms = 2;
}

message GetItemResponse {
  Item item = 1;
}

message WatchItemsRequest {
  int32 count = 1;
  int32 interval_ms = 2;
}
`;

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
let registry: FileRegistry;
let service: DescService;
let protoDir: string;
let imagePath: string;
let user: string;
let stranger: string;
let limited: string;
/** What the resolver answers for the default organization; the tests set it. */
let current: RpcTarget | undefined;
/** The headers of every call the upstreams took, latest last. */
const seen: Headers[] = [];
let connectUrl: string;
let grpcUrl: string;
const servers: { close: () => void }[] = [];

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason);
    });
  });

type GetItemRequest = { id: string; delayMs: number };
type WatchItemsRequest = { count: number; intervalMs: number };

function routes(router: ConnectRouter) {
  const out = service.method.getItem?.output;
  if (!out) throw new Error("no GetItem in the test proto");
  const item = (id: string) => create(out, { item: { id, name: `item ${id}`, count: 7n, tags: ["a", "é"] } } as never);
  router.service(service, {
    async getItem(req: GetItemRequest, ctx: HandlerContext) {
      seen.push(ctx.requestHeader);
      if (req.id === "42") throw new ConnectError("item 42 not found", Code.NotFound);
      if (req.delayMs > 0) await sleep(req.delayMs, ctx.signal);
      return item(req.id);
    },
    async *watchItems(req: WatchItemsRequest, ctx: HandlerContext) {
      seen.push(ctx.requestHeader);
      for (let i = 0; i < req.count; i++) {
        if (i > 0) await sleep(req.intervalMs, ctx.signal);
        yield item(String(i));
      }
    },
  } as never);
}

async function listen(server: http.Server | http2.Http2Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({ close: () => server.close() });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

const target = (protocol: "connect" | "grpc", urls: string[]): RpcTarget => ({
  org: "default",
  service: "items",
  protocol,
  replicas: urls.map((url, i) => ({ id: `r${i}`, url })),
  descriptors: async () => registry,
});

beforeAll(async () => {
  protoDir = await mkdtemp(join(tmpdir(), "platform-rpc-"));
  await mkdir(join(protoDir, "proto/test/rpc/v1"), { recursive: true });
  await writeFile(join(protoDir, "buf.yaml"), "version: v2\nmodules:\n  - path: proto\n");
  await writeFile(join(protoDir, "proto/test/rpc/v1/items.proto"), PROTO);
  imagePath = join(protoDir, "image.binpb");
  await run(BUF, ["build", "-o", imagePath], { cwd: protoDir });
  registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, await readFile(imagePath)));
  const found = registry.getService(SERVICE);
  if (!found) throw new Error(`${SERVICE} not in the image`);
  service = found;

  connectUrl = await listen(http.createServer(connectNodeAdapter({ routes })));
  grpcUrl = await listen(
    http2.createServer(connectNodeAdapter({ routes, connect: false, grpcWeb: false, grpc: true })),
  );

  redis = await privateRedis();
  const dataDir = await mkdtemp(join(tmpdir(), "platform-rpc-gw-"));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url, maxRequestBytes: 10_000 };
  ctl = connectControl(redis.url, settings.prefix);
  await createOrg(ctl, "acme", "Acme");
  user = (await createApiKey(ctl, "user", "user")).key;
  stranger = (await createApiKey(ctl, "stranger", "admin", undefined, "acme")).key;
  limited = (await createApiKey(ctl, "limited", "user", { rpm: 2 })).key;
  gateway = await startGateway({
    ctl,
    settings,
    host: "127.0.0.1",
    port: 0,
    rpcResolver: async (org, rpcService) => (org === "default" && rpcService === SERVICE ? current : undefined),
  });
});

afterAll(async () => {
  await gateway?.close();
  for (const s of servers) s.close();
  await ctl?.redis.quit().catch(() => undefined);
  await redis?.stop();
});

const rpc = (
  method: string,
  init: { body?: RequestInit["body"]; key?: string | null; headers?: Record<string, string> } = {},
) =>
  fetch(`${gateway.url}/rpc/${SERVICE}/${method}`, {
    method: "POST",
    body: init.body,
    headers: {
      "content-type": "application/json",
      ...(init.key === null ? {} : { authorization: `Bearer ${init.key ?? user}` }),
      ...init.headers,
    },
  });

const direct = (base: string, method: string, init: { body?: RequestInit["body"]; headers?: Record<string, string> }) =>
  fetch(`${base}/${SERVICE}/${method}`, {
    method: "POST",
    body: init.body,
    headers: { "content-type": "application/json", ...init.headers },
  });

const bytes = async (res: Response) => new Uint8Array(await res.arrayBuffer());

function input(method: "getItem" | "watchItems", fields: Record<string, unknown>): Uint8Array {
  const m = service.method[method];
  if (!m) throw new Error(`no ${method}`);
  return toBinary(m.input, create(m.input, fields as never));
}

function client(options: { binary?: boolean; key?: string } = {}) {
  return createClient(
    service,
    createConnectTransport({
      baseUrl: `${gateway.url}/rpc`,
      httpVersion: "1.1",
      useBinaryFormat: options.binary ?? false,
      interceptors: [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${options.key ?? user}`);
          return next(req);
        },
      ],
    }),
  ) as unknown as {
    getItem: (req: Partial<GetItemRequest>, o?: { timeoutMs?: number }) => Promise<{ item: { name: string } }>;
    watchItems: (req: Partial<WatchItemsRequest>) => AsyncIterable<{ item: { id: string } }>;
  };
}

function envelope(flags: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, 5);
  return out;
}

describe("a Connect upstream, passed through", () => {
  beforeAll(() => {
    current = target("connect", [connectUrl]);
  });

  it("answers unary JSON and binary calls byte for byte as the service does", async () => {
    const json = JSON.stringify({ id: "7" });
    const via = await rpc("GetItem", { body: json });
    const straight = await direct(connectUrl, "GetItem", { body: json });
    expect(via.status).toBe(200);
    expect(via.headers.get("content-type")).toBe(straight.headers.get("content-type"));
    expect(await bytes(via)).toEqual(await bytes(straight));

    const proto = input("getItem", { id: "8" });
    const headers = { "content-type": "application/proto" };
    const viaProto = await rpc("GetItem", { body: proto, headers });
    const straightProto = await direct(connectUrl, "GetItem", { body: proto, headers });
    expect(viaProto.status).toBe(200);
    expect(viaProto.headers.get("content-type")).toBe("application/proto");
    expect(await bytes(viaProto)).toEqual(await bytes(straightProto));
    // The service sees no bearer: the key is the gateway's business.
    expect(seen.at(-1)?.get("authorization")).toBeNull();
  });

  it("serves a generated-style Connect client, JSON and binary, and GET for idempotent methods", async () => {
    expect((await client().getItem({ id: "3" })).item.name).toBe("item 3");
    expect((await client({ binary: true }).getItem({ id: "4" })).item.name).toBe("item 4");
    const query = new URLSearchParams({ connect: "v1", encoding: "json", message: JSON.stringify({ id: "5" }) });
    const get = await fetch(`${gateway.url}/rpc/${SERVICE}/GetItem?${query}`, {
      headers: { authorization: `Bearer ${user}` },
    });
    expect(get.status).toBe(200);
    expect(await get.json()).toMatchObject({ item: { id: "5" } });
  });

  it("passes a server stream through as it comes", async () => {
    const arrived: number[] = [];
    const ids: string[] = [];
    const start = performance.now();
    for await (const m of client().watchItems({ count: 3, intervalMs: 300 })) {
      arrived.push(performance.now() - start);
      ids.push(m.item.id);
    }
    expect(ids).toEqual(["0", "1", "2"]);
    // The first message arrived long before the last was produced: nothing buffered the stream.
    expect((arrived[2] as number) - (arrived[0] as number)).toBeGreaterThan(450);
  });

  it("passes gRPC-Web through", async () => {
    const res = await rpc("GetItem", {
      body: envelope(0, input("getItem", { id: "9" })),
      headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
    });
    expect(res.status).toBe(200);
    const body = Buffer.from(await bytes(res));
    expect(body.toString("latin1")).toMatch(/grpc-status: ?0/);
  });

  it("passes the service's own errors through unchanged", async () => {
    const res = await rpc("GetItem", { body: JSON.stringify({ id: "42" }) });
    expect(res.status).toBe(404);
    expect(await res.text()).toBe('{"code":"not_found","message":"item 42 not found"}');
    await expect(client().getItem({ id: "42" })).rejects.toMatchObject({ code: Code.NotFound });
  });

  it("honours connect-timeout-ms: a 504 deadline_exceeded, and the service saw the deadline", async () => {
    const res = await rpc("GetItem", {
      body: JSON.stringify({ id: "1", delayMs: 3000 }),
      headers: { "connect-timeout-ms": "200" },
    });
    expect(res.status).toBe(504);
    expect(await res.json()).toMatchObject({ code: "deadline_exceeded" });
    expect(seen.at(-1)?.get("connect-timeout-ms")).toBe("200");
  });

  it("retries a replica that refuses the connection on a live one: every call succeeds", async () => {
    current = target("connect", [`http://127.0.0.1:${await freePort()}`, connectUrl]);
    for (let i = 0; i < 6; i++) {
      const res = await rpc("GetItem", { body: JSON.stringify({ id: String(i) }) });
      expect(res.status).toBe(200);
    }
    current = target("connect", [connectUrl]);
  });

  it("sends the caller's traceparent and the request id to the service", async () => {
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const res = await rpc("GetItem", {
      body: JSON.stringify({ id: "1" }),
      headers: { traceparent, "x-request-id": "trace-rpc-1" },
    });
    expect(res.status).toBe(200);
    expect(seen.at(-1)?.get("traceparent")).toBe(traceparent);
    expect(seen.at(-1)?.get("x-request-id")).toBe("trace-rpc-1");
  });

  it("works with buf curl", async () => {
    const { stdout } = await run(BUF, [
      "curl",
      "--protocol",
      "connect",
      "--schema",
      imagePath,
      "-H",
      `Authorization: Bearer ${user}`,
      "-d",
      '{"id":"11"}',
      `${gateway.url}/rpc/${SERVICE}/GetItem`,
    ]);
    expect(JSON.parse(stdout)).toMatchObject({ item: { id: "11", name: "item 11" } });
  });
});

describe("the gateway's own errors, in Connect's shape", () => {
  beforeAll(() => {
    current = target("connect", [connectUrl]);
  });

  it("401 without a key or with a bad one", async () => {
    for (const key of [null, "sk-plat-nope"]) {
      const res = await rpc("GetItem", { body: "{}", key });
      expect(res.status).toBe(401);
      const body = (await res.json()) as Record<string, unknown>;
      expect(Object.keys(body).sort()).toEqual(["code", "message"]);
      expect(body.code).toBe("unauthenticated");
    }
    await expect(client({ key: "sk-plat-nope" }).getItem({ id: "1" })).rejects.toMatchObject({
      code: Code.Unauthenticated,
    });
  });

  it("401 for a stream as an end-stream message", async () => {
    const res = await rpc("WatchItems", {
      body: envelope(0, Buffer.from("{}")),
      key: null,
      headers: { "content-type": "application/connect+json" },
    });
    expect(res.status).toBe(200);
    const body = Buffer.from(await bytes(res));
    expect(body[0]).toBe(2);
    expect(JSON.parse(body.subarray(5).toString())).toMatchObject({ error: { code: "unauthenticated" } });
  });

  it("404 not_found for another organization's service, an unknown one, or a malformed path", async () => {
    const other = await rpc("GetItem", { body: "{}", key: stranger });
    expect(other.status).toBe(404);
    expect(await other.json()).toMatchObject({ code: "not_found" });
    const unknown = await fetch(`${gateway.url}/rpc/test.rpc.v1.Nope/GetItem`, {
      method: "POST",
      body: "{}",
      headers: { authorization: `Bearer ${user}`, "content-type": "application/json" },
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ code: "not_found" });
    const malformed = await fetch(`${gateway.url}/rpc/nothing`, {
      method: "POST",
      headers: { authorization: `Bearer ${user}` },
    });
    expect(malformed.status).toBe(404);
    expect(await malformed.json()).toMatchObject({ code: "not_found" });
  });

  it("503 unavailable with Retry-After when no replica is ready", async () => {
    current = target("connect", []);
    const res = await rpc("GetItem", { body: "{}" });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(await res.json()).toMatchObject({ code: "unavailable" });
    current = target("connect", [connectUrl]);
  });

  it("413 for a body over the limit", async () => {
    const res = await rpc("GetItem", { body: JSON.stringify({ id: "x".repeat(20_000) }) });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: "resource_exhausted" });
  });

  it("applies the key's requests per minute (429 resource_exhausted) and counts usage per service and method", async () => {
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await rpc("GetItem", { body: JSON.stringify({ id: "1" }), key: limited });
      statuses.push(res.status);
      if (res.status === 429) refused = res;
      else await res.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(refused?.headers.get("retry-after")).toBeTruthy();
    expect(await refused?.json()).toMatchObject({ code: "resource_exhausted" });

    const usage = await fetch(`${gateway.url}/v1/usage?by=model,version`, {
      headers: { authorization: `Bearer ${limited}` },
    });
    const rows = ((await usage.json()) as { data: Record<string, unknown>[] }).data;
    expect(rows).toContainEqual(
      expect.objectContaining({
        model: "rpc:items",
        version: `${SERVICE}/GetItem`,
        requests: 2,
        rate_limited: 1,
      }),
    );
  });
});

describe("a gRPC upstream, transcoded", () => {
  beforeAll(() => {
    current = target("grpc", [grpcUrl]);
  });

  it("answers Connect JSON as the Connect service does, and binary too", async () => {
    const json = JSON.stringify({ id: "7" });
    const via = await rpc("GetItem", { body: json });
    expect(via.status).toBe(200);
    expect(via.headers.get("content-type")).toBe("application/json");
    const straight = await direct(connectUrl, "GetItem", { body: json });
    expect(await bytes(via)).toEqual(await bytes(straight));

    const proto = input("getItem", { id: "8" });
    const viaProto = await rpc("GetItem", { body: proto, headers: { "content-type": "application/proto" } });
    expect(viaProto.status).toBe(200);
    expect(viaProto.headers.get("content-type")).toBe("application/proto");
    const out = service.method.getItem?.output;
    if (!out) throw new Error("no output");
    expect(fromBinary(out, await bytes(viaProto))).toMatchObject({ item: { id: "8", name: "item 8", count: 7n } });
    expect(seen.at(-1)?.get("content-type")).toBe("application/grpc+proto");
  });

  it("serves Connect clients, GET calls and server streams", async () => {
    expect((await client().getItem({ id: "3" })).item.name).toBe("item 3");
    expect((await client({ binary: true }).getItem({ id: "4" })).item.name).toBe("item 4");
    const query = new URLSearchParams({ connect: "v1", encoding: "json", message: JSON.stringify({ id: "5" }) });
    const get = await fetch(`${gateway.url}/rpc/${SERVICE}/GetItem?${query}`, {
      headers: { authorization: `Bearer ${user}` },
    });
    expect(get.status).toBe(200);
    expect(await get.json()).toMatchObject({ item: { id: "5" } });

    const arrived: number[] = [];
    const ids: string[] = [];
    const start = performance.now();
    for await (const m of client({ binary: true }).watchItems({ count: 3, intervalMs: 300 })) {
      arrived.push(performance.now() - start);
      ids.push(m.item.id);
    }
    expect(ids).toEqual(["0", "1", "2"]);
    expect((arrived[2] as number) - (arrived[0] as number)).toBeGreaterThan(450);
  });

  it("turns grpc-status into Connect errors", async () => {
    const res = await rpc("GetItem", { body: JSON.stringify({ id: "42" }) });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ code: "not_found", message: "item 42 not found" });
    const unknown = await rpc("Nope", { body: "{}" });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ code: "unimplemented" });
  });

  it("passes the deadline on as grpc-timeout and answers 504 deadline_exceeded", async () => {
    const res = await rpc("GetItem", {
      body: JSON.stringify({ id: "1", delayMs: 3000 }),
      headers: { "connect-timeout-ms": "200" },
    });
    expect(res.status).toBe(504);
    expect(await res.json()).toMatchObject({ code: "deadline_exceeded" });
    expect(seen.at(-1)?.get("grpc-timeout")).toBe("200m");
  });

  it("retries a dead replica on a live one", async () => {
    current = target("grpc", [`http://127.0.0.1:${await freePort()}`, grpcUrl]);
    for (let i = 0; i < 4; i++) {
      const res = await rpc("GetItem", { body: JSON.stringify({ id: String(i) }) });
      expect(res.status).toBe(200);
    }
    current = target("grpc", [grpcUrl]);
  });
});

describe("metrics", () => {
  it("counts calls by code and times them", async () => {
    const text = await (await fetch(gateway.metricsUrl)).text();
    const method = `method="${SERVICE}/GetItem"`;
    expect(text).toContain(`platform_rpc_requests_total{org="default",service="items",${method},code="ok"}`);
    expect(text).toContain(`platform_rpc_requests_total{org="default",service="items",${method},code="not_found"}`);
    expect(text).toContain(
      `platform_rpc_requests_total{org="default",service="items",${method},code="deadline_exceeded"}`,
    );
    expect(text).toMatch(
      new RegExp(`platform_rpc_request_duration_seconds_count\\{org="default",service="items",${method}\\} \\d+`),
    );
    expect(text).toContain(
      `platform_rpc_requests_total{org="default",service="items",method="${SERVICE}/WatchItems",code="ok"}`,
    );
  });
});
