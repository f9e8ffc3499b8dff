/**
 * Fetching what a registration names into scratch space (src/models/import.ts decides what it
 * is and records it): one file, copied or downloaded and hashed on the way. A checkpoint
 * directory's files are fetch-checkpoint.ts's.
 */
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { stat } from "node:fs/promises";
import { type Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { SourcePolicy } from "../settings/sources.ts";
import { openObject, type S3Settings } from "../storage/index.ts";
import type { ObjectStore } from "../storage/store.ts";
import { downloadFile, parseHubRepo } from "./download.ts";
import { checkSourceScheme, huggingFaceUrl, isRemoteSource, type SourceProgress } from "./sources.ts";

/** Where a registration's bytes come from. */
export type SourceRequest = {
  /** Where it comes from, as the user wrote it; kept on the record. */
  source: string;
  /** The artifact's bytes, when uploaded instead of fetched from `source`. */
  body?: Readable;
  /** A checkpoint directory uploaded as a tar stream (src/models/tar.ts) instead of fetched from `source`. */
  tar?: Readable;
  /**
   * A checkpoint directory the caller has already confined: a local directory, or the files under
   * `prefix` of a store (an s3:// prefix). Without it, `source` names one (a local directory, an
   * s3:// URI ending in "/", hf://org/repo[@revision]) or a single file. A store given here is
   * closed once its files are read.
   */
  directory?: { path: string } | { store: ObjectStore; prefix: string };
  /** Called as a remote source downloads (bytes so far, and the total when the server said it). */
  onProgress?: (p: SourceProgress) => void;
};

/** Whether the request is for a checkpoint directory rather than one file. */
export async function isDirectoryRequest(req: SourceRequest): Promise<boolean> {
  return (
    req.body === undefined &&
    (req.tar !== undefined || req.directory !== undefined || (await namesDirectory(req.source)))
  );
}

/** Copies the one file the request names (or uploads) to `dest`, hashing it. */
export async function fetchFile(
  req: SourceRequest,
  dest: string,
  policy: SourcePolicy,
  s3: S3Settings | undefined,
): Promise<{ sha256: string; size: number }> {
  if (req.body) return copyHashing(req.body, dest);
  if (isRemoteSource(req.source)) return download(req.source, dest, policy, req.onProgress);
  return copyHashing(await openSource(req.source, s3), dest);
}

async function openSource(source: string, s3: S3Settings | undefined): Promise<Readable> {
  checkSourceScheme(source);
  // file://, s3:// and plain paths all go through the storage module.
  const { store, key } = openObject(source, s3);
  return store.get(key);
}

/** A remote single file (https://, hf://org/repo/file), resumed after a broken connection. */
async function download(
  source: string,
  dest: string,
  policy: SourcePolicy,
  onProgress?: (p: SourceProgress) => void,
): Promise<{ sha256: string; size: number }> {
  checkSourceScheme(source);
  const hub = /^hf:\/\//i.test(source);
  return downloadFile(hub ? huggingFaceUrl(source, policy.hfEndpoint) : source, dest, policy, {
    hub,
    onBytes: (received, total) => onProgress?.({ received, total }),
  });
}

/** Whether `source` (not uploaded, not opened by the caller) names a checkpoint directory rather than one file. */
async function namesDirectory(source: string): Promise<boolean> {
  if (parseHubRepo(source)) return true;
  if (/^s3:\/\//i.test(source)) return source.endsWith("/");
  if (isRemoteSource(source) || (/^[a-z][a-z0-9+.-]+:/i.test(source) && !/^file:/i.test(source))) return false;
  const path = /^file:/i.test(source) ? new URL(source).pathname : source;
  return (await stat(path).catch(() => undefined))?.isDirectory() ?? false;
}

async function copyHashing(input: Readable, dest: string): Promise<{ sha256: string; size: number }> {
  const hash = createHash("sha256");
  let size = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      size += chunk.length;
      done(null, chunk);
    },
  });
  await pipeline(input, tap, createWriteStream(dest));
  return { sha256: hash.digest("hex"), size };
}
