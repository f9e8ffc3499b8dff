// The batch input reader: line numbers and byte offsets (resume reads from a
// checkpoint's offset), odd line endings, over-long lines, and how a line
// becomes a record or an error line.
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { parseRecord } from "../../src/batch/input.ts";
import { type InputLine, isBlank, readLines } from "../../src/files/jsonl.ts";
import { readInput } from "../../src/batch/prepare.ts";
import type { ObjectStore } from "../../src/storage/index.ts";

async function collect(
  chunks: (string | Uint8Array)[],
  from?: { line: number; byte: number },
  max?: number,
): Promise<InputLine[]> {
  const out: InputLine[] = [];
  for await (const line of readLines(chunks, from, max)) out.push(line);
  return out;
}

describe("readLines", () => {
  it("yields every line with its number and the offset where the next one starts", async () => {
    const lines = await collect(["ab\nc", "d\n\n", "é\r\nlast"]);
    expect(lines.map((l) => [l.lineNumber, l.text, l.end])).toEqual([
      [1, "ab", 3],
      [2, "cd", 6],
      [3, "", 7],
      [4, "é", 11],
      [5, "last", 15],
    ]);
  });

  it("resumes at an offset and numbers lines from there", async () => {
    const text = "one\ntwo\nthree\n";
    const all = await collect([text]);
    const second = all[0] as InputLine;
    const rest = await collect([Buffer.from(text).subarray(second.end)], { line: 2, byte: second.end });
    expect(rest).toEqual(all.slice(1));
  });

  it("decodes characters split across chunks and drops a leading BOM only at byte 0", async () => {
    const bytes = Buffer.from('\uFEFF{"a":"日本"}\n');
    const chunks = [...bytes].map((b) => Uint8Array.of(b));
    const [line] = await collect(chunks);
    expect(line?.text).toBe('{"a":"日本"}');
  });

  it("skips an over-long line without buffering it and keeps going", async () => {
    const lines = await collect(["short\n", "x".repeat(50), "y".repeat(50), "\nafter\n"], undefined, 64);
    expect(lines.map((l) => l.text)).toEqual(["short", null, "after"]);
    expect(lines[1]?.end).toBe(6 + 101);
  });

  it("treats whitespace-only lines as blank, not as records", async () => {
    const lines = await collect([" \t\n{}\n"]);
    expect(lines.map(isBlank)).toEqual([true, false]);
  });
});

describe("parseRecord", () => {
  const line = (text: string | null, lineNumber = 7): InputLine => ({ lineNumber, start: 0, end: 0, text });

  it("accepts a valid record, keeping per-line sampling overrides and ignoring unknown fields", () => {
    expect(parseRecord(line('{"id":"a","prompt":"hi","max_tokens":3,"temperature":0,"meta":{"x":1}}'))).toEqual({
      ok: true,
      line: 7,
      id: "a",
      work: { kind: "prompt", prompt: "hi" },
      params: { max_tokens: 3, temperature: 0 },
    });
  });

  it("names the line and the field in errors, and keeps a usable id", () => {
    const missing = parseRecord(line('{"id":"a","max_tokens":3}'));
    expect(missing).toMatchObject({ ok: false, id: "a", code: "invalid_record" });
    expect(!missing.ok && missing.message).toMatch(/^line 7: prompt: /);
    const badTokens = parseRecord(line('{"id":"b","prompt":"x","max_tokens":0}'));
    expect(badTokens).toMatchObject({ ok: false, id: "b", code: "invalid_record" });
    expect(!badTokens.ok && badTokens.message).toMatch(/max_tokens/);
  });

  it("gives lines without a usable id their line number", () => {
    expect(parseRecord(line("{not json"))).toMatchObject({ ok: false, id: "line-7", code: "invalid_json" });
    expect(parseRecord(line("[1,2]"))).toMatchObject({ ok: false, id: "line-7", code: "invalid_record" });
    expect(parseRecord(line('{"id":42,"prompt":"x","max_tokens":1}'))).toMatchObject({
      ok: false,
      id: "line-7",
      code: "invalid_record",
    });
    expect(parseRecord(line('{"prompt":"x","max_tokens":1}'))).toMatchObject({ ok: false, id: "line-7" });
    expect(parseRecord(line(null))).toMatchObject({ ok: false, id: "line-7", code: "line_too_long" });
  });
});

describe("readInput", () => {
  it("re-opens the object where a broken connection left off", async () => {
    const data = Buffer.from("0123456789abcdefghij");
    const starts: number[] = [];
    const store = {
      uri: (key: string) => `mem://${key}`,
      get: async (_key: string, range?: { start: number }) => {
        const start = range?.start ?? 0;
        starts.push(start);
        // The first connection dies after 7 bytes.
        if (starts.length === 1) {
          return new Readable({
            read() {
              this.push(data.subarray(0, 7));
              this.destroy(new Error("ECONNRESET"));
            },
          });
        }
        return Readable.from([data.subarray(start)]);
      },
    } as unknown as ObjectStore;
    const chunks: Buffer[] = [];
    for await (const chunk of readInput({ store, key: "in.jsonl", size: data.length }, 0)) chunks.push(chunk);
    expect(Buffer.concat(chunks).toString()).toBe(data.toString());
    expect(starts).toEqual([0, 7]);
  });
});
