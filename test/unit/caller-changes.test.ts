/** What goes on the caller-events channel (src/keys/changes.ts): a kind and one of our ids, nothing more. */
import { describe, expect, it } from "vitest";
import { decodeCallerChange, encodeCallerChange } from "../../src/keys/changes.ts";

describe("caller change messages", () => {
  it("round-trips a key, a token and a user", () => {
    for (const change of [
      { kind: "key", id: "key_0123456789ab" },
      { kind: "token", id: "tok_0123456789abcdef" },
      { kind: "user", id: "usr_0123456789ab" },
    ] as const)
      expect(decodeCallerChange(encodeCallerChange(change))).toEqual(change);
  });

  it("ignores anything else on the channel: other kinds, secrets' shapes, long or odd ids", () => {
    for (const message of [
      "",
      "org:acme",
      "key:",
      `key:${"a".repeat(65)}`,
      "key:sk-plat-abc def",
      "token:pt_abc:def",
      "key:key_1\nuser:usr_2",
    ])
      expect(decodeCallerChange(message)).toBeUndefined();
  });
});
