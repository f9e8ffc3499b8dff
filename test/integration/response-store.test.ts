/**
 * The stored responses' store (src/responses/store.ts) on a real Redis: an organization's own,
 * bounded in count and bytes per organization (its oldest go first), expiring, and leaving no
 * key behind once its records are gone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ResponseObject } from "../../src/contracts/openai/responses-output.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { ResponseStore, type StoredResponse } from "../../src/responses/store.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

let redis: PrivateRedis;
let ctl: Control;

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "responses");
});

afterAll(async () => {
  await ctl?.redis.quit();
  await redis?.stop();
});

let n = 0;
const record = (text = "x"): StoredResponse => {
  const id = `resp_${(n++).toString(16).padStart(24, "0")}`;
  return {
    response: { id, object: "response", output: [], metadata: { text } } as unknown as ResponseObject,
    input: [],
    context: [],
    owner: "key-1",
  };
};
const keysOf = (org: string) => ctl.redis.keys(`${ctl.keys.responses(org)}*`);

describe("the response store", () => {
  it("keeps an organization's responses apart from another's", async () => {
    const store = new ResponseStore(ctl, { ttlMs: 60_000, maxPerOrg: 10, maxBytesPerOrg: 1_000_000 });
    const r = record();
    expect(await store.save("acme", r)).toBe(true);
    expect((await store.get("acme", r.response.id))?.response.id).toBe(r.response.id);
    expect(await store.get("rival", r.response.id)).toBeUndefined();
    expect(await store.delete("rival", r.response.id)).toBe(false);
    expect(await store.get("acme", "../../etc")).toBeUndefined();
    expect(await store.delete("acme", r.response.id)).toBe(true);
    expect(await store.get("acme", r.response.id)).toBeUndefined();
    expect(await store.delete("acme", r.response.id)).toBe(false);
  });

  it("keeps at most maxPerOrg responses, dropping the oldest", async () => {
    const store = new ResponseStore(ctl, { ttlMs: 60_000, maxPerOrg: 3, maxBytesPerOrg: 1_000_000 });
    const saved = [record(), record(), record(), record(), record()];
    for (const r of saved) await store.save("counted", r);
    const kept = await Promise.all(saved.map((r) => store.get("counted", r.response.id)));
    expect(kept.map(Boolean)).toEqual([false, false, true, true, true]);
    expect(await ctl.redis.zcard(`${ctl.keys.responses("counted")}:index`)).toBe(3);
  });

  it("keeps at most maxBytesPerOrg bytes, and refuses a record larger than that alone", async () => {
    const size = JSON.stringify(record("a".repeat(1000))).length;
    const store = new ResponseStore(ctl, { ttlMs: 60_000, maxPerOrg: 100, maxBytesPerOrg: size * 2 + 10 });
    const [a, b, c] = [record("a".repeat(1000)), record("b".repeat(1000)), record("c".repeat(1000))];
    for (const r of [a, b, c]) expect(await store.save("sized", r)).toBe(true);
    expect(await store.get("sized", a.response.id)).toBeUndefined();
    expect(await store.get("sized", c.response.id)).toBeDefined();
    const huge = record("h".repeat(size * 3));
    expect(await store.save("sized", huge)).toBe(false);
    expect(await store.get("sized", huge.response.id)).toBeUndefined();
    expect(await store.get("sized", c.response.id)).toBeDefined();
  });

  it("expires records, and their index and sizes with the last of them", async () => {
    const store = new ResponseStore(ctl, { ttlMs: 300, maxPerOrg: 10, maxBytesPerOrg: 1_000_000 });
    const r = record();
    await store.save("brief", r);
    expect(await keysOf("brief")).toHaveLength(3);
    await expect.poll(() => keysOf("brief"), { timeout: 5_000 }).toEqual([]);
    expect(await store.get("brief", r.response.id)).toBeUndefined();
  });
});
