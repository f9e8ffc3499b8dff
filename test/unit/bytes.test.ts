/** The one byte formatter (src/contracts/bytes.ts): the 413 message's limit and the CLI's sizes. */
import { describe, expect, it } from "vitest";
import { formatBytes } from "../../src/contracts/bytes.ts";

describe("formatBytes", () => {
  it.each([
    [0, "0 bytes"],
    [1023, "1023 bytes"],
    [1024, "1 KiB"],
    [1536, "1.5 KiB"],
    [2 * 1024 ** 2, "2 MiB"],
    [512 * 1024 ** 2, "512 MiB"],
    [1.25 * 1024 ** 3, "1.3 GiB"],
    [64 * 1024 ** 3, "64 GiB"],
    [3 * 1024 ** 5, "3072 TiB"],
  ])("%d is %s", (n, text) => {
    expect(formatBytes(n)).toBe(text);
  });
});
