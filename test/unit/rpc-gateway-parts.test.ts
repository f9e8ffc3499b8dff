/**
 * The pure parts of the gateway's `/rpc/*` routes (src/gateway/rpc/): Connect's codes and
 * statuses, gRPC's numbers and percent-encoding, frames read across chunk boundaries, timeouts,
 * which failures are retried, and the round-robin.
 */
import { describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import {
  CONNECT_STATUS,
  codeOfGrpcStatus,
  connectCodeOf,
  connectErrorResponse,
  envelope,
  grpcStatusOf,
  percentDecode,
  percentEncode,
  rpcError,
  shapeOf,
} from "../../src/gateway/rpc/errors.ts";
import { FrameReader } from "../../src/gateway/rpc/frames.ts";
import { grpcTimeout, grpcTimeoutOf, RoundRobin, retryable, timeoutOf } from "../../src/gateway/rpc/upstream.ts";

describe("Connect's codes", () => {
  it("maps each code to Connect's HTTP status", () => {
    expect(CONNECT_STATUS).toMatchObject({
      canceled: 499,
      deadline_exceeded: 504,
      not_found: 404,
      resource_exhausted: 429,
      unimplemented: 501,
      unavailable: 503,
      unauthenticated: 401,
    });
    expect(rpcError("not_found", "x").status).toBe(404);
  });

  it("reads the gateway's own errors as Connect codes", () => {
    expect(connectCodeOf(new PlatformError(401, "invalid_api_key", "no key"))).toBe("unauthenticated");
    expect(connectCodeOf(new PlatformError(429, "rate_limit_exceeded", "slow down"))).toBe("resource_exhausted");
    expect(connectCodeOf(new PlatformError(413, "request_too_large", "too big"))).toBe("resource_exhausted");
    expect(connectCodeOf(new PlatformError(503, "queue_unavailable", "later"))).toBe("unavailable");
    expect(connectCodeOf(new PlatformError(500, "internal_error", "oops"))).toBe("internal");
    expect(connectCodeOf(new PlatformError(404, "unimplemented", "no method"))).toBe("unimplemented");
  });

  it("numbers them as gRPC does", () => {
    expect(codeOfGrpcStatus(0)).toBe("ok");
    expect(codeOfGrpcStatus(5)).toBe("not_found");
    expect(codeOfGrpcStatus(16)).toBe("unauthenticated");
    expect(codeOfGrpcStatus(99)).toBe("unknown");
    expect(grpcStatusOf("unavailable")).toBe(14);
  });

  it("percent-encodes grpc-message and decodes it back", () => {
    const text = "item 42: 100% gone, ünïcode\n";
    expect(percentEncode(text)).toBe("item 42: 100%25 gone, %C3%BCn%C3%AFcode%0A");
    expect(percentDecode(percentEncode(text))).toBe(text);
    expect(percentDecode("bad %zz escape")).toBe("bad %zz escape");
  });

  it("answers in the call's shape", async () => {
    expect(shapeOf("application/json")).toBe("unary");
    expect(shapeOf("application/connect+proto")).toBe("connect-stream");
    expect(shapeOf("application/grpc-web+proto")).toBe("grpc-web");

    const unary = connectErrorResponse("unary", undefined, { code: "not_found", message: "gone" });
    expect(unary.status).toBe(404);
    expect(await unary.text()).toBe('{"code":"not_found","message":"gone"}');

    const stream = connectErrorResponse("connect-stream", "application/connect+proto", { code: "unavailable" });
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toBe("application/connect+proto");
    const bytes = Buffer.from(await stream.arrayBuffer());
    expect(bytes[0]).toBe(2);
    expect(JSON.parse(bytes.subarray(5).toString())).toEqual({ error: { code: "unavailable" } });

    const web = connectErrorResponse("grpc-web", "application/grpc-web+proto", {
      code: "unauthenticated",
      message: "a b%",
    });
    expect(web.status).toBe(200);
    expect(web.headers.get("grpc-status")).toBe("16");
    expect(web.headers.get("grpc-message")).toBe("a b%25");
  });
});

describe("frames", () => {
  it("are read whole however the chunks split them", () => {
    const frames = Buffer.concat([
      envelope(0, Buffer.from("one")),
      envelope(0, new Uint8Array()),
      envelope(2, Buffer.from('{"x":1}')),
    ]);
    for (const size of [1, 2, 3, 7, frames.length]) {
      const seen: [number, string | undefined][] = [];
      const reader = new FrameReader(
        () => true,
        (flags, payload) => seen.push([flags, payload && Buffer.from(payload).toString()]),
        { bytes: 1024, whose: "answer" },
      );
      for (let at = 0; at < frames.length; at += size) reader.push(frames.subarray(at, at + size));
      expect(seen).toEqual([
        [0, "one"],
        [0, ""],
        [2, '{"x":1}'],
      ]);
      expect(reader.atBoundary).toBe(true);
    }
  });

  it("are only watched, not copied, unless wanted", () => {
    const seen: (Uint8Array | undefined)[] = [];
    const reader = new FrameReader(
      (flags) => flags === 2,
      (_flags, payload) => seen.push(payload),
      { bytes: 1024, whose: "answer" },
    );
    reader.push(envelope(0, Buffer.from("skipped")).subarray(0, 6));
    expect(reader.atBoundary).toBe(false);
    reader.push(envelope(0, Buffer.from("skipped")).subarray(6));
    reader.push(envelope(2, Buffer.from("kept")));
    expect(seen.map((p) => p && Buffer.from(p).toString())).toEqual([undefined, "kept"]);
  });
});

describe("timeouts, retries and turns", () => {
  it("reads and writes timeouts", () => {
    expect(timeoutOf(undefined)).toBeUndefined();
    expect(timeoutOf("250")).toBe(250);
    expect(() => timeoutOf("-1")).toThrow(/connect-timeout-ms/);
    expect(grpcTimeout(250)).toBe("250m");
    expect(grpcTimeout(200_000_000)).toBe("200000S");
    expect(grpcTimeoutOf("2S")).toBe(2000);
    expect(grpcTimeoutOf("1500u")).toBe(2);
    expect(() => grpcTimeoutOf("2 seconds")).toThrow(/grpc-timeout/);
  });

  it("retries only what cannot have reached the service", () => {
    const err = (code: string) => Object.assign(new Error(code), { code });
    expect(retryable(err("ECONNREFUSED"), false)).toBe(true);
    expect(retryable(new Error("cancelled", { cause: err("ECONNREFUSED") }), false)).toBe(true);
    expect(retryable(err("ECONNRESET"), true)).toBe(true);
    expect(retryable(err("ECONNRESET"), false)).toBe(false);
    expect(retryable(err("ETIMEDOUT"), true)).toBe(false);
  });

  it("takes turns, and retries on the next replica", () => {
    const turns = new RoundRobin();
    const replicas = [
      { id: "a", url: "http://a" },
      { id: "b", url: "http://b" },
      { id: "c", url: "http://c" },
    ];
    const firsts = [0, 1, 2, 3].map(() => turns.order("org/items", replicas).map((r) => r.id));
    expect(firsts).toEqual([
      ["a", "b"],
      ["b", "c"],
      ["c", "a"],
      ["a", "b"],
    ]);
    expect(turns.order("org/other", replicas.slice(0, 1)).map((r) => r.id)).toEqual(["a", "a"]);
  });
});
