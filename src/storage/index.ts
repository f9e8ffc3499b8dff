/**
 * Object storage: model artifacts and batch input/output. A root is a plain
 * path or file:// URL (a local directory) or s3://bucket/prefix.
 */
import { basename, dirname } from "node:path";
import { StorageError } from "./errors.ts";
import { FileStore } from "./file-store.ts";
import type { S3Settings } from "./s3-settings.ts";
import { S3Store } from "./s3-store.ts";
import type { ObjectStore } from "./store.ts";
import { parseStorageUri, s3Url } from "./uri.ts";

export { StorageError, isStorageError } from "./errors.ts";
export type { StorageErrorCode } from "./errors.ts";
export { FileStore } from "./file-store.ts";
export type { S3Settings } from "./s3-settings.ts";
export { S3Store } from "./s3-store.ts";
export type { Body, ObjectInfo, ObjectStore } from "./store.ts";
export { checkObjectKey, checkPrefix, parseStorageUri } from "./uri.ts";
export type { FileLocation, S3Location, StorageLocation } from "./uri.ts";

/**
 * Opens the store rooted at `rootUri`; nothing is contacted until first use. `s3`: the process's
 * settings.storage.s3 (AWS_*); without it, the SDK's own defaults and credential chain.
 */
export function openStore(rootUri: string, s3: S3Settings = {}): ObjectStore {
  const location = parseStorageUri(rootUri);
  if (location.scheme === "file") return new FileStore(location.path);
  return new S3Store(location, s3);
}

/**
 * Splits the URI of one object (s3://bucket/in/prompts.jsonl, ./out.jsonl)
 * into the store rooted at its parent and its key there.
 */
export function openObject(uri: string, s3: S3Settings = {}): { store: ObjectStore; key: string } {
  const location = parseStorageUri(uri);
  const notAnObject = (why: string) =>
    new StorageError("invalid_uri", uri, `invalid storage URI "${uri}": ${why}, not an object`);
  if (uri.endsWith("/")) throw notAnObject("names a directory or prefix");
  if (location.scheme === "file") {
    if (location.path === "/") throw notAnObject("names the root directory");
    return { store: new FileStore(dirname(location.path)), key: basename(location.path) };
  }
  if (location.key === "") throw notAnObject(`names bucket "${location.bucket}"`);
  const slash = location.key.lastIndexOf("/");
  const parent = { ...location, key: location.key.slice(0, Math.max(slash, 0)) };
  parent.url = s3Url(parent.bucket, parent.key);
  return { store: new S3Store(parent, s3), key: location.key.slice(slash + 1) };
}
