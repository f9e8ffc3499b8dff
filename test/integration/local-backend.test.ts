/** The embedded backend (scaler/backends/endpoints/local.ts) on real child processes: once killed or closed it starts no replica. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalBackend } from "../../scaler/backends/endpoints/local.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { Endpoint } from "../../src/endpoints/record.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { alive } from "../helpers/processes.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const endpoint = Endpoint.parse({
  name: "chat",
  config: DeploymentConfig.parse({ endpoint: "chat", model: { name: "stories", version: "v1" } }),
  version: "v1",
  framework: "llamacpp",
  desired_replicas: 1,
  created: 0,
  updated: 0,
});

describe("LocalBackend", () => {
  let redis: PrivateRedis;
  let ctl: Control;
  let dir: string;
  beforeAll(async () => {
    redis = await privateRedis();
    ctl = connectControl(redis.url, "test");
    dir = await mkdtemp(join(tmpdir(), "local-backend-"));
  });
  afterAll(async () => {
    ctl?.redis.disconnect();
    await redis?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  // A worker that runs until it is killed (the backend appends its arguments).
  const backend = () =>
    new LocalBackend({
      ctl,
      workerCommand: [process.execPath, "-e", "setInterval(() => undefined, 1000)"],
      env: process.env,
      logDir: join(dir, "logs"),
    });

  it("after kill (a second Ctrl-C), a scale from a scaler still running starts no replica", async () => {
    const b = backend();
    await b.scale(endpoint, 2);
    const started = b.pids("chat");
    expect(started).toHaveLength(2);
    await b.kill();
    expect(started.filter(alive)).toEqual([]);
    // The reconciler sees no replica where one is wanted, and asks again.
    await b.scale(endpoint, 2);
    expect(b.pids("chat")).toEqual([]);
    expect(await b.observe("chat")).toEqual({ requested: 0 });
  });

  it("after close, neither", async () => {
    const b = backend();
    await b.scale(endpoint, 1);
    expect(b.pids("chat")).toHaveLength(1);
    await b.close();
    await b.scale(endpoint, 1);
    expect(b.pids("chat")).toEqual([]);
  });
});
