/**
 * A multipart/form-data upload read as it arrives (busboy): the one file part streams to whoever
 * stores it while the request is still coming in, and the small text fields are kept. Nothing of
 * the file is held in memory, so a gateway's memory does not grow with an upload's size or with
 * the number of uploads at once. The body's size is counted as it streams (`limitStream`).
 */
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import busboy from "busboy";
import { PlatformError } from "../contracts/errors.ts";
import { limitStream } from "./input-bounds.ts";

export type MultipartLimits = {
  /** The whole body's limit and the setting that sets it, for the 413. */
  maxBytes: number;
  setting: string;
  /** The file field's name (`file`). */
  fileField: string;
  /** The error past `maxBytes`, when it is not the setting's (a quota's). */
  refusal?: () => PlatformError;
};

/** The text fields (each at most 1 KiB) and what `store` made of the file, if one came. */
export type Multipart<T> = { fields: Record<string, string>; file: { name: string; stored: T } | undefined };

const FIELD_BYTES = 1024;

function invalid(message: string, param: string | null = null): PlatformError {
  return new PlatformError(400, "invalid_request", message, param);
}

/**
 * Reads `req`'s multipart body. `store` gets the file part's stream once its headers are read and
 * must consume it (it fails with the body's error if the upload breaks off or goes over
 * `maxBytes`); `discard` undoes a stored file when the form turns out to be bad after it.
 */
export async function readMultipart<T>(
  req: Request,
  limits: MultipartLimits,
  store: (file: Readable, filename: string) => Promise<T>,
  discard: (stored: T) => Promise<void>,
): Promise<Multipart<T>> {
  const contentType = req.headers.get("content-type") ?? "";
  if (!/^multipart\/form-data\b/i.test(contentType) || !req.body)
    throw invalid(`send the file as multipart/form-data field \`${limits.fileField}\``, limits.fileField);
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: { "content-type": contentType },
      limits: { files: 1, fields: 16, parts: 17, fieldSize: FIELD_BYTES, fieldNameSize: 100 },
    });
  } catch (e) {
    throw invalid(`the multipart body cannot be read: ${(e as Error).message}`);
  }
  const fields: Record<string, string> = {};
  let file: Promise<{ name: string; stored: T }> | undefined;
  let fileStream: Readable | undefined;
  let refused: PlatformError | undefined;
  const refuse = (e: PlatformError) => {
    refused ??= e;
  };
  parser.on("field", (name, value, info) => {
    if (info.valueTruncated) refuse(invalid(`${name}: at most ${FIELD_BYTES} bytes`, name));
    else fields[name] = value;
  });
  parser.on("file", (name, stream, info) => {
    if (name !== limits.fileField || file !== undefined) {
      stream.resume();
      return;
    }
    fileStream = stream;
    const stored = store(stream, info.filename ?? "");
    // Its failure is the body's (reported below) or the store's: kept for the await, never unhandled.
    stored.catch(() => undefined);
    file = stored.then((s) => ({ name: info.filename ?? "", stored: s }));
    file.catch(() => undefined);
  });
  parser.on("filesLimit", () => refuse(invalid(`send one file, as field \`${limits.fileField}\``, limits.fileField)));
  parser.on("fieldsLimit", () => refuse(invalid("too many form fields; send `file` and `purpose`")));
  parser.on("partsLimit", () => refuse(invalid("too many form parts; send `file` and `purpose`")));

  const body = Readable.fromWeb(req.body as WebReadableStream<Uint8Array>);
  let streamed: unknown;
  try {
    await pipeline(
      body,
      limitStream(req.headers.get("content-length") ?? undefined, limits.maxBytes, limits.setting, limits.refusal),
      parser,
    );
  } catch (e) {
    streamed = e;
    // The store must see the body fail, not wait for the rest of a file that will never come.
    if (fileStream && !fileStream.readableEnded) fileStream.destroy(e as Error);
  }
  // The store sees the same failure through its stream; wait for it so nothing is left half-written.
  let result: { name: string; stored: T } | undefined;
  let storeFailed: unknown;
  try {
    result = await file;
  } catch (e) {
    storeFailed = e;
  }
  const failure =
    streamed instanceof PlatformError
      ? streamed
      : streamed !== undefined
        ? invalid(`the multipart body cannot be read: ${(streamed as Error).message}`)
        : (refused ?? storeFailed);
  if (failure !== undefined) {
    if (result) await discard(result.stored);
    throw failure;
  }
  return { fields, file: result };
}
