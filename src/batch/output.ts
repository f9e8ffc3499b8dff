/**
 * Where a job's results go, and the output lines themselves.
 *
 * An output URI ending in `.jsonl` names the result object; any other URI is a
 * prefix (a directory, or s3://bucket/prefix/) that receives `<job id>.jsonl`.
 * Either way the parts live beside the result, under `<job id>.parts/`, until
 * the result has been assembled.
 *
 * A local output directory is one the client can write in too, so links are
 * never followed below it: a link planted at `<job id>.parts` (before the job,
 * or swapped in while it runs) must not carry part writes, the assembly's
 * reads or the clean-up's deletes outside the key's storage.
 */
import { basename, dirname } from "node:path";
import pRetry from "p-retry";
import type { BatchOutputLine } from "./record.ts";
import type { Outcome } from "./lines.ts";
import { PlatformError } from "../contracts/errors.ts";
import {
  FileStore,
  isStorageError,
  type ObjectStore,
  openObject,
  openStore,
  parseStorageUri,
  type S3Settings,
  StorageError,
} from "../storage/index.ts";

export type OutputLocation = {
  store: ObjectStore;
  resultKey: string;
  /**
   * Where a format that keeps failures apart (OpenAI's error file) puts them:
   * beside the result, `<name>.errors.jsonl`. Only jobs whose output is the
   * server's own (the OpenAI shape's files/) are written that way.
   */
  errorKey: string;
  partKey: (index: number) => string;
  partsPrefix: string;
  /** The parts directory's URI, with a trailing "/" (its real location, for the storage policy). */
  partsUri: string;
  /**
   * Throws 403 storage_forbidden when the parts directory is a symbolic link,
   * and StorageError "unwritable" when the directory held (holdParts) is no
   * longer at its name. Nothing to check on S3.
   */
  checkParts: () => Promise<void>;
  /** Creates the parts directory and holds it open, so later part writes cannot be redirected. */
  holdParts: () => Promise<void>;
  /** Removes what is left in the parts directory after the parts were deleted, then the directory; never through a link. */
  clearParts: () => Promise<void>;
};

export function outputLocation(outputUri: string, jobId: string, s3: S3Settings = {}): OutputLocation {
  const named = /\.jsonl$/i.test(outputUri);
  const { store, key } = named
    ? outputObject(outputUri, s3)
    : { store: outputStore(outputUri, s3), key: `${jobId}.jsonl` };
  const partsPrefix = `${jobId}.parts/`;
  const partsUri = `${store.uri(partsPrefix.slice(0, -1))}/`;
  const local = store instanceof FileStore ? store : undefined;
  const checkParts = async () => {
    if (!local) return;
    const state = await local.directoryState(partsPrefix);
    if (state === "link") {
      throw new PlatformError(
        403,
        "storage_forbidden",
        `output: ${partsUri} (where the job keeps its parts) is a symbolic link, which is never followed; remove it, then resume the job`,
        "output",
      );
    }
    if (state === "moved") {
      throw new StorageError(
        "unwritable",
        partsUri,
        `${partsUri}: cannot write (the parts directory was moved or replaced while the job ran; put it back, then resume the job)`,
      );
    }
  };
  return {
    store,
    resultKey: key,
    errorKey: key.replace(/\.jsonl$/i, ".errors.jsonl"),
    partsPrefix,
    partsUri,
    partKey: (i) => `${partsPrefix}part-${String(i).padStart(6, "0")}.jsonl`,
    checkParts,
    holdParts: async () => {
      if (!local) return;
      try {
        await local.hold(partsPrefix, true);
      } catch (e) {
        // A link that appeared since the last check is still refused as one.
        if (isStorageError(e, "access_denied")) await checkParts();
        throw e;
      }
    },
    clearParts: async () => {
      await local?.clear(partsPrefix);
    },
  };
}

/** Local outputs are opened with links below the output directory refused; S3 has no links. */
function outputStore(uri: string, s3: S3Settings): ObjectStore {
  const location = parseStorageUri(uri);
  return location.scheme === "file" ? new FileStore(location.path, { noLinks: true }) : openStore(uri, s3);
}

function outputObject(uri: string, s3: S3Settings): { store: ObjectStore; key: string } {
  const location = parseStorageUri(uri);
  // A ".jsonl" name is neither a directory nor the root, which openObject refuses.
  if (location.scheme !== "file") return openObject(uri, s3);
  return { store: new FileStore(dirname(location.path), { noLinks: true }), key: basename(location.path) };
}

/** Proves the output is writable before any record is sent, so a typo fails the job at once. */
export async function probeWritable(out: OutputLocation): Promise<void> {
  const key = `${out.partsPrefix}.probe`;
  await out.store.put(key, "");
  await out.store.delete(key);
}

export function outputLine(id: string, outcome: Outcome): string {
  const line: BatchOutputLine = outcome.ok
    ? { id, output: outcome.text, tokens_used: outcome.tokens, status: "success" }
    : { id, status: "error", error: { code: outcome.code, message: outcome.message } };
  return JSON.stringify(line);
}

/**
 * The lines of `partKeys`, in order, that `keep` accepts (each with its
 * newline); `skipped` counts the others. A part is read whole: it was held in
 * memory whole when written, and a line is never cut at a chunk boundary.
 */
export async function* selectLines(
  store: ObjectStore,
  partKeys: readonly string[],
  keep: (line: string) => boolean,
  skipped: { count: number },
): AsyncGenerator<string> {
  for (const key of partKeys) {
    const chunks: Buffer[] = [];
    for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer);
    const kept: string[] = [];
    for (const line of Buffer.concat(chunks).toString("utf8").split("\n")) {
      if (line === "") continue;
      if (keep(line)) kept.push(line);
      else skipped.count++;
    }
    if (kept.length > 0) yield `${kept.join("\n")}\n`;
  }
}

/**
 * Storage calls are retried a few times when the store is unavailable (0.5 s, 1 s, 2 s apart): a
 * part write that fails for good fails the job.
 */
export async function withStorageRetries<T>(what: () => Promise<T>, attempts = 4): Promise<T> {
  return pRetry(what, {
    retries: attempts - 1,
    minTimeout: 500,
    factor: 2,
    shouldRetry: ({ error }) => isStorageError(error, "unavailable"),
  });
}
