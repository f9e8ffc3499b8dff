/**
 * JSON text that may stop anywhere, as a generation cut short by max_tokens does: the values read
 * as far as the text goes, each with its place in the text, so a tool call cut inside its
 * arguments is passed on with them exactly as the model wrote them (tool-format.ts,
 * llamacpp-native-tools.ts). Pure; the text is expected to be a prefix of valid JSON (it was
 * generated under a grammar), and reading stops at the first character that cannot continue it.
 */

/** A value as far as the text goes: `start`/`end` delimit its text, `complete` says whether it was finished. */
export type JsonPrefix = { start: number; end: number; complete: boolean } & (
  | { type: "string"; value: string }
  | { type: "object"; entries: { key: string; value?: JsonPrefix }[] }
  | { type: "array"; items: JsonPrefix[] }
  | { type: "scalar" }
);
type JsonString = Extract<JsonPrefix, { type: "string" }>;

/** The value at `from` (after whitespace); undefined when the text ends before it begins. */
export function readJsonPrefix(text: string, from = 0): JsonPrefix | undefined {
  const start = skipSpace(text, from);
  const c = text[start];
  if (c === undefined) return undefined;
  if (c === '"') return readString(text, start);
  if (c === "{") return readObject(text, start);
  if (c === "[") return readArray(text, start);
  // A number or a literal; at the very end of the text it may still have been going on.
  let end = start;
  while (end < text.length && /[-+.\w]/.test(text[end] as string)) end++;
  return { type: "scalar", start, end, complete: end > start && end < text.length };
}

/** A string's value as far as it goes: an escape cut short is left out, as is half a surrogate pair. */
function readString(text: string, start: number): JsonString {
  let i = start + 1;
  while (i < text.length && text[i] !== '"') {
    const step = text[i] !== "\\" ? 1 : text[i + 1] === "u" ? 6 : 2;
    if (i + step > text.length) break;
    i += step;
  }
  const complete = text[i] === '"';
  let value: string;
  try {
    value = JSON.parse(`"${text.slice(start + 1, i)}"`);
  } catch {
    // Not JSON after all (a raw control character): the characters as they are.
    value = text.slice(start + 1, i);
  }
  if (!complete) value = value.replace(/[\uD800-\uDBFF]$/, "");
  return { type: "string", start, end: complete ? i + 1 : text.length, complete, value };
}

function readObject(text: string, start: number): JsonPrefix {
  const entries: { key: string; value?: JsonPrefix }[] = [];
  const cut = (end: number): JsonPrefix => ({ type: "object", start, end, complete: false, entries });
  let i = skipSpace(text, start + 1);
  if (text[i] === "}") return { type: "object", start, end: i + 1, complete: true, entries };
  for (;;) {
    if (text[i] !== '"') return cut(i);
    const key = readString(text, i);
    const entry: { key: string; value?: JsonPrefix } = { key: key.value };
    entries.push(entry);
    if (!key.complete) return cut(key.end);
    i = skipSpace(text, key.end);
    if (text[i] !== ":") return cut(i);
    entry.value = readJsonPrefix(text, i + 1);
    if (!entry.value?.complete) return cut(entry.value?.end ?? text.length);
    i = skipSpace(text, entry.value.end);
    if (text[i] === "}") return { type: "object", start, end: i + 1, complete: true, entries };
    if (text[i] !== ",") return cut(i);
    i = skipSpace(text, i + 1);
  }
}

function readArray(text: string, start: number): JsonPrefix {
  const items: JsonPrefix[] = [];
  const cut = (end: number): JsonPrefix => ({ type: "array", start, end, complete: false, items });
  let i = skipSpace(text, start + 1);
  if (text[i] === "]") return { type: "array", start, end: i + 1, complete: true, items };
  for (;;) {
    const item = readJsonPrefix(text, i);
    if (!item) return cut(text.length);
    items.push(item);
    if (!item.complete) return cut(item.end);
    i = skipSpace(text, item.end);
    if (text[i] === "]") return { type: "array", start, end: i + 1, complete: true, items };
    if (text[i] !== ",") return cut(i);
    i = skipSpace(text, i + 1);
  }
}

function skipSpace(text: string, i: number): number {
  while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\t" || text[i] === "\r")) i++;
  return i;
}
