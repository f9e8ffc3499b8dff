/**
 * The upload format of a checkpoint directory, a tar stream, through node-tar (npm's own tar
 * library): the gateway's reader and the CLI's writer. The reader takes what the CLI writes and
 * what `tar -cf - -C dir .` makes (GNU, or POSIX with pax headers, as bsdtar writes on macOS).
 * Only regular files are taken; links, devices and FIFOs are refused, so nothing in an upload can
 * point outside the directory it lands in. Names are checked by the caller (checkpoint.ts).
 */
import type { Readable } from "node:stream";
import { create, type Pack, Parser, type ReadEntry } from "tar";
import { PlatformError } from "../contracts/errors.ts";

export type TarEntry = { name: string; body: AsyncIterable<Buffer> };

/** Pax records and GNU long names are small; a huge one is an attack or garbage (node-tar skips it, and the name it carried is lost). */
const MAX_EXTENSION_BYTES = 64 * 1024;

/** Entry types that are a regular file's bytes ("0", the old "\0", and "7", contiguous). */
const REGULAR = new Set(["File", "OldFile", "ContiguousFile"]);

function invalid(message: string): PlatformError {
  return new PlatformError(
    400,
    "invalid_artifact",
    `upload: ${message}; send the checkpoint directory as a tar stream of its files (tar -cf - -C <dir> .)`,
    "source",
  );
}

/** node-tar's error as the client's fault, in words that quote no bytes of the stream. */
function streamError(e: unknown): PlatformError {
  const code = (e as { tarCode?: unknown; code?: unknown }).tarCode ?? (e as { code?: unknown }).code;
  if (code === "TAR_ENTRY_INVALID")
    return invalid("a header is not valid tar (checksum or fields; not a tar stream, or a corrupt one)");
  if (code === "TAR_BAD_ARCHIVE") return invalid("the stream is truncated or is not a tar archive");
  if (code === "TAR_ABORT")
    return invalid("the stream could not be read as tar (corrupt, or compressed data that does not decompress)");
  return invalid("the stream could not be read as tar");
}

/**
 * The regular files of a tar stream, in order: each entry's body must be consumed before the
 * next entry is asked for (node-tar holds the input back meanwhile: backpressure). Directory
 * entries are skipped; any other type is refused. A stream that is not tar, is cut short or ends
 * without the end-of-archive marker is a 400, whatever was read before.
 */
export async function* readTar(input: Readable): AsyncGenerator<TarEntry> {
  // strict: every warning (bad checksum, truncation, unreadable header) is an error, not a skipped entry.
  const parser = new Parser({ strict: true, maxMetaEntrySize: MAX_EXTENSION_BYTES });
  const queue: ReadEntry[] = [];
  let failure: PlatformError | undefined;
  let ended = false;
  let sawEof = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
  };
  parser.on("entry", (entry: ReadEntry) => {
    queue.push(entry);
    notify();
  });
  parser.on("eof", () => {
    sawEof = true;
  });
  parser.on("error", (e: unknown) => {
    failure ??= streamError(e);
    notify();
  });
  parser.on("end", () => {
    ended = true;
    notify();
  });
  const onInputError = () => {
    failure ??= invalid("the upload broke off");
    // Ends the entry being read (as truncated), so a consumer waiting for its bytes wakes up.
    parser.end();
  };
  input.on("error", onInputError);
  input.pipe(parser);
  try {
    for (;;) {
      if (failure) throw failure;
      const entry = queue.shift();
      if (!entry) {
        if (ended) {
          if (!sawEof) throw invalid("the stream ended without the end-of-archive marker");
          return;
        }
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      const shown = JSON.stringify(entry.path.slice(0, 120));
      if (entry.type === "Directory") {
        entry.resume();
        continue;
      }
      if (entry.type === "Link" || entry.type === "SymbolicLink")
        throw invalid(
          `entry ${shown} is a ${entry.type === "Link" ? "hard" : "symbolic"} link; only regular files are accepted`,
        );
      if (!REGULAR.has(entry.type)) throw invalid(`entry ${shown} is a ${entry.type}; only regular files are accepted`);
      let consumed = false;
      const body = async function* (): AsyncGenerator<Buffer> {
        for await (const chunk of entry as AsyncIterable<Buffer>) yield chunk;
        // A truncated entry ends early with the parser's error already raised.
        if (failure) throw failure;
        consumed = true;
      };
      yield { name: entry.path, body: body() };
      if (!consumed) throw new Error("readTar: an entry's body was not consumed before the next entry");
    }
  } finally {
    input.off("error", onInputError);
    input.unpipe(parser);
  }
}

/**
 * A tar stream of `files` (paths relative to `dir`, such as `config.json` or `1_Pooling/config.json`):
 * ustar headers, pax where a name or size needs them, no owner names or ids (portable). Links are
 * followed: the directory is the user's own, and a Hugging Face cache snapshot is made of links.
 */
export function writeTar(dir: string, files: readonly string[]): Pack {
  // strict: a file that cannot be read is an error on the stream, not a warning and a file left out.
  return create({ cwd: dir, portable: true, follow: true, noDirRecurse: true, strict: true }, [...files]);
}
