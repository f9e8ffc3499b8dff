/**
 * Issue 7's attacks on `platform up` with real workers: a flood of oversized
 * requests leaves Redis bounded and the platform serving; a garbage endpoint
 * record breaks nobody else; a model that cannot load tells `/v1` clients
 * nothing about the server, only a request id to look up in the gateway log.
 */
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { sendOnOwnConnection } from "../helpers/http.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type OwnStack, startStack } from "../helpers/stack.ts";

type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

// A stack of its own, not the shared one: the flood's bounds are on the whole Redis (its memory
// before and after, every key scanned), which other files' work would move, and 300 MB of
// requests would starve their workers; the other blocks need this file's tiny endpoint.
let stack: OwnStack;
let ctl: Control;
let queues: QueueBase;

beforeAll(async () => {
  stack = await startStack({
    model: await tinyModelPath({ contextLength: 512 }),
    args: ["--name", "tiny", "--parallel", "2"],
  });
  ctl = connectControl(stack.redisUrl, "platform");
  queues = new QueueBase(ctl);
});

afterAll(async () => {
  await queues?.close();
  ctl?.redis.disconnect();
  await stack?.stop();
});

const post = (path: string, body: string | object, headers: Record<string, string> = {}) =>
  fetch(`${stack.baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await ctl.redis.info("memory"))?.[1]);

/** Every string value in Redis longer than `min` bytes that contains `marker`. */
async function keysHolding(marker: string): Promise<string[]> {
  const found: string[] = [];
  for (const key of await ctl.redis.keys("*")) {
    const type = await ctl.redis.type(key);
    const values =
      type === "hash"
        ? Object.values(await ctl.redis.hgetall(key))
        : type === "string"
          ? [(await ctl.redis.get(key)) ?? ""]
          : [];
    if (values.some((v) => v.includes(marker))) found.push(key);
  }
  return found;
}

async function chatOk(model = "tiny"): Promise<void> {
  const res = await post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 8,
    temperature: 0,
  });
  expect(res.status, await res.clone().text()).toBe(200);
  expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(8);
}

describe("bounded Redis contents", () => {
  it("200 oversized requests leave Redis memory bounded, no prompt in any key, and the platform serving", {
    timeout: 300_000,
  }, async () => {
    await chatOk();
    const before = await usedMemory();
    const limit = 2 * 1024 * 1024; // the default PLATFORM_MAX_REQUEST_BYTES
    const marker = "OVERSIZED-PROMPT-MARKER";
    let sent = 0;
    const statuses = new Map<string, number>();
    const count = (key: string) => statuses.set(key, (statuses.get(key) ?? 0) + 1);

    // 180 bodies just under the request limit, prompts far over the 512-token window.
    const huge = `${marker} once upon a time `.repeat(Math.floor((limit - 1024) / (marker.length + 18)));
    for (let round = 0; round < 9; round++) {
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const body =
            round % 3 === 0
              ? { model: "tiny", prompt: huge, max_tokens: 4 }
              : { model: "tiny", messages: [{ role: "user", content: huge }], max_tokens: 4 };
          const text = JSON.stringify(body);
          expect(text.length).toBeLessThan(limit);
          sent += text.length;
          const res = await post(round % 3 === 0 ? "/v1/completions" : "/v1/chat/completions", text, {
            "x-request-id": `flood-${round}-${i}`,
          });
          count(`${res.status} ${((await res.json()) as ErrorBody).error?.code}`);
        }),
      );
    }
    // 10 just over the body limit.
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        const text = JSON.stringify({ model: "tiny", prompt: huge + "x".repeat(4096), max_tokens: 4 });
        sent += text.length;
        const res = await sendOnOwnConnection({
          url: `${stack.baseUrl}/v1/completions`,
          body: text,
          headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
        });
        count(`${res.status} ${((await res.json()) as ErrorBody).error?.code}`);
      }),
    );
    // 10 under the gateway's bound but over the window: the worker's exact check refuses them,
    // and their failed jobs must not keep the prompt.
    const sneaky = Array.from({ length: 600 }, (_, i) => `${marker}${i % 10}`)
      .join(" ")
      .slice(0, 3000);
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        const res = await post("/v1/completions", { model: "tiny", prompt: sneaky, max_tokens: 4 });
        const error = ((await res.json()) as ErrorBody).error;
        // The replica's exact count, not the gateway's bound ("at least ... tokens"), refused it.
        expect(error?.message).not.toMatch(/at least/);
        count(`${res.status} ${error?.code}`);
      }),
    );

    expect(Object.fromEntries(statuses)).toEqual({ "400 context_length_exceeded": 190, "413 request_too_large": 10 });
    expect(sent).toBeGreaterThan(300 * 1024 * 1024);
    // Far less than what was sent: nothing of it stayed.
    const grown = (await usedMemory()) - before;
    expect(grown).toBeLessThan(8 * 1024 * 1024);
    // A replica sends its refusal before BullMQ removes the failed job: give the removal a moment.
    await stack
      .waitFor(async () => (await keysHolding(marker)).length === 0, "the refused jobs to be removed", 10_000)
      .catch(() => undefined);
    expect(await keysHolding(marker)).toEqual([]);
    const counts = await queues
      .queue("tiny", "v1")
      .getJobCounts("waiting", "active", "completed", "failed", "delayed", "prioritized");
    expect(counts).toMatchObject({ waiting: 0, active: 0, completed: 0, failed: 0 });
    await chatOk();
  });
});

describe("one bad record never breaks everyone", () => {
  it("a garbage endpoint record next to a good one: chat, /v1/models, /metrics and the endpoint list still answer, and report it", {
    timeout: 120_000,
  }, async () => {
    await ctl.redis.hset(ctl.keys.endpoints, "garbage", '{"name": 42');
    await ctl.redis.publish(ctl.keys.endpointEvents, "garbage");
    await chatOk();
    const models = await fetch(`${stack.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${stack.apiKey}` } });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(["tiny"]);
    const listed = await stack.admin<{ data: { endpoint: string }[]; invalid: { name: string; error: string }[] }>(
      "GET",
      "/admin/v1/endpoints",
    );
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((e) => e.endpoint)).toEqual(["tiny"]);
    expect(listed.body.invalid).toEqual([{ name: "garbage", error: "not valid JSON" }]);
    const metrics = await fetch(stack.metricsUrl);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/platform_invalid_records_total\{kind="endpoint"\} 1/);
    // Logged once, by key, without its contents.
    expect(stack.output()).toMatch(/skipping invalid endpoint record garbage: not valid JSON/);
    expect(stack.output()).not.toContain('{"name": 42');
    // The scaler's reconciler kept going: the good endpoint still has its replica.
    expect(
      (await stack.admin<{ replicas: { ready: number } }>("GET", "/admin/v1/endpoints/tiny")).body.replicas.ready,
    ).toBe(1);
    await ctl.redis.hdel(ctl.keys.endpoints, "garbage");
  });
});

describe("error messages", () => {
  it("a model that cannot load: /v1 answers carry the request id, no server path; admins see why; the gateway log has the detail", {
    timeout: 180_000,
  }, async () => {
    const whole = await readFile(await tinyModelPath({ contextLength: 512 }));
    const upload = (body: Buffer) =>
      fetch(`${stack.baseUrl}/admin/v1/models/broken/upload?source=broken.gguf`, {
        method: "POST",
        headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/octet-stream" },
        body,
      });
    // Tensor data cut short: refused at registration, where the header says more than the file holds.
    const truncated = await upload(whole.subarray(0, Math.floor(whole.length * 0.6)));
    expect(truncated.status).toBe(400);
    expect(((await truncated.json()) as ErrorBody).error).toMatchObject({ code: "invalid_artifact", param: "source" });
    // A consistent file that llama.cpp cannot load: one layer more declared than its tensors hold.
    const broken = Buffer.from(whole);
    const key = broken.indexOf("llama.block_count");
    const value = key + "llama.block_count".length + 4; // the key, then its uint32 type id, then the value
    broken.writeUInt32LE(broken.readUInt32LE(value) + 1, value);
    const up = await upload(broken);
    expect(up.status, await up.clone().text()).toBe(201);
    expect(
      (
        await stack.admin("PUT", "/admin/v1/endpoints/broken", {
          model: { name: "broken" },
          resources: { replicas: 1 },
        })
      ).status,
    ).toBe(200);
    await stack.waitFor(
      async () => (await stack.admin<{ state: string }>("GET", "/admin/v1/endpoints/broken")).body.state === "failed",
      "broken to fail",
      120_000,
    );
    const status = await stack.admin<{ errors: string[] }>("GET", "/admin/v1/endpoints/broken");
    expect(status.body.errors.length).toBeGreaterThan(0); // admins see the engine's reason

    const res = await post(
      "/v1/completions",
      { model: "broken", prompt: "hi", max_tokens: 3 },
      { "x-request-id": "req_broken_probe" },
    );
    expect(res.status).toBe(503);
    const err = ((await res.json()) as ErrorBody).error;
    expect(err.code).toBe("no_capacity");
    expect(err.message).toContain("req_broken_probe");
    expect(err.message).not.toMatch(/\/[\w.-]+\/|127\.0\.0\.1:|\n\s+at /);
    for (const reason of status.body.errors) expect(err.message).not.toContain(reason);
    expect(stack.output()).toMatch(/req_broken_probe[^\n]*no_capacity[^\n]*replica error: /);
    await stack.admin("DELETE", "/admin/v1/endpoints/broken");
  });
});
