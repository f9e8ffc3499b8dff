/**
 * Connect ↔ gRPC transcoding for the gRPC upstreams (grpc.ts holds the HTTP/2 sessions): the call's
 * request as a gRPC message, and a gRPC answer (headers, messages, trailers) back as a Connect
 * answer, unary or streamed, with the service's metadata and status mapped.
 */
import type { IncomingHttpHeaders } from "node:http2";
import { type DescMethod, type FileRegistry, fromBinary, fromJson, toBinary, toJsonString } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { PlatformError, withDetail } from "../../contracts/errors.ts";
import {
  type CallShape,
  type ConnectCode,
  type ConnectErrorBody,
  codeOfGrpcHttpStatus,
  codeOfGrpcStatus,
  connectErrorResponse,
  END_STREAM_FLAG,
  envelope,
  percentDecode,
  rpcError,
} from "./errors.ts";
import { FrameReader, inflate, messageTooLarge } from "./frames.ts";
import { passesToClient } from "./upstream.ts";
import type { RpcReplica } from "./types.ts";

export type TranscodedCall = {
  key: string;
  service: string;
  replicas: RpcReplica[];
  /** `<package>.<Service>` and `<Method>`, as the path names them. */
  rpcService: string;
  methodName: string;
  registry: FileRegistry;
  shape: CallShape;
  httpMethod: "GET" | "POST";
  contentType: string | undefined;
  contentEncoding: string | undefined;
  /** A GET's query (Connect's `encoding`, `message`, `base64`, `compression`). */
  query: URLSearchParams;
  /** Metadata for the service: the caller's own headers, already without the stripped ones. */
  metadata: Record<string, string>;
  body: Uint8Array | undefined;
  timeoutMs: number | undefined;
  onClientGone: (fn: () => void) => void;
  finish: (code: string) => void;
};

/** Headers of a gRPC answer that are the protocol's, not the service's metadata. */
const PROTOCOL_HEADERS = new Set([
  "content-type",
  "content-length",
  "grpc-status",
  "grpc-message",
  "grpc-status-details-bin",
  "grpc-encoding",
  "grpc-accept-encoding",
  "date",
  "server",
]);
/** Request headers that are Connect's or HTTP's, not metadata for the service. */
const CONNECT_REQUEST_HEADERS =
  /^(content-type|content-encoding|accept-encoding|connect-.*|grpc-.*|accept|user-agent)$/;

/** Connect's codecs, by the request's content type. */
type Codec = "json" | "proto";

/** What a gRPC answer is made of, gathered or streamed. */
export type Answer = {
  headers: IncomingHttpHeaders;
  /** Each message as it arrives (already decompressed); `end`: the trailers, or the failure. */
  onMessage: (fn: (bytes: Uint8Array) => void) => void;
  ended: Promise<{ trailers: IncomingHttpHeaders } | { failed: PlatformError }>;
  cancel: () => void;
};

const bareType = (contentType: string | undefined) => contentType?.split(";")[0]?.trim().toLowerCase() ?? "";

/** The call's request as the gRPC message's bytes, and the codec its answer is written in. */
export function requestOf(
  call: TranscodedCall,
  method: DescMethod,
  max: number,
): { codec: Codec; message: Uint8Array } {
  if (call.shape === "grpc-web") {
    throw rpcError(
      "unimplemented",
      "gRPC-Web is not transcoded for gRPC services; call them with the Connect protocol",
    );
  }
  if (method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming") {
    throw rpcError(
      "unimplemented",
      `${call.rpcService}/${call.methodName} is a ${method.methodKind.replace("_", "-")} method, which the gateway does not carry over HTTP/1.1`,
    );
  }
  const streaming = method.methodKind === "server_streaming";
  if (streaming !== (call.shape === "connect-stream")) {
    throw rpcError(
      "invalid_argument",
      streaming
        ? `${call.rpcService}/${call.methodName} is a server-streaming method: send application/connect+json or application/connect+proto`
        : `${call.rpcService}/${call.methodName} is a unary method: send application/json or application/proto`,
    );
  }
  let codec: Codec;
  let payload: Uint8Array;
  if (call.httpMethod === "GET") {
    const encoding = call.query.get("encoding");
    if (encoding !== "json" && encoding !== "proto")
      throw rpcError("invalid_argument", "a GET call needs encoding=json or encoding=proto");
    codec = encoding;
    const text = call.query.get("message") ?? "";
    payload = call.query.get("base64") === "1" ? Buffer.from(text, "base64") : Buffer.from(text, "utf8");
    payload = decompress(payload, call.query.get("compression") ?? undefined, max);
  } else if (call.shape === "connect-stream") {
    const type = bareType(call.contentType);
    codec =
      type === "application/connect+json" ? "json" : type === "application/connect+proto" ? "proto" : unsupported(type);
    payload = onlyMessage(call.body ?? new Uint8Array(), call.contentEncoding, max);
  } else {
    const type = bareType(call.contentType);
    codec = type === "application/json" ? "json" : type === "application/proto" ? "proto" : unsupported(type);
    payload = decompress(call.body ?? new Uint8Array(), call.contentEncoding, max);
  }
  if (codec === "proto") return { codec, message: payload };
  try {
    const text = Buffer.from(payload).toString("utf8");
    const json: unknown = text.trim() === "" ? {} : JSON.parse(text);
    return {
      codec,
      message: toBinary(method.input, fromJson(method.input, json as never, { registry: call.registry })),
    };
  } catch (e) {
    throw rpcError(
      "invalid_argument",
      `cannot decode the request as ${method.input.typeName}: ${(e as Error).message}`,
    );
  }
}

function unsupported(type: string): never {
  throw new PlatformError(415, "invalid_argument", `unsupported content type "${type}" for a Connect call`);
}

function decompress(bytes: Uint8Array, encoding: string | undefined, max: number): Uint8Array {
  if (encoding === undefined || encoding === "" || encoding === "identity") {
    if (bytes.length > max) throw messageTooLarge(max, "request", bytes.length);
    return bytes;
  }
  if (encoding === "gzip") {
    try {
      return inflate(bytes, max, "request");
    } catch (e) {
      if (e instanceof PlatformError) throw e;
      throw rpcError("invalid_argument", `the request is not valid gzip: ${(e as Error).message}`);
    }
  }
  throw rpcError("unimplemented", `unsupported compression "${encoding}"; use gzip or none`);
}

/** A Connect stream's request: exactly one enveloped message for a server-streaming call. */
function onlyMessage(body: Uint8Array, encoding: string | undefined, max: number): Uint8Array {
  const messages: Uint8Array[] = [];
  let compressed = false;
  const reader = new FrameReader(
    () => true,
    (flags, payload) => {
      compressed ||= (flags & 0x01) !== 0;
      if (payload) messages.push(payload);
    },
    { bytes: max, whose: "request" },
  );
  reader.push(body);
  if (messages.length !== 1 || !reader.atBoundary) {
    throw rpcError("invalid_argument", `a server-streaming call sends exactly one message, got ${messages.length}`);
  }
  const message = messages[0] as Uint8Array;
  return compressed ? decompress(message, encoding, max) : message;
}

/** A message of `method`'s output in the caller's codec. */
function encode(method: DescMethod, codec: Codec, bytes: Uint8Array, registry: FileRegistry): Uint8Array {
  if (codec === "proto") return bytes;
  return Buffer.from(toJsonString(method.output, fromBinary(method.output, bytes), { registry }));
}

/** The call's final status, from the trailers (or a trailers-only answer's headers). */
function statusOf(headers: IncomingHttpHeaders, trailers: IncomingHttpHeaders): ConnectErrorBody | "ok" {
  const status = Number(headers[":status"]);
  const grpcStatus = trailers["grpc-status"];
  if (grpcStatus === undefined) {
    if (status !== 200) return { code: codeOfGrpcHttpStatus(status), message: `the service answered HTTP ${status}` };
    return { code: "internal", message: "the service's answer carried no grpc-status" };
  }
  const code = codeOfGrpcStatus(Number(grpcStatus));
  if (code === "ok") return "ok";
  const message = trailers["grpc-message"];
  const details = detailsOf(trailers["grpc-status-details-bin"]);
  return {
    code,
    ...(typeof message === "string" && message !== "" ? { message: percentDecode(message) } : {}),
    ...(details.length > 0 ? { details } : {}),
  };
}

/**
 * `grpc-status-details-bin`, a google.rpc.Status (code 1, message 2, details 3: Any with type_url 1
 * and value 2), as Connect's `details`: the type's full name and the value in unpadded base64.
 */
function detailsOf(header: string | string[] | undefined): NonNullable<ConnectErrorBody["details"]> {
  if (typeof header !== "string") return [];
  try {
    const details: NonNullable<ConnectErrorBody["details"]> = [];
    const status = new BinaryReader(Buffer.from(header, "base64"));
    while (status.pos < status.len) {
      const [field, wire] = status.tag();
      if (field !== 3) {
        status.skip(wire);
        continue;
      }
      const any = new BinaryReader(status.bytes());
      let type = "";
      let value: Uint8Array = new Uint8Array();
      while (any.pos < any.len) {
        const [f, w] = any.tag();
        if (f === 1) type = any.string();
        else if (f === 2) value = any.bytes();
        else any.skip(w);
      }
      details.push({
        type: type.slice(type.lastIndexOf("/") + 1),
        value: Buffer.from(value).toString("base64").replace(/=+$/, ""),
      });
    }
    return details;
  } catch {
    return [];
  }
}

/** The service's metadata for a Connect answer: its headers as they are, its trailers as headers (`trailer-` for unary) or as the end-stream's metadata. */
function metadataOf(h: IncomingHttpHeaders): [string, string][] {
  const out: [string, string][] = [];
  for (const [name, value] of Object.entries(h)) {
    if (name.startsWith(":") || PROTOCOL_HEADERS.has(name) || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) out.push([name, v]);
  }
  return out;
}

export async function unary(
  answer: Answer,
  call: TranscodedCall,
  method: DescMethod,
  codec: Codec,
  signal: AbortSignal,
): Promise<Response> {
  const messages: Uint8Array[] = [];
  answer.onMessage((bytes) => messages.push(bytes));
  const abort = () => answer.cancel();
  signal.addEventListener("abort", abort, { once: true });
  const end = await answer.ended;
  signal.removeEventListener("abort", abort);
  if ("failed" in end) throw end.failed;
  const headers = new Headers();
  for (const [name, value] of metadataOf(answer.headers)) if (passesToClient(name)) headers.append(name, value);
  for (const [name, value] of metadataOf(end.trailers)) headers.append(`trailer-${name}`, value);
  const status = statusOf(answer.headers, end.trailers);
  if (status !== "ok") {
    call.finish(status.code);
    return connectErrorResponse("unary", undefined, status, { headers });
  }
  if (messages.length !== 1) {
    throw rpcError("unimplemented", `the service answered a unary call with ${messages.length} messages`);
  }
  let body: Uint8Array;
  try {
    body = encode(method, codec, messages[0] as Uint8Array, call.registry);
  } catch (e) {
    throw withDetail(rpcError("internal", `the service's answer is not a valid ${method.output.typeName}`), e);
  }
  headers.set("content-type", codec === "json" ? "application/json" : "application/proto");
  call.finish("ok");
  return new Response(body, { status: 200, headers });
}

/** A server stream: each gRPC message becomes a Connect message as it arrives; the trailers its end-stream message. */
export function streamed(
  answer: Answer,
  call: TranscodedCall,
  method: DescMethod,
  codec: Codec,
  signal: AbortSignal,
  done: () => void,
): Response {
  const headers = new Headers();
  for (const [name, value] of metadataOf(answer.headers)) if (passesToClient(name)) headers.append(name, value);
  headers.set("content-type", `application/connect+${codec}`);
  let finished = false;
  const finish = (code: string) => {
    if (finished) return;
    finished = true;
    done();
    call.finish(code);
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      let broken = false;
      answer.onMessage((bytes) => {
        if (broken) return;
        try {
          controller.enqueue(envelope(0, encode(method, codec, bytes, call.registry)));
        } catch {
          broken = true;
          answer.cancel();
        }
      });
      signal.addEventListener("abort", () => answer.cancel(), { once: true });
      void answer.ended.then((end) => {
        let error: ConnectErrorBody | undefined;
        let metadata: Record<string, string[]> | undefined;
        if (broken)
          error = {
            code: "internal",
            message: `the service sent a message that is not a valid ${method.output.typeName}`,
          };
        else if ("failed" in end) error = { code: end.failed.code as ConnectCode, message: end.failed.message };
        else {
          const status = statusOf(answer.headers, end.trailers);
          if (status !== "ok") error = status;
          const pairs = metadataOf(end.trailers);
          if (pairs.length > 0) {
            metadata = {};
            for (const [name, value] of pairs) {
              const values = metadata[name] ?? [];
              values.push(value);
              metadata[name] = values;
            }
          }
        }
        finish(error?.code ?? "ok");
        try {
          controller.enqueue(
            envelope(
              END_STREAM_FLAG,
              Buffer.from(JSON.stringify({ ...(error ? { error } : {}), ...(metadata ? { metadata } : {}) })),
            ),
          );
          controller.close();
        } catch {
          // The client left already.
        }
      });
    },
    cancel() {
      answer.cancel();
      finish("canceled");
    },
  });
  return new Response(body, { status: 200, headers });
}

/** Request headers that are the caller's metadata for the service (not Connect's or HTTP's own). */
export function isMetadata(name: string): boolean {
  return !CONNECT_REQUEST_HEADERS.test(name);
}
