/**
 * gRPC upstreams (the Python scaffold: grpcio over h2c only): a Connect call (unary in JSON or
 * binary, by POST or GET; a server stream) is transcoded to gRPC over HTTP/2 with the service's
 * published descriptors, and its answer back. One HTTP/2 session per replica, reused by every
 * call. A binary request's bytes are the gRPC message as they are; JSON goes through protobuf-es
 * (fromJson, toBinary; fromBinary, toJson) with the descriptor set as protobuf-es's type registry, so Any resolves.
 */
import http2 from "node:http2";
import type { IncomingHttpHeaders } from "node:http2";
import { PlatformError, withDetail } from "../../contracts/errors.ts";
import { envelope, rpcError } from "./errors.ts";
import { FrameReader, inflate } from "./frames.ts";
import { callAbort, grpcTimeout, RoundRobin, retryable } from "./upstream.ts";
import type { RpcReplica } from "./types.ts";
import { type Answer, requestOf, streamed, type TranscodedCall, unary } from "./transcode.ts";

type Session = { session: http2.ClientHttp2Session; connected: boolean; error?: unknown };

class AttemptFailed extends Error {
  readonly reused: boolean;
  constructor(cause: unknown, reused: boolean) {
    super("attempt failed", { cause });
    this.reused = reused;
  }
}

export class GrpcUpstreams {
  private readonly sessions = new Map<string, Session>();
  private readonly turns = new RoundRobin();
  /** The largest message read, sent or inflated, either way (PLATFORM_RPC_MAX_MESSAGE_BYTES). */
  private readonly maxMessageBytes: number;

  constructor(maxMessageBytes: number) {
    this.maxMessageBytes = maxMessageBytes;
  }

  async call(call: TranscodedCall): Promise<Response> {
    const method = call.registry.getService(call.rpcService)?.methods.find((m) => m.name === call.methodName);
    if (!method) {
      // Connect's answer for an unknown procedure: 404, read by clients as unimplemented.
      throw new PlatformError(
        404,
        "unimplemented",
        `service ${call.rpcService} has no method ${call.methodName} in its published descriptors`,
      );
    }
    const { codec, message } = requestOf(call, method, this.maxMessageBytes);
    const { signal, done } = callAbort(call.timeoutMs, call.onClientGone);
    const headers: http2.OutgoingHttpHeaders = {
      ...call.metadata,
      ":method": "POST",
      ":path": `/${call.rpcService}/${call.methodName}`,
      "content-type": "application/grpc+proto",
      te: "trailers",
      ...(call.timeoutMs !== undefined ? { "grpc-timeout": grpcTimeout(call.timeoutMs) } : {}),
    };
    const frame = envelope(0, message);
    try {
      const [first, second] = this.turns.order(call.key, call.replicas);
      let answer: Answer;
      try {
        answer = await this.open(first, headers, frame, signal);
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        const failed = e as AttemptFailed;
        if (!retryable(failed.cause, failed.reused)) throw unavailable(call.service, failed.cause);
        try {
          answer = await this.open(second, headers, frame, signal);
        } catch (again) {
          if (signal.aborted) throw signal.reason;
          throw unavailable(call.service, (again as AttemptFailed).cause);
        }
      }
      if (call.shape === "connect-stream") return streamed(answer, call, method, codec, signal, done);
      return await unary(answer, call, method, codec, signal).finally(done);
    } catch (e) {
      done();
      throw e;
    }
  }

  close(): void {
    for (const { session } of this.sessions.values()) session.close();
    this.sessions.clear();
  }

  private session(url: string): Session {
    const known = this.sessions.get(url);
    if (known && !known.session.closed && !known.session.destroyed) return known;
    const session = http2.connect(url);
    const entry: Session = { session, connected: false };
    session.once("connect", () => {
      entry.connected = true;
    });
    // A failed or closed session is replaced by the next call; its streams see the error themselves.
    session.on("error", (e) => {
      entry.error = e;
      if (this.sessions.get(url) === entry) this.sessions.delete(url);
    });
    session.once("goaway", () => {
      if (this.sessions.get(url) === entry) this.sessions.delete(url);
    });
    session.once("close", () => {
      if (this.sessions.get(url) === entry) this.sessions.delete(url);
    });
    // Idle sessions do not keep the gateway's event loop alive.
    session.unref();
    this.sessions.set(url, entry);
    return entry;
  }

  /** Sends the call to `replica`: resolves with its answer's headers once they arrive. */
  private open(
    replica: RpcReplica,
    headers: http2.OutgoingHttpHeaders,
    frame: Uint8Array,
    signal: AbortSignal,
  ): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const entry = this.session(replica.url);
      const reused = entry.connected;
      let stream: http2.ClientHttp2Stream;
      try {
        stream = entry.session.request({ ...headers, ":authority": new URL(replica.url).host }, { signal });
      } catch (e) {
        reject(new AttemptFailed(e, reused));
        return;
      }
      const max = this.maxMessageBytes;
      let listeners: ((bytes: Uint8Array) => void)[] = [];
      const early: Uint8Array[] = [];
      let failure: unknown;
      const reader = new FrameReader(
        () => true,
        (flags, payload) => {
          if (!payload) return;
          let bytes: Uint8Array = payload;
          if (flags & 0x01) {
            try {
              bytes = inflate(payload, max, "answer");
            } catch (e) {
              failure = e;
              stream.close(http2.constants.NGHTTP2_CANCEL);
              return;
            }
          }
          if (listeners.length === 0) early.push(bytes);
          else for (const fn of listeners) fn(bytes);
        },
        { bytes: max, whose: "answer" },
      );
      let responded = false;
      let trailers: IncomingHttpHeaders | undefined;
      const ended = new Promise<{ trailers: IncomingHttpHeaders } | { failed: PlatformError }>((settle) => {
        stream.on("trailers", (t) => {
          trailers = t;
        });
        stream.once("close", () => {
          if (!responded) return;
          if (signal.aborted) settle({ failed: signal.reason as PlatformError });
          else if (failure instanceof PlatformError) settle({ failed: failure });
          else if (failure !== undefined)
            settle({ failed: withDetail(rpcError("internal", "the service's answer could not be read"), failure) });
          else if (trailers) settle({ trailers });
          else
            settle({
              failed: withDetail(
                rpcError("unavailable", "the service's replica closed the stream before its status"),
                stream.rstCode,
              ),
            });
        });
      });
      stream.on("data", (chunk: Buffer) => {
        if (failure !== undefined) return;
        try {
          reader.push(chunk);
        } catch (e) {
          // A message over the cap: the call fails with it, and the replica stops sending.
          failure = e;
          stream.close(http2.constants.NGHTTP2_CANCEL);
        }
      });
      stream.once("response", (h) => {
        responded = true;
        // A trailers-only answer (an error before any message) carries the status in its headers.
        if (h["grpc-status"] !== undefined) trailers = h;
        resolve({
          headers: h,
          onMessage: (fn) => {
            listeners = [fn];
            for (const bytes of early.splice(0)) fn(bytes);
          },
          ended,
          cancel: () => stream.close(http2.constants.NGHTTP2_CANCEL),
        });
      });
      stream.once("error", (e) => {
        if (responded) {
          failure ??= e;
          return;
        }
        // Refused by the replica before any processing: as safe to retry as a refused connection.
        const refused = stream.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM;
        const cause = entry.error ?? e;
        reject(
          new AttemptFailed(
            refused ? Object.assign(new Error("stream refused"), { code: "ECONNREFUSED" }) : cause,
            reused,
          ),
        );
      });
      stream.once("close", () => {
        if (!responded) reject(new AttemptFailed(entry.error ?? new Error("stream closed before a response"), reused));
      });
      stream.end(frame);
    });
  }
}

function unavailable(service: string, cause: unknown): PlatformError {
  return withDetail(
    rpcError("unavailable", `no replica of service ${service} could be reached; retry shortly`, 1),
    cause,
  );
}
