/**
 * Storage URIs and object keys. A root or object is named by a plain path
 * (relative ones resolve against the working directory), a file:// URL, or
 * s3://bucket/key. Keys are '/'-separated and may never climb out of a root.
 */
import { isAbsolute, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { StorageError } from "./errors.ts";

export type FileLocation = {
  scheme: "file";
  /** Absolute, normalised, no trailing slash (except "/" itself). */
  path: string;
  /** The canonical file:// URL of `path`. */
  url: string;
};

export type S3Location = {
  scheme: "s3";
  bucket: string;
  /** The key or key prefix inside the bucket, without leading or trailing "/"; "" for the whole bucket. */
  key: string;
  /** The canonical s3:// URI. */
  url: string;
};

export type StorageLocation = FileLocation | S3Location;

const SCHEME = /^([a-z][a-z0-9+.-]+):/i;
// The rules AWS enforces for new buckets; MinIO, Ceph and R2 follow them too.
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const MAX_KEY_BYTES = 1024;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL = /[\u0000-\u001f\u007f]/;

export function parseStorageUri(uri: string, cwd: string = process.cwd()): StorageLocation {
  if (uri.trim() === "") throw invalidUri(uri, "expected a path, file:// or s3://");
  const scheme = SCHEME.exec(uri)?.[1]?.toLowerCase();
  if (scheme === undefined) {
    const path = resolve(cwd, uri);
    return { scheme: "file", path, url: fileUrl(path) };
  }
  if (scheme === "file") return parseFileUrl(uri);
  if (scheme === "s3") return parseS3Uri(uri);
  throw new StorageError("invalid_uri", uri, `unsupported storage URI "${uri}": expected a path, file:// or s3://`);
}

function parseFileUrl(uri: string): FileLocation {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw invalidUri(uri, "not a valid file:// URL");
  }
  if (url.search !== "" || url.hash !== "") throw invalidUri(uri, "a file:// URL may not carry a query or fragment");
  if (url.hostname !== "" && url.hostname !== "localhost") {
    throw invalidUri(uri, `a file:// URL needs an absolute path, e.g. file:///${url.hostname}${url.pathname}`);
  }
  let path: string;
  try {
    path = fileURLToPath(url);
  } catch (error) {
    throw invalidUri(uri, error instanceof Error ? error.message : String(error));
  }
  const normalised = resolve(path);
  return { scheme: "file", path: normalised, url: fileUrl(normalised) };
}

function parseS3Uri(uri: string): S3Location {
  if (!/^s3:\/\//i.test(uri)) throw invalidUri(uri, "expected s3://bucket/key");
  const rest = uri.slice("s3://".length);
  const slash = rest.indexOf("/");
  const bucket = slash === -1 ? rest : rest.slice(0, slash);
  if (bucket === "") throw invalidUri(uri, "missing bucket name, expected s3://bucket/key");
  if (!BUCKET.test(bucket)) {
    throw invalidUri(
      uri,
      `invalid bucket name "${bucket}": 3-63 lowercase letters, digits, "." or "-", starting and ending with a letter or digit`,
    );
  }
  const key = slash === -1 ? "" : rest.slice(slash + 1).replace(/\/$/, "");
  if (key !== "") {
    const problem = keyProblem(key);
    if (problem !== undefined) throw invalidUri(uri, problem);
  }
  return { scheme: "s3", bucket, key, url: s3Url(bucket, key) };
}

/** Validates an object key (relative to a store root); returns it unchanged. */
export function checkObjectKey(key: string, root?: string): string {
  const problem = key === "" ? "a key may not be empty" : keyProblem(key);
  if (problem !== undefined) throw invalidKey(key, root, problem);
  return key;
}

/**
 * Validates a listing prefix: "" (everything), a directory-like "a/b/", or a
 * partial name "a/b/2024-". Only whole-segment rules apply to its last segment.
 */
export function checkPrefix(prefix: string, root?: string): string {
  if (prefix === "") return prefix;
  const problem = keyProblem(prefix.endsWith("/") ? prefix.slice(0, -1) : prefix);
  if (problem !== undefined) throw invalidKey(prefix, root, problem);
  return prefix;
}

function keyProblem(key: string): string | undefined {
  if (CONTROL.test(key)) return "control characters are not allowed";
  if (key.includes("\\")) return 'use "/" to separate key segments, not "\\"';
  if (Buffer.byteLength(key) > MAX_KEY_BYTES) return `longer than ${MAX_KEY_BYTES} bytes`;
  if (key.startsWith("/")) return 'a key may not start with "/"';
  for (const segment of key.split("/")) {
    if (segment === "") return 'empty segment ("//" or a trailing "/")';
    if (segment === "..") return '".." segments would escape the store root';
    if (segment === ".") return '"." segments are not allowed';
  }
  return undefined;
}

/** "a/b" + "c" → "a/b/c"; "" + "c" → "c". */
export function joinKey(prefix: string, key: string): string {
  if (prefix === "") return key;
  if (key === "") return prefix;
  return `${prefix}/${key}`;
}

export function s3Url(bucket: string, key: string): string {
  return key === "" ? `s3://${bucket}` : `s3://${bucket}/${key}`;
}

export function fileUrl(path: string): string {
  if (!isAbsolute(path)) throw new Error(`fileUrl: expected an absolute path, got "${path}"`);
  return pathToFileURL(path).href;
}

function invalidUri(uri: string, why: string): StorageError {
  return new StorageError("invalid_uri", uri, `invalid storage URI "${uri}": ${why}`);
}

function invalidKey(key: string, root: string | undefined, why: string): StorageError {
  const where = root === undefined ? "" : ` under ${root}`;
  return new StorageError("invalid_uri", key, `invalid object key "${key}"${where}: ${why}`);
}
