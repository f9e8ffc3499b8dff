/**
 * Random hex for the ids the gateway mints per request (`req_…`, `chatcmpl-…`): the same CSPRNG
 * bytes as `randomBytes`, drawn from a pooled buffer refilled once per 4 KiB, as Node does for
 * `randomUUID`. One `randomBytes` call per id cost ~2% of the gateway's CPU per request
 * (docs/performance.md). The ids name things; they grant nothing.
 */
import { randomFillSync } from "node:crypto";

const pool = Buffer.alloc(4096);
let offset = pool.length;

export function randomHex(bytes: number): string {
  if (offset + bytes > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const hex = pool.toString("hex", offset, offset + bytes);
  offset += bytes;
  return hex;
}
