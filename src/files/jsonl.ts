/**
 * Reading JSONL: lines with their byte offsets (so a resumed reader starts at its checkpoint with
 * a ranged GET instead of from the start), the one reader batch inputs, /v1/files uploads,
 * evaluation and fine-tuning datasets share.
 *
 * Memory grows with the longest line up to `maxLineBytes`; a longer line is reported (text null),
 * never buffered.
 */
export const DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024;

export type InputLine = {
  /** 1-based. */
  lineNumber: number;
  /** Byte offset in the input where this line starts. */
  start: number;
  /** Byte offset just past this line's newline (where the next line starts). */
  end: number;
  /** Decoded, without "\n" or "\r\n"; null when the line exceeded maxLineBytes. */
  text: string | null;
};

export type ReadFrom = { line: number; byte: number };

const NEWLINE = 0x0a;

export async function* readLines(
  source: AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string>,
  from: ReadFrom = { line: 1, byte: 0 },
  maxLineBytes = DEFAULT_MAX_LINE_BYTES,
): AsyncGenerator<InputLine> {
  let lineNumber = from.line;
  let offset = from.byte;
  let lineStart = from.byte;
  let parts: Buffer[] = [];
  let length = 0;
  let tooLong = false;

  const finish = (end: number): InputLine => {
    let text: string | null = null;
    if (!tooLong) {
      text = (parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, length)).toString("utf8");
      if (text.endsWith("\r")) text = text.slice(0, -1);
      if (lineStart === 0 && text.startsWith("\uFEFF")) text = text.slice(1);
    }
    const line = { lineNumber, start: lineStart, end, text };
    lineNumber += 1;
    lineStart = end;
    parts = [];
    length = 0;
    tooLong = false;
    return line;
  };
  const keep = (piece: Buffer) => {
    if (tooLong || piece.length === 0) return;
    if (length + piece.length > maxLineBytes) {
      tooLong = true;
      parts = [];
      length = 0;
      return;
    }
    parts.push(piece);
    length += piece.length;
  };

  for await (const chunk of source) {
    const data =
      typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let from = 0;
    for (let nl = data.indexOf(NEWLINE); nl !== -1; nl = data.indexOf(NEWLINE, from)) {
      keep(data.subarray(from, nl));
      yield finish(offset + nl + 1);
      from = nl + 1;
    }
    // Copied: the source may reuse its buffer for the next chunk.
    if (from < data.length) keep(Buffer.from(data.subarray(from)));
    offset += data.length;
  }
  if (length > 0 || tooLong) yield finish(offset);
}

/** Blank (or whitespace-only) lines are not records; they keep their line numbers. */
export function isBlank(line: InputLine): boolean {
  return line.text !== null && line.text.trim() === "";
}
