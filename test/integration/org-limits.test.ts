/**
 * An organization's traffic limits, as its admin would try to get around them: the operator sets
 * them, the organization's admin cannot lift or change them, and keys it mints without limits
 * share them (requests in flight across all of them; a third key is refused while two hold the
 * slots), while another organization's traffic is untouched. An in-process gateway with a deployed
 * endpoint and no replica: admitted requests wait in the queue until the test lets them go.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { stateKey } from "../../src/ratelimit/limiter.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";

let gw: TinyGateway;
let operator: string;
let acmeAdmin: string;

beforeAll(async () => {
  gw = await startTinyGateway({ settings: { requestTimeoutMs: 120_000 } });
  await createOrg(gw.ctl, "acme", "Acme");
  operator = (await createApiKey(gw.ctl, "operator", "admin")).key;
  acmeAdmin = (await createApiKey(gw.ctl, "acme-admin", "admin", undefined, "acme")).key;
});

afterAll(async () => {
  await gw?.stop();
});

const call = (path: string, key: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}) =>
  fetch(`${gw.gateway.url}${path}`, {
    method: init.method ?? "POST",
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    signal: init.signal,
  });

const chat = (key: string, signal?: AbortSignal) =>
  call("/v1/chat/completions", key, {
    body: { model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "hi" }] },
    ...(signal ? { signal } : {}),
  });

describe("organization limits", () => {
  it("only an operator sets them; the organization's admin gets 403 and cannot null them", async () => {
    const refused = await call("/admin/v1/orgs/acme/limits", acmeAdmin, { method: "PUT", body: {} });
    expect(refused.status).toBe(403);
    const set = await call("/admin/v1/orgs/acme/limits", operator, { method: "PUT", body: { max_concurrency: 2 } });
    expect(set.status).toBe(200);
    expect(await set.json()).toEqual({ limits: { max_concurrency: 2 }, source: "organization" });
    const seen = await call("/admin/v1/orgs/acme/limits", acmeAdmin, { method: "GET" });
    expect(await seen.json()).toEqual({ limits: { max_concurrency: 2 }, source: "organization" });
    const bad = await call("/admin/v1/orgs/acme/limits", operator, { method: "PUT", body: { rpm: -1 } });
    expect(bad.status).toBe(400);
  });

  it("hold across every key the organization's admin mints, unlimited ones included", { timeout: 60_000 }, async () => {
    const keys: string[] = [];
    for (const name of ["k1", "k2", "k3"]) {
      const res = await call("/admin/v1/keys", acmeAdmin, { body: { name, role: "user" } });
      expect(res.status, await res.clone().text()).toBe(201);
      keys.push(((await res.json()) as { key: string }).key);
    }
    const held = new AbortController();
    const waiting = [chat(keys[0] as string, held.signal), chat(keys[1] as string, held.signal)].map((p) =>
      p.catch(() => undefined),
    );
    const slots = stateKey(gw.ctl, "org:acme", { name: "org", limits: {} }, "s");
    await vi.waitFor(async () => expect(await gw.ctl.redis.zcard(slots)).toBe(2), { timeout: 30_000 });
    const third = await chat(keys[2] as string);
    expect(third.status).toBe(429);
    const err = ((await third.json()) as { error: { message: string } }).error;
    expect(err.message).toContain("organization acme");
    expect(err.message).toContain("requests in flight");

    // Another organization's key is not held by acme's limits.
    const other = new AbortController();
    const defaultKey = (await createApiKey(gw.ctl, "default-user", "user")).key;
    const elsewhere = chat(defaultKey, other.signal).catch(() => undefined);
    const otherSlots = stateKey(gw.ctl, "org:default", { name: "org", limits: {} }, "s");
    expect(await gw.ctl.redis.zcard(otherSlots)).toBe(0);

    // The slots come back when the clients leave.
    held.abort();
    other.abort();
    await Promise.all([...waiting, elsewhere]);
    await vi.waitFor(async () => expect(await gw.ctl.redis.zcard(slots)).toBe(0), { timeout: 30_000 });
  });
});
