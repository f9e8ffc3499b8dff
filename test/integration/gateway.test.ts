/** The gateway's own edges, in process against a private Redis, with no workers. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import type { Control } from "../../src/redis/connection.ts";
import type { RunningGateway } from "../../src/gateway/server/app.ts";
import { type TinyGateway, startTinyGateway } from "../helpers/gateway.ts";

let tiny: TinyGateway;
let ctl: Control;
let gateway: RunningGateway;
let admin: string;
let user: string;

beforeAll(async () => {
  // Deployed, with a replica wanted but none running: requests wait in the queue.
  tiny = await startTinyGateway({ settings: { requestTimeoutMs: 400, maxRequestBytes: 10_000 } });
  ({ ctl, gateway } = tiny);
  admin = (await createApiKey(ctl, "admin", "admin")).key;
  user = (await createApiKey(ctl, "user", "user")).key;
});

afterAll(async () => {
  await tiny?.stop();
});

const call = (path: string, init: RequestInit & { key?: string | null } = {}) =>
  fetch(`${gateway.url}${path}`, {
    method: init.method ?? "POST",
    body: init.body,
    headers: {
      "content-type": "application/json",
      ...(init.key === null ? {} : { authorization: `Bearer ${init.key ?? user}` }),
      ...(init.headers as Record<string, string>),
    },
  });

async function errorOf(res: Response) {
  const body = (await res.json()) as {
    error: { message: string; type: string; param: string | null; code: string | null };
  };
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  return body.error;
}

describe("gateway edges", () => {
  it("401 without a key, in the OpenAI envelope, with a request id", async () => {
    const res = await call("/v1/models", { method: "GET", key: null });
    expect(res.status).toBe(401);
    expect(res.headers.get("x-request-id")).toBeTruthy();
    expect(await errorOf(res)).toMatchObject({ type: "authentication_error", code: "invalid_api_key" });
  });

  it("echoes a caller's x-request-id", async () => {
    const res = await call("/v1/models", { method: "GET", headers: { "x-request-id": "trace-123" } });
    expect(res.headers.get("x-request-id")).toBe("trace-123");
    // One that could forge a log line, or runs past 255 characters, is replaced by a minted one.
    for (const unsafe of ["a b", "x".repeat(256)]) {
      const replaced = await call("/v1/models", { method: "GET", headers: { "x-request-id": unsafe } });
      expect(replaced.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{24}$/);
    }
  });

  it("403 for management routes with a user key", async () => {
    const res = await call("/admin/v1/models", { method: "GET" });
    expect(res.status).toBe(403);
    expect(await errorOf(res)).toMatchObject({ type: "permission_error", code: "permission_denied" });
    expect((await call("/admin/v1/models", { method: "GET", key: admin })).status).toBe(200);
  });

  it("404 for unknown routes", async () => {
    const res = await call("/v2/whatever", { method: "GET" });
    expect(res.status).toBe(404);
    expect((await errorOf(res)).code).toBe("unknown_route");
  });

  it("invalid_json for a body that is not JSON, on every route that reads one", async () => {
    for (const [path, init] of [
      ["/v1/chat/completions", {}],
      ["/v1/fine_tuning/jobs", {}],
      ["/admin/v1/evaluations", { key: admin }],
      ["/admin/v1/endpoints/tiny/autoscaling", { key: admin, method: "PUT" }],
    ] as const) {
      const res = await call(path, { ...init, body: "{not json" });
      expect(res.status, path).toBe(400);
      expect(await errorOf(res), path).toMatchObject({ code: "invalid_json", type: "invalid_request_error" });
    }
  });

  it("400 for invalid JSON and for wrong types, naming the field", async () => {
    const bad = await call("/v1/chat/completions", { body: "{not json" });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).code).toBe("invalid_json");
    const wrong = await call("/v1/chat/completions", {
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x" }], max_tokens: "ten" }),
    });
    expect(wrong.status).toBe(400);
    const err = await errorOf(wrong);
    expect(err.param).toBe("max_tokens");
    expect(err.message).toMatch(/max_tokens/);
    const n = await call("/v1/chat/completions", {
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x" }], n: 17 }),
    });
    expect(n.status).toBe(400);
    expect((await errorOf(n)).message).toMatch(/n: n is at most 16/);
    const unknown = await call("/v1/chat/completions", {
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "x" }], modalities: ["audio"] }),
    });
    expect(unknown.status).toBe(400);
    expect(await errorOf(unknown)).toMatchObject({
      param: "modalities",
      message: expect.stringMatching(/modalities: is not supported by this server/),
    });
  });

  it("413 for a body over the limit", async () => {
    const res = await call("/v1/completions", { body: JSON.stringify({ model: "tiny", prompt: "x".repeat(20_000) }) });
    expect(res.status).toBe(413);
    expect((await errorOf(res)).code).toBe("request_too_large");
  });

  it("504 when nobody answers in time, and the job is withdrawn from the queue", async () => {
    const res = await call("/v1/completions", {
      body: JSON.stringify({ model: "tiny", prompt: "hello", max_tokens: 3 }),
    });
    expect(res.status).toBe(504);
    expect((await errorOf(res)).code).toBe("timeout");
    const status = await call("/admin/v1/endpoints/tiny", { method: "GET", key: admin });
    const body = (await status.json()) as { state: string; queue: { waiting: number } };
    expect(body.state).toBe("pending");
    expect(body.queue.waiting).toBe(0);
  });

  it("routes the next request by an endpoint just deployed or deleted through the admin API", async () => {
    for (let i = 0; i < 10; i++) {
      const name = `just-deployed-${i}`;
      const put = await call(`/admin/v1/endpoints/${name}`, {
        method: "PUT",
        key: admin,
        body: JSON.stringify({ model: { name: "tiny" }, resources: { replicas: 0 } }),
      });
      expect(put.status).toBe(200);
      expect((await call(`/v1/models/${name}`, { method: "GET" })).status).toBe(200);
      expect((await call(`/admin/v1/endpoints/${name}`, { method: "DELETE", key: admin })).status).toBe(200);
      expect((await call(`/v1/models/${name}`, { method: "GET" })).status).toBe(404);
    }
  });

  it("serves Prometheus metrics under the vLLM names", async () => {
    const res = await fetch(gateway.metricsUrl);
    const text = await res.text();
    expect(text).toContain("vllm:num_requests_waiting");
    expect(text).toMatch(/platform_replicas_desired\{model_name="tiny",version="v1"\} 1/);
  });
});
