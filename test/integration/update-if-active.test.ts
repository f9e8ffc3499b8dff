/** The one "update if still active" script (src/redis/stored.ts `updateIfActive`), on a real Redis, as batch and fine-tuning jobs use it. */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FINAL_BATCH_STATES } from "../../src/batch/record.ts";
import { FINAL_STATUSES } from "../../src/finetuning/record.ts";
import { updateIfActive } from "../../src/redis/stored.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PREFIX = `test-update-active-${randomUUID()}`;
let server: PrivateRedis;
let redis: Redis;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.url);
});

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

const BATCH = { field: "state", final: FINAL_BATCH_STATES };
const FINE_TUNE = { field: "status", final: FINAL_STATUSES };

describe("updateIfActive", () => {
  it("writes an active job's fields, objects as JSON and undefined ones skipped", async () => {
    const key = `${PREFIX}:running`;
    await redis.hset(key, "state", "in_progress");
    expect(
      await updateIfActive(redis, key, BATCH, { state: "finalizing", checkpoint: { next_line: 3 }, gone: undefined }),
    ).toBe(true);
    expect(await redis.hgetall(key)).toEqual({ state: "finalizing", checkpoint: '{"next_line":3}' });
  });

  it("leaves an ended job alone, whichever field names its state", async () => {
    for (const [state, final] of [
      [BATCH, "cancelled"],
      [FINE_TUNE, "succeeded"],
    ] as const) {
      const key = `${PREFIX}:ended-${final}`;
      await redis.hset(key, state.field, final);
      expect(await updateIfActive(redis, key, state, { [state.field]: "running", extra: 1 })).toBe(false);
      expect(await redis.hgetall(key)).toEqual({ [state.field]: final });
    }
  });

  it("does not create a job that is gone, or one whose state is kept under another field", async () => {
    const gone = `${PREFIX}:gone`;
    expect(await updateIfActive(redis, gone, FINE_TUNE, { status: "running" })).toBe(false);
    expect(await redis.exists(gone)).toBe(0);
    const other = `${PREFIX}:other-field`;
    await redis.hset(other, "state", "in_progress");
    expect(await updateIfActive(redis, other, FINE_TUNE, { status: "running" })).toBe(false);
    expect(await redis.hgetall(other)).toEqual({ state: "in_progress" });
  });
});
