/**
 * What a client can make the platform hold and what it can learn from errors
 * (issue 7): body limits per route (chunked bodies too), the prompt bound at the
 * gateway, names checked in path parameters, records that do not parse, and
 * error messages free of server details. In process against a private Redis,
 * with no workers: nothing here needs a model to run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { captureLogs } from "../helpers/logs.ts";
import { createApiKey } from "../../src/keys/store.ts";
import type { Control } from "../../src/redis/connection.ts";
import type { RunningGateway } from "../../src/gateway/server/app.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { type TinyGateway, startTinyGateway } from "../helpers/gateway.ts";
import { type OversizedInit, sendOnOwnConnection } from "../helpers/http.ts";

const REQUEST_LIMIT = 64 * 1024;
const FILE_LIMIT = 256 * 1024;
const MODEL_LIMIT = 128 * 1024;

let tiny: TinyGateway;
let redis: TinyGateway["redis"];
let ctl: Control;
/** What the tests see of the model queue, and the failing worker. */
let queues: QueueBase;
let gateway: RunningGateway;
let admin: string;
let user: string;
let window: number;

beforeAll(async () => {
  // Deployed, a replica wanted but none running: whatever is admitted waits in the queue.
  tiny = await startTinyGateway({
    env: {
      PLATFORM_MAX_REQUEST_BYTES: String(REQUEST_LIMIT),
      PLATFORM_MAX_FILE_BYTES: String(FILE_LIMIT),
      PLATFORM_MAX_MODEL_BYTES: String(MODEL_LIMIT),
    },
    settings: { requestTimeoutMs: 1500 },
    contextLength: 512,
    embed: true,
  });
  ({ redis, ctl, gateway } = tiny);
  queues = new QueueBase(ctl);
  admin = (await createApiKey(ctl, "admin", "admin")).key;
  user = (await createApiKey(ctl, "user", "user")).key;
  expect(tiny.model.gguf?.max_token_bytes).toBeGreaterThan(0);
  window = tiny.model.gguf?.context_length as number;
});

afterAll(async () => {
  // The last test stopped Redis: closing waits on it, so give it a moment and move on.
  await Promise.race([Promise.all([gateway?.close(), queues?.close()]), new Promise((r) => setTimeout(r, 3000))]);
  ctl?.redis.disconnect();
  await redis?.stop();
});

const call = (path: string, init: RequestInit & { key?: string } = {}) =>
  fetch(`${gateway.url}${path}`, {
    method: init.method ?? "POST",
    body: init.body,
    duplex: init.body instanceof ReadableStream ? "half" : undefined,
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${init.key ?? user}`,
      ...(init.headers as Record<string, string>),
    },
  } as RequestInit);

const oversized = (path: string, init: Omit<OversizedInit, "url"> & { key?: string }) =>
  sendOnOwnConnection({
    ...init,
    url: `${gateway.url}${path}`,
    headers: { "content-type": "application/json", authorization: `Bearer ${init.key ?? user}`, ...init.headers },
  });

type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };
const errorOf = async (res: Response) => ((await res.json()) as ErrorBody).error;

/** A body sent in chunks with no Content-Length (Transfer-Encoding: chunked): `text`'s bytes, else spaces. */
function chunked(total: number, chunk = 16 * 1024, text?: string): ReadableStream<Uint8Array> {
  const bytes = text === undefined ? undefined : new TextEncoder().encode(text);
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent >= total) return controller.close();
      const n = Math.min(chunk, total - sent);
      controller.enqueue(bytes ? bytes.slice(sent, sent + n) : new Uint8Array(n).fill(0x20));
      sent += n;
    },
  });
}

const waitingJobs = async () => {
  const counts = await queues
    .queue("tiny", "v1")
    .getJobCounts("waiting", "prioritized", "active", "completed", "failed");
  return Object.values(counts).reduce((a, b) => a + b, 0);
};

describe("body limits per route", () => {
  it("413 request_too_large naming the limit and the setting, with and without Content-Length", async () => {
    const declared = await oversized("/v1/chat/completions", {
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x".repeat(REQUEST_LIMIT) }] }),
    });
    expect(declared.status).toBe(413);
    const err = await errorOf(declared);
    expect(err.code).toBe("request_too_large");
    expect(err.message).toContain("PLATFORM_MAX_REQUEST_BYTES");
    expect(err.message).toContain(String(REQUEST_LIMIT));

    const streamed = await oversized("/v1/completions", { body: chunked(REQUEST_LIMIT * 4) });
    expect(streamed.status).toBe(413);
    expect((await errorOf(streamed)).code).toBe("request_too_large");

    const adminJson = await oversized("/admin/v1/endpoints/tiny", {
      method: "PUT",
      key: admin,
      body: chunked(REQUEST_LIMIT + 1),
    });
    expect(adminJson.status).toBe(413);
  });

  it("reads a body within the limit whole, with and without Content-Length", async () => {
    // Padded to several chunks; the model is unknown, so the 404 says the JSON was read and parsed.
    const text =
      JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }) +
      " ".repeat(REQUEST_LIMIT / 2);
    for (const body of [text, chunked(text.length, 16 * 1024, text)]) {
      const res = await call("/v1/chat/completions", { body });
      expect(res.status).toBe(404);
      expect((await errorOf(res)).code).toBe("model_not_found");
    }
  });

  it("defaults: 2 MiB for JSON, 512 MiB for files, 64 GiB for models; the old PLATFORM_MAX_BODY_BYTES still sets the JSON limit", () => {
    const d = loadSettings({});
    expect([d.maxRequestBytes, d.maxFileBytes, d.maxModelBytes]).toEqual([
      2 * 1024 ** 2,
      512 * 1024 ** 2,
      64 * 1024 ** 3,
    ]);
    expect(loadSettings({ PLATFORM_MAX_BODY_BYTES: "1234" }).maxRequestBytes).toBe(1234);
    expect(loadSettings({ PLATFORM_MAX_BODY_BYTES: "1234", PLATFORM_MAX_REQUEST_BYTES: "99" }).maxRequestBytes).toBe(
      99,
    );
    expect(() => loadSettings({ PLATFORM_MAX_REQUEST_BYTES: "lots" })).toThrow(/PLATFORM_MAX_REQUEST_BYTES/);
  });

  it("file uploads get their own, larger limit", async () => {
    const form = (size: number) => {
      const f = new FormData();
      f.set("purpose", "batch");
      f.set(
        "file",
        new Blob([
          `${JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/completions", body: { model: "tiny", prompt: "x".repeat(size) } })}\n`,
        ]),
        "in.jsonl",
      );
      return f;
    };
    const upload = (size: number) =>
      fetch(`${gateway.url}/v1/files`, {
        method: "POST",
        body: form(size),
        headers: { authorization: `Bearer ${user}` },
      });
    // Over the JSON limit, under the file limit: not refused for its size.
    const fits = await upload(REQUEST_LIMIT * 2);
    expect(fits.status, await fits.clone().text()).not.toBe(413);
    const f = form(FILE_LIMIT);
    const encoded = new Response(f);
    const over = await oversized("/v1/files", {
      body: new Uint8Array(await encoded.arrayBuffer()),
      headers: { "content-type": encoded.headers.get("content-type") as string },
    });
    expect(over.status).toBe(413);
    expect((await errorOf(over)).message).toContain("PLATFORM_MAX_FILE_BYTES");
  });

  it("model uploads are counted as they stream: 413 past PLATFORM_MAX_MODEL_BYTES, and nothing registered", async () => {
    const streamed = await oversized("/admin/v1/models/big/upload?source=big.gguf", {
      key: admin,
      body: chunked(MODEL_LIMIT * 4),
      headers: { "content-type": "application/octet-stream" },
    });
    expect(streamed.status).toBe(413);
    expect((await errorOf(streamed)).message).toContain("PLATFORM_MAX_MODEL_BYTES");
    const declared = await oversized("/admin/v1/models/big/upload?source=big.gguf", {
      key: admin,
      body: new Uint8Array(MODEL_LIMIT + 1),
      headers: { "content-type": "application/octet-stream" },
    });
    expect(declared.status).toBe(413);
    const models = (await (await call("/admin/v1/models", { method: "GET", key: admin })).json()) as {
      data: { name: string }[];
    };
    expect(models.data.map((m) => m.name)).not.toContain("big");
  });
});

describe("prompt bound at the gateway", () => {
  it("refuses a prompt that certainly overflows the window with 400 context_length_exceeded, enqueueing nothing", async () => {
    const before = await waitingJobs();
    const long = "Once upon a time ".repeat(4000); // 68 KB of text, far over a 512-token window
    expect(long.length).toBeLessThan(REQUEST_LIMIT + 10_000);
    const text = long.slice(0, REQUEST_LIMIT - 1000);
    const cases = [
      {
        path: "/v1/chat/completions",
        body: { model: "tiny", messages: [{ role: "user", content: text }] },
        param: "messages",
      },
      { path: "/v1/completions", body: { model: "tiny", prompt: text, max_tokens: 10 }, param: "prompt" },
      { path: "/v1/inference/tiny/generate", body: { prompt: text }, param: "prompt" },
      { path: "/v1/embeddings", body: { model: "tiny-embed", input: ["short", text] }, param: "input" },
    ];
    for (const c of cases) {
      const res = await call(c.path, { body: JSON.stringify(c.body) });
      expect(res.status, c.path).toBe(400);
      const err = await errorOf(res);
      expect(err).toMatchObject({ type: "invalid_request_error", code: "context_length_exceeded", param: c.param });
      expect(err.message).toContain(String(window));
    }
    // Token ids count exactly: one prompt of a list is over the window by one token with its completion.
    const ids = await call("/v1/completions", {
      body: JSON.stringify({ model: "tiny", prompt: [[1, 2], Array(window).fill(5)], max_tokens: 1 }),
    });
    expect(await errorOf(ids)).toMatchObject({
      code: "context_length_exceeded",
      param: "prompt",
      message: expect.stringContaining(`you requested ${window + 1} tokens (${window} in the prompt[1], 1 in`),
    });
    // Several prompts: bounded by their count too (each is a queued job).
    const many = await call("/v1/completions", {
      body: JSON.stringify({ model: "tiny", prompt: Array(40).fill([1]), n: 2, max_tokens: 1 }),
    });
    expect(await errorOf(many)).toMatchObject({
      code: "invalid_request",
      param: "prompt",
      message: expect.stringContaining("40 prompts with n = 2 ask for 80 choices; at most 64"),
    });
    // max_tokens alone past the window: certain too.
    const greedy = await call("/v1/completions", {
      body: JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: window + 1 }),
    });
    expect((await errorOf(greedy)).code).toBe("context_length_exceeded");
    expect(await waitingJobs()).toBe(before);
  });

  it("lets a prompt that may fit through to the queue (the worker checks exactly)", async () => {
    const res = await call("/v1/completions", {
      body: JSON.stringify({ model: "tiny", prompt: "Once upon a time", max_tokens: 5 }),
    });
    // No replica runs here: admitted, then nobody answers.
    expect(res.status).toBe(504);
  });
});

describe("names in path parameters", () => {
  it("400 naming the parameter and its form, before any lookup", async () => {
    for (const [method, path] of [
      ["GET", "/admin/v1/endpoints/bad%20name"],
      ["PUT", "/admin/v1/endpoints/..%2F..%2Fetc"],
      ["DELETE", "/admin/v1/endpoints/a:b"],
      ["GET", "/admin/v1/endpoints/x%0Ay/autoscaling"],
      ["PUT", "/admin/v1/endpoints/-dash/autoscaling"],
      ["POST", "/admin/v1/models/no%2Fslash/upload?source=x.gguf"],
    ] as const) {
      const res = await call(path, {
        method,
        key: admin,
        body: method === "GET" || method === "DELETE" ? undefined : JSON.stringify({ model: { name: "tiny" } }),
      });
      expect(res.status, `${method} ${path}`).toBe(400);
      const err = await errorOf(res);
      expect(err.param).toBe("name");
      expect(err.message).toMatch(/^path parameter name: expected letters, digits/);
    }
    const key = await call("/admin/v1/keys/..%2Fx", { method: "DELETE", key: admin });
    expect(key.status).toBe(400);
    expect(await errorOf(key)).toMatchObject({ param: "id", code: "invalid_request" });
    // PUT with a body naming another endpoint: the URL's name wins only if they agree.
    const mismatch = await call("/admin/v1/endpoints/tiny", {
      method: "PUT",
      key: admin,
      body: JSON.stringify({ endpoint: "other", model: { name: "tiny" } }),
    });
    expect(mismatch.status).toBe(400);
    const names = Object.keys(await ctl.redis.hgetall(ctl.keys.endpoints));
    expect(names.sort()).toEqual(["tiny", "tiny-embed"]);
  });

  it("an impossible model name is an unknown model (404, OpenAI's convention), not echoed back", async () => {
    for (const path of ["/v1/models/..%2Fetc", `/v1/inference/${"%2F".repeat(3)}x/generate`]) {
      const res = await call(path, {
        method: path.endsWith("generate") ? "POST" : "GET",
        body: path.endsWith("generate") ? JSON.stringify({ prompt: "x" }) : undefined,
      });
      expect(res.status, path).toBe(404);
      const err = await errorOf(res);
      expect(err.code).toBe("model_not_found");
      expect(err.message).not.toContain("/etc");
    }
  });
});

describe("records that do not parse", () => {
  it("are skipped and reported, never failing listings, routing or /metrics for everyone", async () => {
    await ctl.redis.hset(ctl.keys.endpoints, "garbage", "{not json");
    await ctl.redis.hset(ctl.keys.endpoints, "bad name!", JSON.stringify({ name: "bad name!" }));
    await ctl.redis.hset(ctl.keys.apiKeys, "key_000000000000", "[]");
    await ctl.redis.sadd(ctl.keys.models, "bad:model");
    await ctl.redis.hset(ctl.keys.modelVersions("tiny"), "v9", JSON.stringify({ name: "tiny", version: "v9" }));
    await ctl.redis.publish(ctl.keys.endpointEvents, "garbage");
    // A short wait for something that must not happen: the gateway reads the garbage event and goes on.
    await new Promise((r) => setTimeout(r, 100));

    const models = await call("/v1/models", { method: "GET" });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id).sort()).toEqual([
      "tiny",
      "tiny-embed",
    ]);
    const routed = await call("/v1/models/tiny", { method: "GET" });
    expect(routed.status).toBe(200);

    const endpoints = await call("/admin/v1/endpoints", { method: "GET", key: admin });
    expect(endpoints.status).toBe(200);
    const listed = (await endpoints.json()) as {
      data: { endpoint: string }[];
      invalid: { name: string; error: string }[];
    };
    expect(listed.data.map((e) => e.endpoint).sort()).toEqual(["tiny", "tiny-embed"]);
    expect(listed.invalid).toEqual(
      expect.arrayContaining([
        { name: "garbage", error: "not valid JSON" },
        { name: "bad name!", error: expect.stringMatching(/^name: expected letters, digits/) },
      ]),
    );
    const one = await call("/admin/v1/endpoints/garbage", { method: "GET", key: admin });
    expect(one.status).toBe(500);
    expect((await errorOf(one)).message).toMatch(
      /stored record of endpoint "garbage" is invalid \(not valid JSON\); deploy it again or delete it/,
    );

    const versions = await call("/admin/v1/models", { method: "GET", key: admin });
    expect(versions.status).toBe(200);
    expect(
      ((await versions.json()) as { data: { name: string; version: string }[] }).data
        .map((v) => `${v.name}@${v.version}`)
        .sort(),
    ).toEqual(["tiny-embed@v1", "tiny@v1"]);
    const keys = await call("/admin/v1/keys", { method: "GET", key: admin });
    expect(keys.status).toBe(200);
    expect(((await keys.json()) as { data: unknown[] }).data).toHaveLength(2);

    const metrics = await fetch(gateway.metricsUrl);
    expect(metrics.status).toBe(200);
    const text = await metrics.text();
    expect(text).toMatch(/platform_replicas_desired\{model_name="tiny",version="v1"\} 1/);
    expect(text).toMatch(/platform_invalid_records_total\{kind="endpoint"\} 2/);
    expect(text).toMatch(/platform_invalid_records_total\{kind="model_version"\} 1/);
    expect(text).toMatch(/platform_invalid_records_total\{kind="api_key"\} 1/);

    // Deleting the bad record works, and so does deploying over one.
    expect((await call("/admin/v1/endpoints/garbage", { method: "DELETE", key: admin })).status).toBe(200);
    await ctl.redis.hset(ctl.keys.endpoints, "tiny2", "{}");
    const over = await call("/admin/v1/endpoints/tiny2", {
      method: "PUT",
      key: admin,
      body: JSON.stringify({ model: { name: "tiny" }, resources: { replicas: 0 } }),
    });
    expect(over.status, await over.clone().text()).toBe(200);
    await ctl.redis.hdel(ctl.keys.endpoints, "bad name!", "tiny2");
    await ctl.redis.hdel(ctl.keys.apiKeys, "key_000000000000");
    await ctl.redis.srem(ctl.keys.models, "bad:model");
    await ctl.redis.hdel(ctl.keys.modelVersions("tiny"), "v9");
  });
});

describe("error messages", () => {
  it("an engine failure reaches the client without its server detail, with the request id; the log has the detail", async () => {
    const logged = captureLogs();
    try {
      // A worker that fails a job the way an engine does (its message names a server path).
      const worker = queues.worker(
        "tiny",
        "v1",
        async (job) => {
          const reply = (job.data as { reply: { stream: string } }).reply.stream;
          const error = {
            code: "engine_error",
            status: 500,
            param: null,
            message:
              "failed to load /srv/data/artifacts/models/tiny/v1/model.gguf: bad magic\n    at load (/app/workers/engines/llamacpp.ts:42:7)",
          };
          await ctl.redis.xadd(reply, "*", "job", job.id as string, "e", JSON.stringify({ type: "error", error }));
          throw new Error(JSON.stringify(error));
        },
        {},
      );
      try {
        const res = await call("/v1/completions", {
          body: JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: 3 }),
          headers: { "x-request-id": "req_engine_probe" },
        });
        expect(res.status).toBe(500);
        const err = await errorOf(res);
        expect(err.code).toBe("engine_error");
        expect(err.message).toContain("req_engine_probe");
        expect(err.message).not.toMatch(/\/srv|\/app|at load|\.gguf/);
        const log = logged.text();
        expect(log).toMatch(/req_engine_probe.*engine_error.*\/srv\/data\/artifacts\/models\/tiny\/v1\/model\.gguf/s);
      } finally {
        await worker.close();
      }
    } finally {
      logged.restore();
    }
  });

  // Last: it stops this suite's Redis.
  it("queue_unavailable when Redis is gone: no address in the message, the request id instead; the log has the detail", {
    timeout: 60_000,
  }, async () => {
    const logged = captureLogs();
    try {
      // Freshly verified key; with Redis gone the gateway forgets it (src/gateway/callers.ts), and
      // checking it again, or the queue, answers 503 within REDIS_WAIT_MS.
      expect((await call("/v1/models", { method: "GET" })).status).toBe(200);
      await redis.stop();
      const res = await call("/v1/completions", {
        body: JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: 3 }),
        headers: { "x-request-id": "req_redis_probe" },
      });
      const err = await errorOf(res);
      expect(res.status).toBe(503);
      expect(err.code).toBe("queue_unavailable");
      expect(err.message).toContain("req_redis_probe");
      expect(err.message).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|\/|\n\s+at /);
      const log = logged.text();
      expect(log).toMatch(/req_redis_probe[^\n]*queue_unavailable/);
      expect(log).toMatch(/req_redis_probe[^\n]*Redis (did not answer within \d+ ms|is not connected)/);
    } finally {
      logged.restore();
    }
  });
});
