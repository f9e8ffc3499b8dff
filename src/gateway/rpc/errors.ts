/**
 * Errors on `/rpc/*` in Connect's shape (connectrpc.com/docs/protocol): `{"code", "message"}`
 * with Connect's HTTP status for a unary call, an end-stream message for a Connect stream, a
 * trailers-only answer for gRPC-Web. The gateway's own errors (no key, unknown service, rate
 * limited, no replica, deadline, body too big) are PlatformErrors like everywhere else and are
 * turned into this shape here, so Connect clients read them as they read a service's own.
 */
import { PlatformError } from "../../contracts/errors.ts";

export const CONNECT_CODES = [
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
] as const;
export type ConnectCode = (typeof CONNECT_CODES)[number];

/** Connect's HTTP status for each code. */
export const CONNECT_STATUS: Record<ConnectCode, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
};

const isConnectCode = (code: string): code is ConnectCode => (CONNECT_CODES as readonly string[]).includes(code);

/** A gRPC status number as Connect's code (gRPC numbers them in CONNECT_CODES's order, from 1; 0 is ok). */
export function codeOfGrpcStatus(status: number): ConnectCode | "ok" {
  if (status === 0) return "ok";
  return CONNECT_CODES[status - 1] ?? "unknown";
}

export function grpcStatusOf(code: ConnectCode): number {
  return CONNECT_CODES.indexOf(code) + 1;
}

/** The code of an answer without a gRPC status (a proxy's 502, a server's 404), as gRPC's spec maps HTTP statuses. */
export function codeOfGrpcHttpStatus(status: number): ConnectCode {
  if (status === 400) return "internal";
  if (status === 401) return "unauthenticated";
  if (status === 403) return "permission_denied";
  if (status === 404) return "unimplemented";
  if (status === 429 || status === 502 || status === 503 || status === 504) return "unavailable";
  return "unknown";
}

/** An error the `/rpc/*` routes raise themselves: a PlatformError whose code is Connect's and whose status is Connect's for it. */
export function rpcError(code: ConnectCode, message: string, retryAfter?: number): PlatformError {
  return new PlatformError(CONNECT_STATUS[code], code, message, null, retryAfter);
}

/**
 * A gateway error's Connect code: its own when it is one (rpcError), otherwise by HTTP status
 * (requireCaller's 401, the limiter's 429, the body limit's 413, a 500 from anywhere).
 */
export function connectCodeOf(err: PlatformError): ConnectCode {
  if (isConnectCode(err.code)) return err.code;
  switch (err.status) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 408:
    case 504:
      return "deadline_exceeded";
    case 409:
      return "already_exists";
    case 413:
    case 429:
      return "resource_exhausted";
    case 499:
      return "canceled";
    case 501:
      return "unimplemented";
    case 503:
      return "unavailable";
    default:
      return err.status >= 500 ? "internal" : "unknown";
  }
}

/** How the caller speaks, read from its content type: what shape an error must take for it. */
export type CallShape = "unary" | "connect-stream" | "grpc-web";

export function shapeOf(contentType: string | undefined): CallShape {
  const type = contentType?.split(";")[0]?.trim().toLowerCase() ?? "";
  if (type.startsWith("application/connect+")) return "connect-stream";
  if (type.startsWith("application/grpc-web")) return "grpc-web";
  return "unary";
}

/** A 5-byte envelope (flags, big-endian length) and its bytes: Connect streams' and gRPC's message frame. */
export function envelope(flags: number, bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + bytes.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, bytes.length);
  out.set(bytes, 5);
  return out;
}

/** The flag of a Connect stream's end-stream message (always JSON, whatever the codec). */
export const END_STREAM_FLAG = 0x02;

/** gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%` itself. */
export function percentEncode(text: string): string {
  let out = "";
  for (const b of Buffer.from(text, "utf8")) {
    out +=
      b < 0x20 || b > 0x7e || b === 0x25 ? `%${b.toString(16).toUpperCase().padStart(2, "0")}` : String.fromCharCode(b);
  }
  return out;
}

/** The inverse; a malformed escape is kept as it is (gRPC asks receivers to be lenient). */
export function percentDecode(text: string): string {
  if (!text.includes("%")) return text;
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const hex = text.slice(i + 1, i + 3);
    if (text[i] === "%" && /^[0-9a-fA-F]{2}$/.test(hex)) {
      bytes.push(Number.parseInt(hex, 16));
      i += 2;
    } else bytes.push(...Buffer.from(text[i] as string, "utf8"));
  }
  return Buffer.from(bytes).toString("utf8");
}

export type ConnectErrorBody = { code: ConnectCode; message?: string; details?: { type: string; value: string }[] };

/**
 * The error as a response of the call's shape. A unary call gets `status` (Connect's for the code
 * unless the caller says otherwise, as for a 413) and the JSON body; a stream 200 and an end-stream
 * message; gRPC-Web 200 and the status in its headers (trailers-only). `headers`: beside those
 * (Retry-After, rate-limit headers).
 */
export function connectErrorResponse(
  shape: CallShape,
  contentType: string | undefined,
  error: ConnectErrorBody,
  options: { status?: number; headers?: Headers; metadata?: Record<string, string[]> } = {},
): Response {
  const headers = new Headers(options.headers);
  if (shape === "connect-stream") {
    const end = JSON.stringify({ error, ...(options.metadata ? { metadata: options.metadata } : {}) });
    headers.set("content-type", contentType ?? "application/connect+json");
    return new Response(envelope(END_STREAM_FLAG, Buffer.from(end)), { status: 200, headers });
  }
  if (shape === "grpc-web") {
    headers.set("content-type", contentType ?? "application/grpc-web+proto");
    headers.set("grpc-status", String(grpcStatusOf(error.code)));
    if (error.message) headers.set("grpc-message", percentEncode(error.message));
    return new Response(null, { status: 200, headers });
  }
  headers.set("content-type", "application/json");
  return new Response(JSON.stringify(error), { status: options.status ?? CONNECT_STATUS[error.code], headers });
}
