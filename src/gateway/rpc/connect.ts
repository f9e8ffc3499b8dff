/**
 * Connect upstreams (the Node scaffold: connect-node serving Connect, gRPC and gRPC-Web on one
 * port): the call goes to a ready replica as it came, byte for byte (body, content type,
 * encodings, timeouts; no re-encoding ever), and the answer streams back as it comes, so a server
 * stream reaches the client message by message. A replica that refuses the connection (one just
 * stopped in a rollout) costs one retry on another, which is safe because nothing reached it.
 */
import type { IncomingMessage } from "node:http";
import { withDetail, type PlatformError } from "../../contracts/errors.ts";
import { http } from "../../process/node-http.ts";
import {
  type CallShape,
  CONNECT_CODES,
  codeOfGrpcHttpStatus,
  codeOfGrpcStatus,
  END_STREAM_FLAG,
  envelope,
  rpcError,
} from "./errors.ts";
import { FrameReader, inflate } from "./frames.ts";
import { callAbort, passesToClient, RoundRobin, retryable } from "./upstream.ts";
import type { RpcReplica } from "./types.ts";

/** One call to forward. `finish` is called once when it is over, with its Connect code (`ok` for success). */
export type ForwardedCall = {
  /** Whose replicas take turns: `<org>/<service>`. */
  key: string;
  service: string;
  replicas: RpcReplica[];
  method: "GET" | "POST";
  /** `/<package>.<Service>/<Method>` and the query, as the client sent them. */
  path: string;
  /** Already without the stripped ones (upstream.ts). */
  headers: Record<string, string>;
  body: Uint8Array | undefined;
  timeoutMs: number | undefined;
  shape: CallShape;
  onClientGone: (fn: () => void) => void;
  finish: (code: string) => void;
};

/** An attempt that failed before any response, and whether it used a kept-alive connection. */
class AttemptFailed extends Error {
  readonly reused: boolean;
  constructor(cause: unknown, reused: boolean) {
    super("attempt failed", { cause });
    this.reused = reused;
  }
}

/** Error bodies read for their code (the metrics'); a larger one is not a Connect error. */
const MAX_ERROR_BODY = 64 * 1024;

export class ConnectUpstreams {
  private readonly agent = new http.Agent({ keepAlive: true, keepAliveMsecs: 1_000, scheduling: "lifo" });
  private readonly turns = new RoundRobin();
  /** The largest message of an answer (PLATFORM_RPC_MAX_MESSAGE_BYTES), read or inflated. */
  private readonly maxMessageBytes: number;

  constructor(maxMessageBytes: number) {
    this.maxMessageBytes = maxMessageBytes;
  }

  async forward(call: ForwardedCall): Promise<Response> {
    const { signal, done } = callAbort(call.timeoutMs, call.onClientGone);
    try {
      const [first, second] = this.turns.order(call.key, call.replicas);
      let res: IncomingMessage;
      try {
        res = await this.send(first, call, signal);
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        const failed = e as AttemptFailed;
        if (!retryable(failed.cause, failed.reused)) throw unavailable(call.service, failed.cause);
        try {
          res = await this.send(second, call, signal);
        } catch (again) {
          if (signal.aborted) throw signal.reason;
          throw unavailable(call.service, (again as AttemptFailed).cause);
        }
      }
      return respond(res, call, signal, done, this.maxMessageBytes);
    } catch (e) {
      done();
      throw e;
    }
  }

  close(): void {
    this.agent.destroy();
  }

  private send(replica: RpcReplica, call: ForwardedCall, signal: AbortSignal): Promise<IncomingMessage> {
    const url = new URL(replica.url);
    return new Promise((resolve, reject) => {
      const req = http.request({
        agent: this.agent,
        protocol: url.protocol,
        hostname: url.hostname.replace(/^\[|\]$/g, ""),
        port: url.port,
        method: call.method,
        path: call.path,
        headers: call.body ? { ...call.headers, "content-length": String(call.body.length) } : call.headers,
        signal,
      });
      req.once("response", resolve);
      req.once("error", (e) => reject(new AttemptFailed(e, req.reusedSocket)));
      req.end(call.body);
    });
  }
}

function unavailable(service: string, cause: unknown): PlatformError {
  return withDetail(
    rpcError("unavailable", `no replica of service ${service} could be reached; retry shortly`, 1),
    cause,
  );
}

/** The upstream's answer as the client's response: its status and headers, its body streamed through while its frames are watched for the final code. */
function respond(
  res: IncomingMessage,
  call: ForwardedCall,
  signal: AbortSignal,
  done: () => void,
  maxMessageBytes: number,
): Response {
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined || !passesToClient(name)) continue;
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else headers.set(name, value);
  }
  const status = res.statusCode ?? 502;
  const watch = codeWatch(call.shape, status, res.headers, maxMessageBytes);
  let finished = false;
  const finish = (code: string) => {
    if (finished) return;
    finished = true;
    done();
    call.finish(code);
  };
  let closed = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const fail = (code: string, reason: unknown) => {
        res.destroy();
        finish(code);
        if (closed) return;
        closed = true;
        controller.error(reason);
      };
      res.on("data", (chunk: Buffer) => {
        if (closed) return;
        try {
          watch.push(chunk);
        } catch (e) {
          // A message over the cap: the client's stream is cut as a broken one would be.
          fail((e as PlatformError).code ?? "resource_exhausted", e);
          return;
        }
        controller.enqueue(chunk);
        if ((controller.desiredSize ?? 1) <= 0) res.pause();
      });
      res.on("end", () => {
        finish(watch.end());
        if (closed) return;
        closed = true;
        controller.close();
      });
      // The replica died mid-answer: the client sees its stream cut, as it would have directly.
      res.on("error", (e) => fail("unavailable", e));
      res.on("aborted", () => fail("unavailable", new Error("the replica closed the connection mid-answer")));
      signal.addEventListener(
        "abort",
        () => {
          const reason = signal.reason as PlatformError;
          // A Connect stream cut between messages ends properly: an end-stream message with the deadline.
          if (call.shape === "connect-stream" && watch.atBoundary && !closed) {
            closed = true;
            controller.enqueue(
              envelope(
                END_STREAM_FLAG,
                Buffer.from(JSON.stringify({ error: { code: reason.code, message: reason.message } })),
              ),
            );
            controller.close();
            res.destroy();
            finish(reason.code);
            return;
          }
          fail(reason.code, reason);
        },
        { once: true },
      );
    },
    pull() {
      res.resume();
    },
    cancel() {
      closed = true;
      res.destroy();
      finish("canceled");
    },
  });
  return new Response(status === 204 || status === 304 ? null : body, { status, headers });
}

type CodeWatch = { push: (chunk: Uint8Array) => void; end: () => string; atBoundary: boolean };

const knownCode = (code: unknown): string | undefined =>
  typeof code === "string" && (CONNECT_CODES as readonly string[]).includes(code) ? code : undefined;

/**
 * What a call ended with, read off its answer as it passes: a unary call's status (and an error
 * body's `code`), a Connect stream's end-stream message, gRPC-Web's `grpc-status` (in the headers
 * of a trailers-only answer, else in its trailer frame). Only those bytes are kept.
 */
function codeWatch(
  shape: CallShape,
  status: number,
  headers: IncomingMessage["headers"],
  maxMessageBytes: number,
): CodeWatch {
  if (shape === "unary") {
    if (status >= 200 && status < 300) return { push: () => undefined, end: () => "ok", atBoundary: true };
    const parts: Uint8Array[] = [];
    let size = 0;
    return {
      push: (chunk) => {
        size += chunk.length;
        if (size <= MAX_ERROR_BODY) parts.push(chunk);
      },
      end: () => {
        const fallback = codeOfGrpcHttpStatus(status);
        if (size > MAX_ERROR_BODY) return fallback;
        try {
          const bytes = Buffer.concat(parts);
          const text =
            headers["content-encoding"] === "gzip"
              ? inflate(bytes, MAX_ERROR_BODY, "answer").toString()
              : bytes.toString();
          return knownCode((JSON.parse(text) as { code?: unknown }).code) ?? fallback;
        } catch {
          return fallback;
        }
      },
      atBoundary: true,
    };
  }
  if (status !== 200) {
    const code = codeOfGrpcHttpStatus(status);
    return { push: () => undefined, end: () => code, atBoundary: false };
  }
  if (shape === "grpc-web" && headers["grpc-status"] !== undefined) {
    const code = codeOfGrpcStatus(Number(headers["grpc-status"]));
    return { push: () => undefined, end: () => code, atBoundary: false };
  }
  let code: string | undefined;
  const compressed = headers[shape === "grpc-web" ? "grpc-encoding" : "connect-content-encoding"];
  const wanted = shape === "grpc-web" ? 0x80 : END_STREAM_FLAG;
  const reader = new FrameReader(
    (flags) => (flags & wanted) !== 0,
    (flags, payload) => {
      if (!payload) return;
      try {
        const bytes = flags & 0x01 && compressed === "gzip" ? inflate(payload, maxMessageBytes, "answer") : payload;
        const text = Buffer.from(bytes).toString();
        if (shape === "grpc-web") {
          const m = /^grpc-status:\s*(\d+)\s*$/im.exec(text);
          code = m ? codeOfGrpcStatus(Number(m[1])) : "unknown";
        } else {
          const end = JSON.parse(text) as { error?: { code?: unknown } };
          code = end.error ? (knownCode(end.error.code) ?? "unknown") : "ok";
        }
      } catch {
        code = "unknown";
      }
    },
    { bytes: maxMessageBytes, whose: "answer" },
  );
  return {
    push: (chunk) => reader.push(chunk),
    // A stream that ends without its final message broke off.
    end: () => code ?? "unknown",
    get atBoundary() {
      return reader.atBoundary;
    },
  };
}
