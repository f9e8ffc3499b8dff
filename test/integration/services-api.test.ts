/**
 * The dev center's HTTP API (/admin/v1/services, docs/services.md) through a real gateway and
 * Redis: deploy refuses a tag never published; bad bodies get errors naming the field; another
 * organization's service is a 404 everywhere; secret values go in and never come out of any
 * answer; variables are versioned; rollouts, history, status and logs answer as documented.
 */
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { recordImage } from "../../src/container-images/store.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { appendLog } from "../../src/services/logs.ts";
import { writeServiceReplica } from "../../src/services/replicas.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const REPO = "registry.test:5000/acme/items";
const SECRET = "pa55-w0rd-never-shown";

let redis: PrivateRedis;
let ctl: Control;
let dataDir: string;
let gateway: RunningGateway;
const keys: Record<string, string> = {};
const everyAnswer: string[] = [];

async function call(who: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${keys[who]}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  everyAnswer.push(text);
  return { status: res.status, body: text ? JSON.parse(text.split("\n")[0] ?? "null") : undefined, text };
}

beforeAll(async () => {
  redis = await privateRedis();
  dataDir = await mkdtemp(join(tmpdir(), "platform-services-api-"));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  for (const org of ["acme", "rival"]) {
    await createOrg(ctl, org);
    keys[org] = (await createApiKey(ctl, `${org}-dev`, "user", undefined, org)).key;
  }
  keys.operator = (await createApiKey(ctl, "operator", "admin")).key;
  for (const version of ["1.0.0", "1.1.0"])
    await recordImage(ctl, {
      org: "acme",
      service: "items",
      repository: REPO,
      tag: `${version}-abcdef0`,
      digest: `sha256:${version === "1.0.0" ? "a".repeat(64) : "b".repeat(64)}`,
      git_sha: "abcdef0",
      dirty: false,
      version,
      protos: [],
      created: 1,
      published_by: { id: "key_x", name: "ci" },
    });
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe("/admin/v1/services", () => {
  it("refuses to deploy a tag that was never published", async () => {
    const r = await call("acme", "POST", "/admin/v1/services", {
      name: "items",
      tag: "9.9.9-0000000",
      repo_type: "js",
      image_repository: REPO,
    });
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe("image_not_found");
    expect(r.body.error.message).toMatch(/no image items:9.9.9-0000000 was published in your organization/);
  });

  it("names each bad field", async () => {
    const r = await call("acme", "POST", "/admin/v1/services", {
      name: "Items!",
      tag: "1.0.0-abcdef0",
      repo_type: "go",
      image_repository: REPO,
      replicas: 0,
      env: { PORT: "1", "1BAD": "x" },
    });
    expect(r.status).toBe(400);
    const message = r.body.error.message as string;
    for (const field of ["name", "repo_type", "replicas", "env"]) expect(message).toContain(field);
    expect(message).toMatch(/expected "js" or "python"/);
    expect(message).toMatch(/is set by the platform itself/);
  });

  it("deploys a published tag: the first rollout progresses", async () => {
    const r = await call("acme", "POST", "/admin/v1/services", {
      name: "items",
      tag: "1.0.0-abcdef0",
      repo_type: "js",
      image_repository: REPO,
      env: { GREETING: "hi" },
    });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      name: "items",
      org: "acme",
      replicas: 1,
      port: 8080,
      current: null,
      rollout: { id: 1, phase: "progressing", cause: "deploy", release: { tag: "1.0.0-abcdef0", revision: "r1" } },
    });
    expect(
      (
        await call("acme", "POST", "/admin/v1/services", {
          name: "items",
          tag: "1.0.0-abcdef0",
          repo_type: "js",
          image_repository: REPO,
        })
      ).status,
    ).toBe(409);
  });

  it("another organization's service is a 404 on every route, and absent from its list", async () => {
    for (const [method, path, body] of [
      ["GET", "/admin/v1/services/items"],
      ["GET", "/admin/v1/services/items/status"],
      ["GET", "/admin/v1/services/items/rollouts"],
      ["GET", "/admin/v1/services/items/logs"],
      ["GET", "/admin/v1/services/items/secrets"],
      ["PUT", "/admin/v1/services/items/secrets", { values: { X: "y" } }],
      ["PUT", "/admin/v1/services/items/overview", { markdown: "# hi" }],
      ["POST", "/admin/v1/services/items/rollouts", { restart: true }],
      ["DELETE", "/admin/v1/services/items"],
    ] as [string, string, unknown?][]) {
      const r = await call("rival", method, path, body);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe("service_not_found");
    }
    expect((await call("rival", "GET", "/admin/v1/services")).body.data).toEqual([]);
  });

  it("secrets: sealed, versioned, listed by name only; the key file is 0600", async () => {
    let r = await call("acme", "PUT", "/admin/v1/services/items/secrets", { values: { DATABASE_URL: SECRET } });
    expect(r.status).toBe(200);
    r = await call("acme", "PUT", "/admin/v1/services/items/secrets", {
      values: { DATABASE_URL: `${SECRET}-2`, API_TOKEN: SECRET },
    });
    expect(r.body.data).toEqual([
      expect.objectContaining({ name: "API_TOKEN", version: 1, by: expect.objectContaining({ name: "acme-dev" }) }),
      expect.objectContaining({ name: "DATABASE_URL", version: 2 }),
    ]);
    expect(r.body.data[0]).not.toHaveProperty("value");
    expect(((await stat(join(dataDir, "secrets.key"))).mode & 0o777).toString(8)).toBe("600");
    r = await call("acme", "DELETE", "/admin/v1/services/items/secrets/NOPE");
    expect(r.status).toBe(404);
    expect(r.body.error.message).toBe("items has no secret NOPE; it has API_TOKEN, DATABASE_URL");
    expect((await call("acme", "DELETE", "/admin/v1/services/items/secrets/API_TOKEN")).status).toBe(200);
  });

  it("scale: 1 to 20 replicas, a bad count named", async () => {
    expect((await call("acme", "PUT", "/admin/v1/services/items/replicas", { replicas: 3 })).body.replicas).toBe(3);
    const bad = await call("acme", "PUT", "/admin/v1/services/items/replicas", { replicas: 21 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toBe("replicas: expected 1 to 20");
    expect((await call("acme", "PUT", "/admin/v1/services/items/replicas", { replicas: 1 })).status).toBe(200);
  });

  it("variables show their values and versions", async () => {
    const r = await call("acme", "PUT", "/admin/v1/services/items/env", { values: { LOG_LEVEL: "debug" } });
    expect(r.body.data).toEqual([
      expect.objectContaining({ name: "GREETING", value: "hi", version: 1 }),
      expect.objectContaining({ name: "LOG_LEVEL", value: "debug", version: 1 }),
    ]);
  });

  it("a variable or secret that would steer the dynamic loader, or the platform's own name, is a 400 naming it", async () => {
    for (const kind of ["env", "secrets"])
      for (const name of ["LD_PRELOAD", "LD_LIBRARY_PATH", "PLATFORM_SECRETS_KEY"]) {
        const r = await call("acme", "PUT", `/admin/v1/services/items/${kind}`, { values: { [name]: "/tmp/x.so" } });
        expect(r.status).toBe(400);
        expect(r.body.error.message).toContain(name);
        expect(r.body.error.message).toMatch(/names starting with "LD_" steer the system's dynamic loader/);
      }
    // Nothing was stored; PATH is the service's own (it only reaches its command, inside its image).
    const listed = await call("acme", "GET", "/admin/v1/services/items/env");
    expect(listed.body.data.map((v: { name: string }) => v.name)).toEqual(["GREETING", "LOG_LEVEL"]);
    expect(
      (await call("acme", "PUT", "/admin/v1/services/items/env", { values: { PATH: "/app/bin:/usr/bin" } })).status,
    ).toBe(200);
    expect((await call("acme", "DELETE", "/admin/v1/services/items/env/PATH")).status).toBe(200);
  });

  it("rollouts: a new tag, history newest first, status, and undo needing a previous release", async () => {
    let r = await call("acme", "POST", "/admin/v1/services/items/rollouts", { tag: "1.1.0-abcdef0" });
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({ id: 2, cause: "start", phase: "progressing", release: { tag: "1.1.0-abcdef0" } });
    r = await call("acme", "POST", "/admin/v1/services/items/rollouts", { undo: true });
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe("no_previous_release");
    r = await call("acme", "POST", "/admin/v1/services/items/rollouts", { tag: "1.1.0-abcdef0", restart: true });
    expect(r.status).toBe(400);
    r = await call("acme", "GET", "/admin/v1/services/items/rollouts");
    expect(r.body.data.map((x: { id: number }) => x.id)).toEqual([2, 1]);
    // Rollout 1 was still progressing: the history says the new one took over.
    expect(r.body.data[1]).toMatchObject({
      phase: "failed",
      reason: expect.stringMatching(/^superseded by rollout 2/),
    });
    r = await call("acme", "GET", "/admin/v1/services/items/status");
    expect(r.body).toMatchObject({ name: "items", phase: "progressing", desired_replicas: 1, replicas: [] });
  });

  it("logs: the tail as NDJSON, one replica's, since a duration; a bad query named", async () => {
    for (let i = 0; i < 5; i++)
      await appendLog(ctl, "acme", "items", {
        replica: i % 2 ? "r-a" : "r-b",
        tag: "1.0.0-abcdef0",
        text: `line ${i}`,
      });
    let r = await call("acme", "GET", "/admin/v1/services/items/logs?tail=3");
    expect(
      r.text
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).text),
    ).toEqual(["line 2", "line 3", "line 4"]);
    r = await call("acme", "GET", "/admin/v1/services/items/logs?replica=r-a");
    expect(
      r.text
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).text),
    ).toEqual(["line 1", "line 3"]);
    r = await call("acme", "GET", "/admin/v1/services/items/logs?since=1m&tail=1");
    expect(JSON.parse(r.text).replica).toBe("r-b");
    r = await call("acme", "GET", "/admin/v1/services/items/logs?since=yesterday");
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe("since");
  });

  it("scrape targets list each replica's own /metrics, and the gateway's gauges count them", async () => {
    await writeServiceReplica(ctl, "acme", "items", {
      id: "items-r2-abc123",
      revision: "r2",
      tag: "1.1.0-abcdef0",
      digest: `sha256:${"b".repeat(64)}`,
      state: "ready",
      url: "http://127.0.0.1:40001",
      metrics_url: "http://127.0.0.1:40002/metrics",
      started: Date.now(),
      restarts: 0,
      heartbeat: Date.now(),
    });
    const targets = await call("operator", "GET", "/admin/v1/scrape-targets");
    expect(targets.body).toContainEqual({
      targets: ["127.0.0.1:40002"],
      labels: {
        platform_role: "service",
        platform_org: "acme",
        platform_service: "items",
        platform_replica: "items-r2-abc123",
        __metrics_path__: "/metrics",
      },
    });
    const metrics = await (await fetch(gateway.metricsUrl)).text();
    expect(metrics).toContain('platform_service_replicas{org="acme",service="items",state="ready"} 1');
    expect(metrics).toContain('platform_service_replicas_desired{org="acme",service="items"} 1');
  });

  it("no answer ever held a secret's value", async () => {
    const r = await call("acme", "GET", "/admin/v1/services/items");
    expect(r.body.secrets.map((s: { name: string }) => s.name)).toEqual(["DATABASE_URL"]);
    for (const text of everyAnswer) expect(text).not.toContain(SECRET);
  });

  it("delete forgets it and what was kept for it", async () => {
    expect((await call("acme", "DELETE", "/admin/v1/services/items")).status).toBe(200);
    expect((await call("acme", "GET", "/admin/v1/services/items")).status).toBe(404);
    expect(await ctl.redis.keys("*service*")).toEqual([]);
  });
});
