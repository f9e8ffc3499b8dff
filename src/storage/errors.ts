/**
 * One error type for every storage failure, whatever the backend. The message
 * always names the URI involved, so a user reading a batch job's status or a
 * CLI error knows which object (or which bucket) is at fault; it never carries
 * the backend's own text (Node's messages quote server paths, the SDK's name
 * endpoints), which is logged instead.
 */
import { PlatformError } from "../contracts/errors.ts";
import { logger } from "../telemetry/log.ts";

const log = logger("storage");

export type StorageErrorCode =
  | "not_found"
  | "no_such_bucket"
  | "access_denied"
  | "invalid_uri"
  | "unwritable"
  | "unavailable"
  /** A write that may not replace an existing object found one. */
  | "exists";

// Callers that know better (a batch job's input is the user's fault, an
// artifact is ours) re-wrap; these are the defaults the gateway falls back to.
const STATUS: Record<StorageErrorCode, number> = {
  not_found: 404,
  no_such_bucket: 404,
  access_denied: 403,
  invalid_uri: 400,
  unwritable: 400,
  unavailable: 503,
  exists: 409,
};

export class StorageError extends PlatformError {
  declare readonly code: StorageErrorCode;
  /** The object, prefix or root URI the failure concerns (the raw input for invalid_uri). */
  readonly uri: string;

  constructor(code: StorageErrorCode, uri: string, message: string, cause?: unknown) {
    super(STATUS[code], code, message);
    this.name = "StorageError";
    this.uri = uri;
    if (cause !== undefined) this.cause = cause;
  }
}

export function isStorageError(error: unknown, code?: StorageErrorCode): error is StorageError {
  return error instanceof StorageError && (code === undefined || error.code === code);
}

type FsOperation = "read" | "write";

const FS_DETAIL: Record<string, string> = {
  ENOENT: "no such file or directory",
  ENOTDIR: "a parent path is not a directory",
  EISDIR: "it is a directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EROFS: "read-only file system",
  ENOSPC: "no space left on device",
  EDQUOT: "disk quota exceeded",
  EMFILE: "too many open files",
  EIO: "input/output error",
  ELOOP: "too many levels of symbolic links",
  ENAMETOOLONG: "file name too long",
  EBUSY: "resource busy",
  EEXIST: "file exists",
  EXDEV: "cross-device link",
  EINVAL: "invalid argument",
  ENOTEMPTY: "directory not empty",
  EFBIG: "file too large",
  ETXTBSY: "text file busy",
  ESTALE: "stale file handle",
};

/** Maps a node:fs error to a StorageError; `uri` is the object the operation was about. */
export function fromFsError(error: unknown, uri: string, operation: FsOperation): StorageError {
  if (error instanceof StorageError) return error;
  const code = errorCode(error);
  // Node's message repeats the path (a server path, where `uri` may be shown under another name): the code says enough.
  const detail = code !== undefined ? `${code}: ${FS_DETAIL[code] ?? "file system error"}` : "file system error";
  if (operation === "write") {
    return new StorageError("unwritable", uri, `${uri}: cannot write (${detail})`, error);
  }
  if (code === "ENOENT" || code === "ENOTDIR" || code === "EISDIR") {
    return new StorageError("not_found", uri, `${uri}: no such object`, error);
  }
  if (code === "EACCES" || code === "EPERM") {
    return new StorageError("access_denied", uri, `${uri}: access denied (${detail})`, error);
  }
  return new StorageError("unavailable", uri, `${uri}: cannot read (${detail})`, error);
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
]);

const BAD_CREDENTIALS = new Set(["InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"]);

/**
 * Maps an @aws-sdk/client-s3 error to a StorageError. HEAD responses carry no
 * body, so their errors only have a status ("NotFound", "Unknown"): the
 * status code is checked after the error name.
 */
export function fromS3Error(error: unknown, uri: string, bucket: string, endpoint: string | undefined): StorageError {
  if (error instanceof StorageError) return error;
  const name = errorName(error);
  const status = httpStatus(error);
  const code = errorCode(error);
  const where = endpoint ?? "AWS S3";
  if (name === "NoSuchBucket") {
    return new StorageError("no_such_bucket", uri, `${uri}: no such bucket "${bucket}"`, error);
  }
  if (name === "NoSuchKey" || name === "NotFound" || status === 404) {
    return new StorageError("not_found", uri, `${uri}: no such object`, error);
  }
  if (name !== undefined && BAD_CREDENTIALS.has(name)) {
    return new StorageError(
      "access_denied",
      uri,
      `${uri}: access denied (${name}: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)`,
      error,
    );
  }
  if (name === "CredentialsProviderError") {
    return new StorageError(
      "access_denied",
      uri,
      `${uri}: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)`,
      error,
    );
  }
  if (name === "AccessDenied" || name === "Forbidden" || status === 403) {
    return new StorageError(
      "access_denied",
      uri,
      // S3 answers 403 rather than 404 for a missing key when the caller may not list the bucket.
      `${uri}: access denied (or the object does not exist and the credentials may not list bucket "${bucket}")`,
      error,
    );
  }
  // The endpoint is the operator's address and the SDK's text may quote it: both go to the log only.
  if (
    (code !== undefined && NETWORK_CODES.has(code)) ||
    name === "TimeoutError" ||
    (status !== undefined && status >= 500)
  ) {
    const detail = code ?? name ?? (status !== undefined ? `HTTP ${status}` : "error");
    log.error({ uri }, `${uri}: unavailable at ${where} (${detail}): ${describe(error)}`);
    return new StorageError("unavailable", uri, `${uri}: storage unavailable (${detail})`, error);
  }
  log.error({ uri }, `${uri}: request to ${where} failed (${name ?? "error"}): ${describe(error)}`);
  return new StorageError("unavailable", uri, `${uri}: storage request failed (${name ?? "error"})`, error);
}

function errorCode(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string") return code;
  // The SDK wraps socket errors; the errno code sits on the cause.
  const cause = (error as { cause?: unknown }).cause;
  return cause !== undefined && cause !== error ? errorCode(cause) : undefined;
}

function errorName(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const e = error as { name?: unknown; Code?: unknown };
  if (typeof e.Code === "string") return e.Code;
  return typeof e.name === "string" ? e.name : undefined;
}

function httpStatus(error: unknown): number | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const status = (error as { $metadata?: { httpStatusCode?: unknown } }).$metadata?.httpStatusCode;
  return typeof status === "number" ? status : undefined;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
