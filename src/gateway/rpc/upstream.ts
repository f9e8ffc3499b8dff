/**
 * What both upstream kinds share: the replica a call goes to (round-robin per deployed service,
 * the next one on a retry), which connection failures are safe to retry (nothing reached the
 * service), the headers that cross the gateway (either way), and the call's deadline.
 */
import type { RpcReplica } from "./types.ts";
import { rpcError } from "./errors.ts";

/** Hop-by-hop headers (RFC 9110 7.6.1) and the gateway's own credentials: never forwarded. */
export const STRIPPED_REQUEST_HEADERS = new Set([
  "authorization",
  "cookie",
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length",
  "expect",
  "http2-settings",
]);

/**
 * What of a service's answer headers reaches the client: an allow-list, since the answer goes out
 * on the gateway's origin (a tenant's `Set-Cookie`, `Location`, CORS or security headers must not
 * speak for it). Connect's, gRPC's and gRPC-Web's own headers, Connect unary's `trailer-*`, the
 * body's encoding, and the service's own metadata by the usual custom prefix `x-` (docs/services.md).
 */
const PROTOCOL_RESPONSE_HEADERS = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "accept-encoding",
  "connect-content-encoding",
  "connect-accept-encoding",
  "grpc-status",
  "grpc-message",
  "grpc-status-details-bin",
  "grpc-encoding",
  "grpc-accept-encoding",
]);

export function passesToClient(name: string): boolean {
  const n = name.toLowerCase();
  // The gateway's own x- headers are its own to set.
  if (n === "x-request-id" || n.startsWith("x-ratelimit-")) return false;
  return PROTOCOL_RESPONSE_HEADERS.has(n) || n.startsWith("trailer-") || n.startsWith("x-");
}

/** Connection failures after which the service cannot have seen the call. */
const BEFORE_ANY_BYTE = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "ENOTFOUND"]);
/** Failures of a kept-alive connection the replica closed meanwhile (it stopped): the request never reached a handler. */
const STALE_CONNECTION = new Set(["ECONNRESET", "EPIPE", "ERR_HTTP2_GOAWAY_SESSION", "ERR_HTTP2_SESSION_ERROR"]);

/** Whether a call that failed with `e` before any response may go to another replica. */
export function retryable(e: unknown, reusedConnection: boolean): boolean {
  // HTTP/2 streams fail with their own code (ERR_HTTP2_STREAM_CANCEL); the session's lies in `cause`.
  for (let at = e, depth = 0; at !== undefined && at !== null && depth < 4; depth++) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === "string" && (BEFORE_ANY_BYTE.has(code) || (reusedConnection && STALE_CONNECTION.has(code))))
      return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/** Round-robin over a service's ready replicas; the counter per service survives its replica list changing. */
export class RoundRobin {
  private readonly next = new Map<string, number>();

  /** The replicas to try, in order: the next in turn, then one other for a retry (the same one when it is alone). */
  order(key: string, replicas: RpcReplica[]): [RpcReplica, RpcReplica] {
    const n = this.next.get(key) ?? 0;
    if (this.next.size > 10_000) this.next.clear();
    this.next.set(key, (n + 1) % 1_000_000);
    const first = replicas[n % replicas.length] as RpcReplica;
    const second = replicas[(n + 1) % replicas.length] as RpcReplica;
    return [first, second];
  }
}

/** Connect's `connect-timeout-ms` (at most 10 digits); undefined when absent, a 400 when malformed. */
export function timeoutOf(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  if (!/^\d{1,10}$/.test(header.trim())) {
    throw rpcError(
      "invalid_argument",
      `connect-timeout-ms must be a positive integer of at most 10 digits, got "${header}"`,
    );
  }
  return Number(header.trim());
}

/** gRPC's `grpc-timeout` for `ms`: at most 8 digits, so long deadlines go in seconds. */
export function grpcTimeout(ms: number): string {
  return ms <= 99_999_999 ? `${ms}m` : `${Math.min(Math.ceil(ms / 1000), 99_999_999)}S`;
}

/** gRPC-Web's `grpc-timeout` (up to 8 digits and a unit) in milliseconds; undefined when absent, a 400 when malformed. */
export function grpcTimeoutOf(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(header.trim());
  if (!m)
    throw rpcError(
      "invalid_argument",
      `grpc-timeout must be up to 8 digits and a unit (H, M, S, m, u, n), got "${header}"`,
    );
  const unitMs = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000_001 }[m[2] as "H"];
  return Math.ceil(Number(m[1]) * unitMs);
}

function deadlineExceeded(ms: number) {
  return rpcError("deadline_exceeded", `the call did not complete within its deadline of ${ms} ms`);
}

/**
 * What ends a forwarded call early: its deadline (`deadline_exceeded`) or its client going away
 * (`canceled`). `done` clears the deadline once the call has ended.
 */
export function callAbort(
  timeoutMs: number | undefined,
  onClientGone: (listener: () => void) => void,
): { signal: AbortSignal; done: () => void } {
  const control = new AbortController();
  const timer =
    timeoutMs === undefined ? undefined : setTimeout(() => control.abort(deadlineExceeded(timeoutMs)), timeoutMs);
  onClientGone(() => control.abort(rpcError("canceled", "the client went away")));
  return { signal: control.signal, done: () => clearTimeout(timer) };
}
