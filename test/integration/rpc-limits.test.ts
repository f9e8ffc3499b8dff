/**
 * What a tenant (or its own service) can make `/rpc` hold, against hostile upstreams on loopback:
 * a 2 MiB gzip request that inflates to 2 GiB is refused at once (resource_exhausted) and the
 * gateway's memory stays flat; a gRPC answer that inflates past the cap, and a Connect stream whose
 * frame header claims 4 GiB, fail the call without being held. A service's answer headers pass
 * only through the allow-list: its Set-Cookie, Location, CORS and security headers never go out on
 * the gateway's origin, its `x-` metadata and the protocol's own headers do.
 */
import http from "node:http";
import http2 from "node:http2";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createGzip } from "node:zlib";
import { create, createFileRegistry, type FileRegistry } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import type { RpcTarget } from "../../src/gateway/rpc/types.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const MiB = 1024 * 1024;
const CAP = 4 * MiB;

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
let key: string;
let registry: FileRegistry;
let bomb: Buffer;
const servers: { close: () => void }[] = [];

/** `t.v1.Connect` and `t.v1.Grpc`, each with Get (unary) and Watch (a server stream) of `Msg { string id = 1; }`. */
function descriptors(): FileRegistry {
  const methods = [
    { name: "Get", inputType: ".t.v1.Msg", outputType: ".t.v1.Msg" },
    { name: "Watch", inputType: ".t.v1.Msg", outputType: ".t.v1.Msg", serverStreaming: true },
  ];
  return createFileRegistry(
    create(FileDescriptorSetSchema, {
      file: [
        {
          name: "t.proto",
          package: "t.v1",
          syntax: "proto3",
          messageType: [{ name: "Msg", field: [{ name: "id", number: 1, type: 9, label: 1, jsonName: "id" }] }],
          service: [
            { name: "Connect", method: methods },
            { name: "Grpc", method: methods },
          ],
        },
      ],
    }),
  );
}

/** gzip of `size` zero bytes, made a chunk at a time (about 1/1000 of `size`). */
async function gzipOfZeros(size: number): Promise<Buffer> {
  const gzip = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gzip.on("data", (c: Buffer) => out.push(c));
  const done = new Promise((resolve) => gzip.on("end", resolve));
  const zeros = Buffer.alloc(MiB);
  for (let n = 0; n < size / MiB; n++) if (!gzip.write(zeros)) await new Promise((r) => gzip.once("drain", r));
  gzip.end();
  await done;
  return Buffer.concat(out);
}

function envelope(flags: number, payload: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + payload.length);
  out[0] = flags;
  out.writeUInt32BE(payload.length, 1);
  out.set(payload, 5);
  return out;
}

const HOSTILE_HEADERS = {
  "set-cookie": "session=stolen; Path=/",
  location: "http://127.0.0.1:1/",
  "access-control-allow-origin": "*",
  "strict-transport-security": "max-age=0",
  "x-custom": "kept",
};

/** A Connect service that answers Get with hostile headers and Watch with a frame header claiming 4 GiB, then bytes until cut. */
function connectServer(): http.Server {
  return http.createServer((req, res) => {
    req.resume();
    if (req.url?.endsWith("/Get")) {
      res.writeHead(200, { "content-type": "application/json", ...HOSTILE_HEADERS });
      res.end('{"id":"a"}');
      return;
    }
    res.writeHead(200, { "content-type": "application/connect+json" });
    res.write(Buffer.from([0x02, 0xff, 0xff, 0xff, 0xf0]));
    const chunk = Buffer.alloc(MiB);
    let sent = 0;
    const more = () => {
      while (sent < 1024 && !res.destroyed) {
        sent++;
        if (!res.write(chunk)) return void res.once("drain", more);
      }
      res.end();
    };
    more();
  });
}

/** A gRPC service: Get answers a plain message with hostile headers, Watch a gzip bomb. */
function grpcServer(): http2.Http2Server {
  const server = http2.createServer();
  server.on("stream", (stream, headers) => {
    stream.resume();
    const path = String(headers[":path"]);
    if (path.endsWith("/Get")) {
      stream.respond(
        { ":status": 200, "content-type": "application/grpc+proto", ...HOSTILE_HEADERS },
        { waitForTrailers: true },
      );
      stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(envelope(0, Buffer.from([0x0a, 0x01, 0x61])));
      return;
    }
    stream.respond(
      { ":status": 200, "content-type": "application/grpc+proto", "grpc-encoding": "gzip" },
      { waitForTrailers: true },
    );
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.on("error", () => undefined);
    stream.end(envelope(1, bomb));
  });
  return server;
}

async function listen(server: http.Server | http2.Http2Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({ close: () => server.close() });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

beforeAll(async () => {
  registry = descriptors();
  bomb = await gzipOfZeros(2048 * MiB);
  const connectUrl = await listen(connectServer());
  const grpcUrl = await listen(grpcServer());
  const targets: Record<string, RpcTarget> = {
    "t.v1.Connect": {
      org: "default",
      service: "evil-connect",
      protocol: "connect",
      replicas: [{ id: "c", url: connectUrl }],
      descriptors: async () => registry,
    },
    "t.v1.Grpc": {
      org: "default",
      service: "evil-grpc",
      protocol: "grpc",
      replicas: [{ id: "g", url: grpcUrl }],
      descriptors: async () => registry,
    },
  };
  redis = await privateRedis();
  const dataDir = await mkdtemp(join(tmpdir(), "platform-rpc-limits-"));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url, maxRequestBytes: 4 * MiB };
  ctl = connectControl(redis.url, settings.prefix);
  key = (await createApiKey(ctl, "tenant", "user")).key;
  gateway = await startGateway({
    ctl,
    settings,
    host: "127.0.0.1",
    port: 0,
    rpcResolver: async (org, rpcService) => (org === "default" ? targets[rpcService] : undefined),
  });
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  for (const s of servers) s.close();
  await ctl?.redis.quit().catch(() => undefined);
  await redis?.stop();
});

/** Runs `call` while sampling resident memory; how much it grew at most. */
async function rssGrowth<T>(call: () => Promise<T>): Promise<{ result: T; grown: number; ms: number }> {
  const base = process.memoryUsage().rss;
  let peak = base;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 2);
  const started = performance.now();
  try {
    const result = await call();
    return { result, grown: peak - base, ms: performance.now() - started };
  } finally {
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);
  }
}

const rpc = (service: string, method: string, init: { body: Uint8Array | string; headers: Record<string, string> }) =>
  fetch(`${gateway.url}/rpc/t.v1.${service}/${method}`, {
    method: "POST",
    body: init.body,
    headers: { authorization: `Bearer ${key}`, ...init.headers },
  });

describe("/rpc message caps", () => {
  it("refuses a 2 MiB gzip request that inflates to 2 GiB at once, with memory flat", {
    timeout: 120_000,
  }, async () => {
    expect(bomb.length).toBeLessThan(3 * MiB);
    const {
      result: res,
      grown,
      ms,
    } = await rssGrowth(() =>
      rpc("Grpc", "Get", { body: bomb, headers: { "content-type": "application/proto", "content-encoding": "gzip" } }),
    );
    const body = (await res.json()) as { code: string; message: string };
    console.log(
      `gzip bomb (${(bomb.length / MiB).toFixed(2)} MiB -> 2 GiB) refused in ${ms.toFixed(0)} ms; rss grew ${(grown / MiB).toFixed(0)} MiB`,
    );
    expect(res.status).toBe(429);
    expect(body.code).toBe("resource_exhausted");
    expect(body.message).toContain("PLATFORM_RPC_MAX_MESSAGE_BYTES");
    // Inflated, the 2 GiB would be held (and a copy for the frame); capped, at most the cap and buffers.
    expect(grown).toBeLessThan(256 * MiB);
  });

  it("fails a gRPC answer that inflates past the cap, holding none of it", { timeout: 120_000 }, async () => {
    const { result: res, grown } = await rssGrowth(async () => {
      const r = await rpc("Grpc", "Watch", {
        body: envelope(0, Buffer.from("{}")),
        headers: { "content-type": "application/connect+json" },
      });
      return { status: r.status, text: Buffer.from(await r.arrayBuffer()).toString() };
    });
    expect(res.status).toBe(200);
    expect(res.text).toContain("resource_exhausted");
    expect(res.text).toContain("PLATFORM_RPC_MAX_MESSAGE_BYTES");
    expect(grown).toBeLessThan(256 * MiB);
  });

  it("cuts a Connect stream whose frame header claims 4 GiB, at the header", { timeout: 120_000 }, async () => {
    const { result, grown } = await rssGrowth(async () => {
      const res = await rpc("Connect", "Watch", {
        body: envelope(0, Buffer.from("{}")),
        headers: { "content-type": "application/connect+json" },
      });
      let received = 0;
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) received += chunk.length;
        return { received, failed: false };
      } catch {
        return { received, failed: true };
      }
    });
    expect(result.failed).toBe(true);
    // The header, maybe a chunk or two behind it: never the gigabyte the service sent on.
    expect(result.received).toBeLessThan(CAP * 4);
    expect(grown).toBeLessThan(256 * MiB);
  });
});

describe("a service's answer headers", () => {
  for (const service of ["Connect", "Grpc"]) {
    it(`${service}: only the protocol's own and x- metadata reach the client`, async () => {
      const res = await rpc(service, "Get", { body: '{"id":"a"}', headers: { "content-type": "application/json" } });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ id: "a" });
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(res.headers.get("x-custom")).toBe("kept");
      for (const name of ["set-cookie", "location", "access-control-allow-origin", "strict-transport-security"])
        expect(res.headers.get(name), name).toBeNull();
    });
  }
});
