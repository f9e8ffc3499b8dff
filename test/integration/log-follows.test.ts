/**
 * `logs?follow=true` streams are a gateway's pool (each holds a Redis connection): one
 * organization following its service's logs from many clients is refused past
 * PLATFORM_ORG_LOG_FOLLOWS with a 429 naming it, while another organization still follows its
 * own; a stream that closes gives its place back.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { rollout, serviceRecord } from "../helpers/service-records.ts";

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
const keys: Record<string, string> = {};

beforeAll(async () => {
  redis = await privateRedis();
  const dataDir = await mkdtemp(join(tmpdir(), "platform-log-follows-"));
  const settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: dataDir, PLATFORM_ORG_LOG_FOLLOWS: "2" }),
    redisUrl: redis.url,
  };
  ctl = connectControl(redis.url, settings.prefix);
  for (const org of ["acme", "rival"]) {
    await createOrg(ctl, org);
    keys[org] = (await createApiKey(ctl, `${org}-dev`, "user", undefined, org)).key;
    const record = serviceRecord("items", rollout(1, "1.0.0-abcdef0"), { org });
    await ctl.redis.hset(ctl.keys.services, `${org}/items`, JSON.stringify(record));
  }
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
});

const follow = (org: string, signal: AbortSignal) =>
  fetch(`${gateway.url}/admin/v1/services/items/logs?follow=true`, {
    headers: { authorization: `Bearer ${keys[org]}` },
    signal,
  });

describe("log follows per organization", () => {
  it("refuses one organization past its share, not another; a closed stream gives its place back", async () => {
    const first = new AbortController();
    const second = new AbortController();
    const open = [await follow("acme", first.signal), await follow("acme", second.signal)];
    expect(open.map((r) => r.status)).toEqual([200, 200]);
    const third = await follow("acme", new AbortController().signal);
    expect(third.status).toBe(429);
    const err = ((await third.json()) as { error: { message: string } }).error;
    expect(err.message).toContain("PLATFORM_ORG_LOG_FOLLOWS");
    const rival = new AbortController();
    expect((await follow("rival", rival.signal)).status).toBe(200);
    first.abort();
    await vi.waitFor(
      async () => {
        const again = new AbortController();
        const res = await follow("acme", again.signal);
        again.abort();
        expect(res.status).toBe(200);
      },
      { timeout: 30_000, interval: 200 },
    );
    second.abort();
    rival.abort();
  });
});
