/** Helpers shared by both stores: bodies, atomic local files, key order, concatenation. */
import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { link, mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fromFsError, StorageError } from "./errors.ts";
import type { Body, ObjectStore } from "./store.ts";

/**
 * Counts bytes as they pass and remembers whether the *source* failed, so a
 * failing input stream is reported as itself rather than as a storage error.
 */
export class Tap {
  size = 0;
  sourceFailed = false;
  sourceError: unknown = undefined;

  async *wrap(body: Body): AsyncGenerator<Buffer> {
    if (typeof body === "string" || body instanceof Uint8Array) {
      const data =
        typeof body === "string" ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      this.size += data.length;
      yield data;
      return;
    }
    try {
      for await (const chunk of body) {
        const data =
          typeof chunk === "string"
            ? Buffer.from(chunk)
            : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        this.size += data.length;
        yield data;
      }
    } catch (error) {
      this.sourceFailed = true;
      this.sourceError = error;
      throw error;
    }
  }

  /** The error to report: the source's own failure wins over what it caused downstream. */
  blame(downstream: unknown, map: (error: unknown) => StorageError): unknown {
    if (this.sourceFailed) return this.sourceError;
    return map(downstream);
  }
}

/** Bodies given as a stream must be closed if we fail before reading them. */
export function discard(body: Body): void {
  if (body instanceof Readable) body.destroy();
}

// Recognisable so listings can hide files still being written.
const TEMP_MARK = ".tmp-";
const TEMP_NAME = /^\..*\.tmp-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function isTempName(name: string): boolean {
  return TEMP_NAME.test(name);
}

/**
 * Writes `body` to `path` through a temp file in the same directory and a
 * rename, so a reader never sees half a file; the file and then its directory
 * are fsynced, so a crash after we return cannot lose it. Returns the bytes
 * written. `uri` names the destination in errors. `replace: false`: the temp
 * file is hard-linked into place instead, which fails (StorageError "exists")
 * if anything is at `path`, even an object that appeared during the write.
 */
export async function writeFileAtomically(
  path: string,
  body: Body,
  uri: string,
  options: { replace?: boolean } = {},
): Promise<number> {
  const dir = dirname(path);
  try {
    await mkdir(dir, { recursive: true });
  } catch (error) {
    discard(body);
    throw fromFsError(error, uri, "write");
  }
  // Long names must still fit NAME_MAX once the marker is added.
  const temp = join(dir, `.${basename(path).slice(0, 120)}${TEMP_MARK}${randomUUID()}`);
  const tap = new Tap();
  try {
    await pipeline(tap.wrap(body), createWriteStream(temp, { flags: "wx", flush: true }));
    if (options.replace === false) {
      await link(temp, path);
      await rm(temp, { force: true });
    } else {
      await rename(temp, path);
    }
    await syncDirectory(dir);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => undefined);
    if ((error as { code?: unknown }).code === "EEXIST" && !tap.sourceFailed) {
      throw new StorageError("exists", uri, `${uri}: an object already exists there`, error);
    }
    throw tap.blame(error, (e) => fromFsError(e, uri, "write"));
  }
  return tap.size;
}

/** Makes a rename or link in `dir` durable (the new name is part of the directory's data). */
async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Validates an optional range; returns the first byte wanted. */
export function rangeStart(range: { start: number } | undefined): number {
  const start = range?.start ?? 0;
  if (!Number.isSafeInteger(start) || start < 0)
    throw new RangeError(`range.start must be a non-negative integer, got ${start}`);
  return start;
}

/** S3 lists keys in UTF-8 byte order, which differs from JS string order above U+FFFF. */
export function compareKeys(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** The parts' bytes in order, one open stream at a time. */
export async function* readParts(store: ObjectStore, partKeys: readonly string[]): AsyncGenerator<Buffer> {
  for (const key of partKeys) {
    const part = await store.get(key);
    try {
      yield* part;
    } finally {
      part.destroy();
    }
  }
}
