/** The one interface both backends implement; see index.ts for how to open one. */
import type { Readable } from "node:stream";

/**
 * What put() accepts. A stream is consumed once, chunk by chunk; if it fails,
 * put() rejects with the stream's own error and nothing is written.
 */
export type Body = Readable | AsyncIterable<Uint8Array | string> | Uint8Array | string;

export type ObjectInfo = { key: string; size: number };

export interface ObjectStore {
  /** The root URI: file:///abs/dir or s3://bucket[/prefix]. */
  readonly url: string;
  /** The full URI of `key` under this root (file:// or s3://). */
  uri(key: string): string;
  /** Writes `key` atomically: readers see the old object or the whole new one, never a part. */
  put(key: string, body: Body): Promise<{ size: number }>;
  /** Streams `key` from byte `range.start` (an empty stream at or past the end). */
  get(key: string, range?: { start: number }): Promise<Readable>;
  /** null when there is no object at `key`. */
  head(key: string): Promise<{ size: number } | null>;
  /** Objects whose key starts with `prefix` ("" for all), in UTF-8 byte order of their keys. */
  list(prefix?: string): AsyncIterable<ObjectInfo>;
  /** Removes `key`; removing a missing object is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Writes `destKey` as the parts' bytes in order, streaming; the parts are left in place.
   * With `overwrite: false` an existing `destKey` is never replaced: the call fails with
   * StorageError "exists", even for an object that appeared while the parts were copied (file store).
   */
  concat(partKeys: readonly string[], destKey: string, options?: { overwrite?: boolean }): Promise<{ size: number }>;
  /** The real file behind `key` (file store only), for consumers that need a path. */
  localPath(key: string): string | undefined;
  /** Copies `key` to a local file atomically (temp file beside it, then rename). */
  download(key: string, destPath: string): Promise<void>;
  /** Releases connections (S3); the store is unusable afterwards. */
  close(): void;
}
