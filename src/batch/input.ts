/**
 * A batch input's lines (read by src/files/jsonl.ts) turned each into a record or into the reason
 * it is not one; a line longer than `maxLineBytes` is a record error.
 */
import type { z } from "zod";
import { BatchInputLine, lineId } from "./record.ts";
import { describeIssues } from "../contracts/issues.ts";
import { DEFAULT_MAX_LINE_BYTES, type InputLine } from "../files/jsonl.ts";
import type { ParsedEntry } from "./lines.ts";

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
