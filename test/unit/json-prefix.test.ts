/**
 * Reading JSON text that stops anywhere (workers/engines/json-prefix.ts): every prefix of a text
 * reads without error, each value's place in the text is exact, and strings decode as far as they go.
 */
import { describe, expect, it } from "vitest";
import { type JsonPrefix, readJsonPrefix } from "../../workers/engines/json-prefix.ts";

const TEXT = ' {"s": "x\\"y\\u00e9\\ud83d\\ude00\\\\z", "list": [1, -2.5e3, true, null, {"k": []}], "o": {} }\n';
const S = 'x"yé😀\\z';

function entry(value: JsonPrefix | undefined, key: string): JsonPrefix | undefined {
  return value?.type === "object" ? value.entries.find((e) => e.key === key)?.value : undefined;
}

describe("readJsonPrefix", () => {
  it("reads a whole text with each value's place in it", () => {
    const root = readJsonPrefix(TEXT);
    expect(root).toMatchObject({ type: "object", start: 1, end: TEXT.length - 1, complete: true });
    expect(entry(root, "s")).toMatchObject({ type: "string", value: S, complete: true });
    const list = entry(root, "list");
    expect(list?.type === "array" && list.items.map((v) => [v.type, TEXT.slice(v.start, v.end)])).toEqual([
      ["scalar", "1"],
      ["scalar", "-2.5e3"],
      ["scalar", "true"],
      ["scalar", "null"],
      ["object", '{"k": []}'],
    ]);
    expect(list && JSON.parse(TEXT.slice(list.start, list.end))).toEqual([1, -2500, true, null, { k: [] }]);
    expect(entry(root, "o")).toMatchObject({ type: "object", entries: [], complete: true });
  });

  it("reads every prefix: complete only when whole, values running to the cut, strings decoded so far", () => {
    const whole = readJsonPrefix(TEXT) as JsonPrefix;
    const list = entry(whole, "list") as JsonPrefix;
    for (let n = 0; n <= TEXT.length; n++) {
      const prefix = TEXT.slice(0, n);
      const root = readJsonPrefix(prefix);
      if (n <= 1) {
        expect(root).toBeUndefined();
        continue;
      }
      expect(root?.complete).toBe(n >= whole.end);
      expect(root?.end).toBe(Math.min(n, whole.end));
      const s = entry(root, "s");
      if (s?.type === "string") {
        expect(S.startsWith(s.value)).toBe(true);
        expect(s.value).not.toMatch(/[\uD800-\uDBFF]$/);
      }
      const cutList = entry(root, "list");
      if (cutList) expect(prefix.slice(cutList.start, cutList.end)).toBe(TEXT.slice(list.start, Math.min(n, list.end)));
    }
  });

  it("a scalar at the very end may still be going on; one followed by anything is whole", () => {
    expect(readJsonPrefix('{"n": 12')).toMatchObject({ complete: false, entries: [{ value: { complete: false } }] });
    expect(readJsonPrefix('{"n": 12 ')).toMatchObject({ complete: false, entries: [{ value: { complete: true } }] });
    expect(readJsonPrefix('{"n": 12}\n</tool_call>')).toMatchObject({ complete: true, end: 9 });
  });

  it("keys cut short are read as far as they go, before their value begins", () => {
    const read = readJsonPrefix('{"a": 1, "argu');
    expect(read?.complete).toBe(false);
    expect(read?.type === "object" && read.entries.map((e) => [e.key, e.value?.type])).toEqual([
      ["a", "scalar"],
      ["argu", undefined],
    ]);
  });

  it("stops where the text cannot be JSON, never reading past it", () => {
    expect(readJsonPrefix('{"a" 1}')).toMatchObject({ complete: false, end: 5 });
    expect(readJsonPrefix("[1, }")).toMatchObject({ complete: false, end: 4 });
  });
});
