/**
 * The RPC server: Connect, gRPC and gRPC-Web on one port, over HTTP/1.1 and cleartext HTTP/2 (h2c),
 * so browsers, `buf curl`, gRPC clients and the platform's gateway all reach the same handlers.
 * Node's HTTP/2 server only accepts HTTP/1.1 beside HTTP/2 over TLS, so each connection's first
 * bytes pick the server: the HTTP/2 preface ("PRI * HTTP/2.0") goes to h2c, the rest to HTTP/1.1.
 *
 * Beside the RPCs: GET /healthz (liveness: the process answers), GET /readyz (readiness: started,
 * the database reachable, not shutting down), GET /metrics (Prometheus), and grpc.health.v1.
 */
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Code, ConnectError, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Database } from "./db.js";
import { migrate } from "./migrate.js";
import { waitForDatabase } from "./db.js";
import { HealthState, registerHealth, ServingStatus } from "./health.js";
import type { Logger } from "./logger.js";
import { codeName, createMetrics } from "./metrics.js";
import { createHandlers, service } from "./service.js";
import { Health } from "./__generated__/grpc/health/v1/health_pb.js";

export type ServerOptions = {
  port: number;
  host: string;
  /** Undefined: no database (the handlers decide what that means: the example keeps items in memory). */
  db: Database | undefined;
  databaseWaitMs?: number;
  shutdownTimeoutMs: number;
  log: Logger;
  /** Handlers used instead of createHandlers' own (tests stand in a slow or failing RPC). */
  handlers?: Partial<ServiceImpl<typeof service>>;
};

export type RunningServer = {
  /** The port it listens on (the one the OS chose, for port 0). */
  port: number;
  url: string;
  /** Settles once the database answers and its migrations are applied (at once without a database). */
  ready: Promise<void>;
  /** Stops accepting calls, lets in-flight ones finish within shutdownTimeoutMs, then closes. */
  shutdown(): Promise<void>;
};

const HTTP2_PREFACE = "PRI * HTTP/2.0";

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const { log, db } = options;
  const metrics = createMetrics();
  const health = new HealthState([service.typeName]);
  // Aborted at the shutdown deadline: handlers still running then see context.signal abort.
  const deadline = new AbortController();
  let ready = false;
  let draining = false;

  // Until the database is ready, calls fail fast with Unavailable (clients and the gateway retry
  // those) rather than hanging or failing with a connection error. The health service always answers.
  const gate: Interceptor = (next) => async (req) => {
    if (req.service.typeName !== Health.typeName) {
      if (draining) throw new ConnectError("the service is shutting down", Code.Unavailable);
      if (!ready) throw new ConnectError("the service is starting: the database is not ready yet", Code.Unavailable);
    }
    return next(req);
  };
  const logCalls: Interceptor = (next) => async (req) => {
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const started = performance.now();
    try {
      const res = await next(req);
      log.debug({ rpc, ms: Math.round(performance.now() - started) }, "rpc ok");
      return res;
    } catch (e) {
      const err = ConnectError.from(e);
      // Internal and Unknown are the service's faults; the others answer a caller's mistake.
      const level = err.code === Code.Internal || err.code === Code.Unknown ? "error" : "info";
      log[level]({ rpc, code: codeName(err.code), err: err.rawMessage }, "rpc failed");
      throw e;
    }
  };

  const handler = connectNodeAdapter({
    routes(router) {
      router.service(service, { ...createHandlers({ db, log }), ...options.handlers });
      registerHealth(router, health);
    },
    interceptors: [metrics.interceptor, logCalls, gate],
    shutdownSignal: deadline.signal,
    fallback(req, res) {
      const path = (req.url ?? "/").split("?")[0];
      const send = (status: number, body: string, type = "application/json") => {
        res.writeHead(status, { "content-type": type });
        res.end(body);
      };
      if (req.method !== "GET" && req.method !== "HEAD") return send(404, '{"error":"not found"}');
      if (path === "/healthz") return send(200, '{"status":"ok"}');
      if (path === "/metrics") {
        metrics.registry.metrics().then(
          (text) => send(200, text, metrics.registry.contentType),
          (e: Error) => send(500, JSON.stringify({ error: e.message })),
        );
        return;
      }
      if (path === "/readyz") {
        const why = draining ? "shutting down" : !ready ? "starting" : undefined;
        if (why) return send(503, JSON.stringify({ status: why }));
        if (!db) return send(200, '{"status":"ready"}');
        db.ping().then(
          () => send(200, '{"status":"ready"}'),
          (e: Error) => send(503, JSON.stringify({ status: "database unreachable", error: e.message })),
        );
        return;
      }
      send(404, '{"error":"not found"}');
    },
  });

  const h1 = http.createServer(handler);
  const h2 = http2.createServer(handler);
  const sockets = new Set<net.Socket>();
  const sessions = new Set<http2.Http2Session>();
  // Open requests per HTTP/1.1 connection: an idle keep-alive connection is closed at shutdown,
  // a busy one once its response is sent.
  const busy = new Map<net.Socket, number>();
  // Connections handed to the HTTP/2 server: closed with GOAWAY, which lets their streams finish.
  const http2Sockets = new Set<net.Socket>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    if (draining) session.close();
  });
  h1.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    res.once("close", () => {
      const open = (busy.get(socket) ?? 1) - 1;
      if (open > 0) busy.set(socket, open);
      else {
        busy.delete(socket);
        if (draining) socket.destroy();
      }
    });
  });

  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => {
      sockets.delete(socket);
      http2Sockets.delete(socket);
    });
    let head = Buffer.alloc(0);
    const onReadable = () => {
      for (let chunk: Buffer | null; (chunk = socket.read() as Buffer | null) !== null; )
        head = Buffer.concat([head, chunk]);
      // Three bytes tell "PRI" (HTTP/2's preface) from any HTTP/1.1 method.
      if (head.length < 3 && HTTP2_PREFACE.startsWith(head.toString("latin1"))) return;
      socket.off("readable", onReadable);
      socket.unshift(head);
      if (head.subarray(0, 3).toString("latin1") !== "PRI") return h1.emit("connection", socket);
      http2Sockets.add(socket);
      h2.emit("connection", socket);
    };
    socket.on("readable", onReadable);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as net.AddressInfo).port;
  log.info(
    { port, host: options.host, rpcService: service.typeName },
    "listening (Connect, gRPC, gRPC-Web; HTTP/1.1 and h2c)",
  );

  const readyPromise = (async () => {
    if (db) {
      await waitForDatabase(db, log, options.databaseWaitMs ?? 60_000);
      const applied = await migrate(db.pool, log);
      log.info({ applied }, "database ready");
    }
    ready = true;
    if (!draining) health.setAll(ServingStatus.SERVING);
  })();
  // The caller awaits `ready`; this only keeps an early failure from being an unhandled rejection.
  readyPromise.catch(() => {});

  let closing: Promise<void> | undefined;
  const shutdown = () => {
    closing ??= (async () => {
      draining = true;
      health.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      for (const socket of sockets) if (!busy.has(socket) && !http2Sockets.has(socket)) socket.destroy();
      const timer = setTimeout(() => {
        log.warn({ open: sockets.size, timeoutMs: options.shutdownTimeoutMs }, "shutdown deadline: closing open calls");
        deadline.abort(new ConnectError("the service is shutting down", Code.Unavailable));
        for (const socket of sockets) socket.destroy();
      }, options.shutdownTimeoutMs);
      await closed;
      clearTimeout(timer);
    })();
    return closing;
  };

  return { port, url: `http://127.0.0.1:${port}`, ready: readyPromise, shutdown };
}
