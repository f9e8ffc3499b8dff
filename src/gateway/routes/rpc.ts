/**
 * `/rpc/<package>.<Service>/<Method>`: deployed services' RPCs (docs/services.md), for any key or
 * CLI token of the organization that deployed them, under the same per-key rate limits and usage
 * counting as the models. Connect upstreams get the call byte for byte (rpc/connect.ts), gRPC ones
 * a transcoding (rpc/grpc.ts). Every error here, the gateway's own included (no key, unknown
 * service, rate limited, no replica, deadline, body too big), is in Connect's shape (rpc/errors.ts),
 * so Connect clients and `buf curl` read them as they read a service's own.
 */
import type { Context, MiddlewareHandler } from "hono";
import { Hono } from "hono";
import type { Registry } from "prom-client";
import { withDetail } from "../../contracts/errors.ts";
import { RpcServiceName } from "../../services/names.ts";
import { currentTraceparent } from "../../telemetry/tracing.ts";
import { onClientGone } from "../client-gone.ts";
import type { GatewayEnv } from "../env.ts";
import { clientError } from "../errors.ts";
import { meterOf } from "../ratelimit.ts";
import { ConnectUpstreams } from "../rpc/connect.ts";
import { connectCodeOf, connectErrorResponse, rpcError, shapeOf } from "../rpc/errors.ts";
import { GrpcUpstreams } from "../rpc/grpc.ts";
import { isMetadata } from "../rpc/transcode.ts";
import { type RpcLabels, RpcMetrics } from "../rpc/metrics.ts";
import type { RpcResolver } from "../rpc/types.ts";
import { grpcTimeoutOf, STRIPPED_REQUEST_HEADERS, timeoutOf } from "../rpc/upstream.ts";

export type RpcRoutesOptions = {
  /** Finds the deployed service behind `<package>.<Service>` in the caller's organization. */
  resolve: RpcResolver;
  /** The gateway's metrics registry: `platform_rpc_requests_total` and `platform_rpc_request_duration_seconds` go there. */
  registry: Registry;
  /**
   * What runs before every call, in order (app.ts: authentication, the rate-limit meter, body
   * limits). Run inside these routes rather than in front of them so that their errors take
   * Connect's shape here while `/v1` keeps OpenAI's.
   */
  guards: MiddlewareHandler<GatewayEnv>[];
  /** The largest message read or inflated, either way (PLATFORM_RPC_MAX_MESSAGE_BYTES). */
  maxMessageBytes: number;
};

/** What usage and rate limits see of an RPC: no tokens (tokens-per-minute limits never refuse one). */
const NO_TOKENS = { promptTokens: 0, maxTokens: 0 };
const METHOD_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

type CallRecord = { labels: RpcLabels; started: number; finished: boolean };

/** The routes, mounted at `/rpc`; `close` ends the kept-alive connections to replicas. */
export function rpcRoutes(options: RpcRoutesOptions): Hono<GatewayEnv> & { close: () => void } {
  const app = new Hono<GatewayEnv>();
  const metrics = new RpcMetrics(options.registry);
  const connect = new ConnectUpstreams(options.maxMessageBytes);
  const grpc = new GrpcUpstreams(options.maxMessageBytes);
  // Per request, for the error handler: the call's labels once its service resolved.
  const calls = new WeakMap<Context, CallRecord>();
  const finish = (record: CallRecord, code: string) => {
    if (record.finished) return;
    record.finished = true;
    metrics.observe(record.labels, code, (performance.now() - record.started) / 1000);
  };

  app.use("*", ...options.guards);
  app.on(["GET", "POST"], "/:service/:method", async (c) => {
    const started = performance.now();
    const rpcService = c.req.param("service");
    const methodName = c.req.param("method");
    const caller = c.get("caller");
    if (!RpcServiceName.safeParse(rpcService).success || !METHOD_NAME.test(methodName)) {
      throw rpcError("not_found", `no RPC ${rpcService}/${methodName}: call /rpc/<package>.<Service>/<Method>`);
    }
    const target = await options.resolve(caller.org, rpcService);
    if (!target) {
      // Another organization's service reads the same as none: nothing tells a caller what others deploy.
      throw rpcError("not_found", `no deployed service serves ${rpcService} in organization ${caller.org}`);
    }
    const method = `${rpcService}/${methodName}`;
    const record: CallRecord = {
      labels: { org: caller.org, service: target.service, method },
      started,
      finished: false,
    };
    calls.set(c, record);
    // Usage per key, service and method: the service as the model (`rpc:<service>`), the method as its version.
    await meterOf(c)?.admit({ model: `rpc:${target.service}`, version: method }, NO_TOKENS);
    if (target.replicas.length === 0) {
      throw rpcError("unavailable", `service ${target.service} has no ready replica; retry shortly`, 1);
    }
    const contentType = c.req.header("content-type");
    const shape = shapeOf(contentType);
    // Passed on as it came (as grpc-timeout to a gRPC service); the gateway gives up at it too.
    const timeoutMs =
      timeoutOf(c.req.header("connect-timeout-ms")) ??
      (shape === "grpc-web" ? grpcTimeoutOf(c.req.header("grpc-timeout")) : undefined);
    const body = c.req.method === "POST" ? new Uint8Array(await c.req.arrayBuffer()) : undefined;
    const headers: Record<string, string> = {};
    for (const [name, value] of c.req.raw.headers) if (!STRIPPED_REQUEST_HEADERS.has(name)) headers[name] = value;
    headers["x-request-id"] = c.get("requestId");
    // The gateway's span is the service's parent while tracing is on; otherwise the caller's passes as it came.
    const traceparent = currentTraceparent();
    if (traceparent) headers.traceparent = traceparent;
    const common = {
      key: `${target.org}/${target.service}`,
      service: target.service,
      replicas: target.replicas,
      timeoutMs,
      shape,
      body,
      onClientGone: (fn: () => void) => onClientGone(c, fn),
      finish: (code: string) => {
        if (code !== "ok") meterOf(c)?.fail();
        finish(record, code);
      },
    };
    if (target.protocol === "connect") {
      const url = new URL(c.req.url);
      return connect.forward({
        ...common,
        method: c.req.method as "GET" | "POST",
        path: `/${rpcService}/${methodName}${url.search}`,
        headers,
      });
    }
    const registry = await target.descriptors().catch((e: unknown) => {
      throw withDetail(
        rpcError("internal", `the published descriptors of service ${target.service} could not be read`),
        e,
      );
    });
    const metadata: Record<string, string> = {};
    for (const [name, value] of Object.entries(headers)) if (isMetadata(name)) metadata[name] = value;
    return grpc.call({
      ...common,
      rpcService,
      methodName,
      registry,
      httpMethod: c.req.method as "GET" | "POST",
      contentType,
      contentEncoding: c.req.header(shape === "connect-stream" ? "connect-content-encoding" : "content-encoding"),
      query: new URL(c.req.url).searchParams,
      metadata,
    });
  });
  app.all("*", () => {
    throw rpcError("not_found", "RPCs are called as POST (or GET) /rpc/<package>.<Service>/<Method>");
  });

  app.onError((e, c) => {
    // Logged with the request id when it hides a detail, as everywhere in the gateway.
    const err = clientError(c, e);
    const code = connectCodeOf(err);
    const record = calls.get(c);
    if (record) finish(record, code);
    // A stream's error goes out with status 200: the meter counts it as an error only when told.
    meterOf(c)?.fail();
    const headers = new Headers();
    if (err.retryAfter !== undefined) headers.set("Retry-After", String(err.retryAfter));
    const contentType = c.req.header("content-type");
    return connectErrorResponse(
      shapeOf(contentType),
      contentType,
      { code, message: err.message },
      {
        status: err.status,
        headers,
      },
    );
  });

  return Object.assign(app, {
    close: () => {
      connect.close();
      grpc.close();
    },
  });
}
