/**
 * Reading the input JSONL: lines with their byte offsets (so a resumed job
 * reads from its checkpoint with a ranged GET instead of from the start), and
 * each line turned into a record or into the reason it is not one.
 *
 * Memory grows with the longest line up to `maxLineBytes`; a longer line is
 * skipped (reported as a record error), never buffered.
 */
import type { z } from "zod";
import { BatchInputLine, lineId } from "./record.ts";
import type { ChatMessage, Prompt, SamplingParams } from "../contracts/job.ts";
import { describeIssues } from "../contracts/issues.ts";
import type { PictureWork } from "./picture-records.ts";

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

/** What one record asks the model for. */
export type Work =
  | { kind: "prompt"; prompt: Prompt }
  | { kind: "chat"; messages: ChatMessage[] }
  | { kind: "image"; image: PictureWork };

export type ParsedEntry =
  | { ok: true; line: number; id: string; work: Work; params: SamplingParams }
  | { ok: false; line: number; id: string; code: string; message: string };

/** A line as a JSON object, or the error line it becomes. */
export function jsonObject(
  line: InputLine,
  expected: string,
  maxLineBytes = DEFAULT_MAX_LINE_BYTES,
): { value: Record<string, unknown> } | { failure: ParsedEntry } {
  const n = line.lineNumber;
  const fail = (code: string, message: string) => ({ failure: failedEntry(n, lineId(n), code, message) });
  if (line.text === null) return fail("line_too_long", `longer than ${maxLineBytes} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(line.text);
  } catch {
    // The parser's message quotes the line; the output file may be read by others than the input's owner.
    return fail("invalid_json", `not valid JSON (byte offset ${line.start})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return fail("invalid_record", `expected a JSON object ${expected}`);
  return { value: value as Record<string, unknown> };
}

export function failedEntry(line: number, id: string, code: string, message: string): ParsedEntry {
  return { ok: false, line, id, code, message: `line ${line}: ${message}` };
}

/** A usable caller-chosen id, or the line's own. */
export function idOf(value: unknown, line: number): string {
  return typeof value === "string" && value.length > 0 && value.length <= 512 ? value : lineId(line);
}

/** Turns one non-blank line into a record to send, or into its error line's contents. */
export function parseRecord(line: InputLine, maxLineBytes = DEFAULT_MAX_LINE_BYTES): ParsedEntry {
  const n = line.lineNumber;
  const object = jsonObject(line, '{"id", "prompt", "max_tokens"}', maxLineBytes);
  if ("failure" in object) return object.failure;
  const value = object.value;
  const id = idOf(value.id, n);
  const parsed = BatchInputLine.safeParse(value);
  if (!parsed.success) return failedEntry(n, id, "invalid_record", describeIssues(parsed.error as z.ZodError));
  const { prompt, id: _id, ...params } = parsed.data;
  return { ok: true, line: n, id, work: { kind: "prompt", prompt }, params: dropUndefined(params) };
}

function dropUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
