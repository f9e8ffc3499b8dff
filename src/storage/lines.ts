/**
 * Lines of a JSONL stream, read incrementally: memory grows with the longest
 * line, never with the input. Every line is yielded, empty ones included, so
 * the caller decides what a blank line means and line numbers stay true.
 */
import { StringDecoder } from "node:string_decoder";

export type JsonlLine = {
  /** 1-based. */
  lineNumber: number;
  /** Without its "\n" or "\r\n". */
  text: string;
};

export type ReadLinesOptions = {
  /** A longer line fails the read (a file with no newlines must not fill memory). Default 16 Mi characters. */
  maxLineLength?: number;
};

const DEFAULT_MAX_LINE_LENGTH = 16 * 1024 * 1024;

export async function* readJsonlLines(
  source: AsyncIterable<Uint8Array | string>,
  options: ReadLinesOptions = {},
): AsyncGenerator<JsonlLine> {
  const max = options.maxLineLength ?? DEFAULT_MAX_LINE_LENGTH;
  // Decodes UTF-8 sequences split across chunks.
  const decoder = new StringDecoder("utf8");
  let pending: string[] = [];
  let pendingLength = 0;
  let lineNumber = 0;

  const finish = (rest: string): JsonlLine => {
    pending.push(rest);
    let text = pending.length === 1 ? rest : pending.join("");
    pending = [];
    pendingLength = 0;
    lineNumber += 1;
    if (text.endsWith("\r")) text = text.slice(0, -1);
    if (lineNumber === 1 && text.startsWith("\uFEFF")) text = text.slice(1);
    if (text.length > max) throw tooLong(lineNumber, max);
    return { lineNumber, text };
  };

  for await (const chunk of source) {
    const text = typeof chunk === "string" ? decoder.end() + chunk : decoder.write(chunk);
    let from = 0;
    for (let newline = text.indexOf("\n"); newline !== -1; newline = text.indexOf("\n", from)) {
      yield finish(text.slice(from, newline));
      from = newline + 1;
    }
    if (from < text.length) {
      const rest = text.slice(from);
      pending.push(rest);
      pendingLength += rest.length;
      if (pendingLength > max + 1) throw tooLong(lineNumber + 1, max);
    }
  }
  const tail = decoder.end();
  if (tail !== "" || pendingLength > 0) yield finish(tail);
}

function tooLong(lineNumber: number, max: number): Error {
  return new RangeError(`line ${lineNumber} is longer than ${max} characters`);
}
