import type { JobError } from "./job.ts";
import type { z } from "zod";
import { describeIssues } from "./issues.ts";

/**
 * The one error type that crosses module boundaries. It carries what the
 * OpenAI error envelope needs, so the gateway can answer any failure exactly.
 */
export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "rate_limit_error"
  | "server_error";

export class PlatformError extends Error {
  readonly status: number;
  readonly code: string;
  readonly param: string | null;
  readonly type: ErrorType;
  /** Seconds, sent as Retry-After on 429/503. */
  readonly retryAfter: number | undefined;

  constructor(status: number, code: string, message: string, param: string | null = null, retryAfter?: number) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
    this.type = errorTypeFor(status);
    this.retryAfter = retryAfter;
  }
}

/**
 * Details a client must not see (server paths, Redis addresses, engine and stack text), kept
 * beside the error that carries the public message. The gateway logs them with the request id
 * and tells the client that id (src/gateway/errors.ts, `clientError`).
 */
const details = new WeakMap<PlatformError, unknown>();

export function withDetail(err: PlatformError, detail: unknown): PlatformError {
  details.set(err, detail);
  return err;
}

export function detailOf(err: PlatformError): { detail: unknown } | undefined {
  return details.has(err) ? { detail: details.get(err) } : undefined;
}

/** A failure a worker reported for a job (the queue contract's JobError), as the gateway answers it. */
export function fromJobError(error: JobError): PlatformError {
  return new PlatformError(error.status, error.code, error.message, error.param, error.retry_after);
}

/** Job error codes whose messages the platform writes itself, with nothing from the server in them. */
const PLATFORM_WORDED = new Set(["replica_lost", "queue_timeout", "timeout", "engine_busy", "not_ready", "cancelled"]);

/**
 * A failure a worker reported, as the client may see it: 4xx messages are about the request
 * (context length, a bad field) and pass; a 5xx message from the engine may quote paths or
 * library text, so it stays in the log.
 */
export function publicJobError(error: JobError): PlatformError {
  const err = fromJobError(error);
  if (error.status < 500 || PLATFORM_WORDED.has(error.code)) return err;
  const message =
    error.code === "engine_error"
      ? "the engine failed while serving this request"
      : `the request failed (${error.code})`;
  return withDetail(new PlatformError(error.status, error.code, message, null, error.retry_after), error.message);
}

/** OpenAI's error envelope: how every error reaches a client, whole or inside a stream or a batch line. */
export type ErrorEnvelope = { error: { message: string; type: ErrorType; param: string | null; code: string | null } };

export function errorEnvelope(err: PlatformError): ErrorEnvelope {
  return { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
}

export function errorTypeFor(status: number): ErrorType {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "invalid_request_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

/**
 * A request body checked against its schema: a 400 `invalid_request` naming every bad field
 * (`describeIssues`), the first one as `param`. The nouns' `create` methods take bodies through it.
 */
export function parseRequest<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  throw new PlatformError(
    400,
    "invalid_request",
    describeIssues(parsed.error),
    parsed.error.issues[0]?.path.join(".") || null,
  );
}
