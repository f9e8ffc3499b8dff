/**
 * A trainer's health port (`platform trainer --health-port 0`, workers/trainer/health.ts), on a real
 * process and Redis: live and ready while it reads its queues, its metrics under the trainer's
 * label, and not ready (still live) once Redis is gone. Needs no Python stack: the trainer's Python
 * here is the machine's python3, and no job is submitted.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scrape, total } from "../helpers/metrics-text.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { BIN } from "../helpers/stack.ts";

let redis: PrivateRedis;
let dir: string;
let trainer: ChildProcess;
let out = "";

beforeAll(async () => {
  redis = await privateRedis();
  dir = await mkdtemp(join(tmpdir(), "platform-trainer-health-"));
  trainer = spawn(process.execPath, [BIN, "trainer", "--health-port", "0"], {
    env: { ...process.env, REDIS_URL: redis.url, PLATFORM_DATA_DIR: dir, PLATFORM_TRAINER_PYTHON: "python3" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  trainer.stdout?.on("data", (d) => (out += d));
  trainer.stderr?.on("data", (d) => (out += d));
});

afterAll(async () => {
  trainer?.kill("SIGKILL");
  await redis?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("platform trainer --health-port", () => {
  it("serves /livez, /readyz and /metrics as a worker does; not ready once Redis is gone", async () => {
    await expect.poll(() => out, { timeout: 30_000 }).toContain("waiting for fine-tuning jobs");
    const port = /\/livez, \/readyz and \/metrics on port (\d+)/.exec(out)?.[1];
    expect(port, out).toBeDefined();
    const base = `http://127.0.0.1:${port}`;
    expect((await fetch(`${base}/livez`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({
      state: "ready",
      trainer: expect.stringMatching(/-\d+$/),
      running: 0,
      offers_gpu: false,
    });
    expect((await fetch(`${base}/nothing`)).status).toBe(404);
    const metrics = await scrape(`${base}/metrics`);
    expect(total(metrics, "platform_trainer_offers_gpu")).toBe(0);
    expect(total(metrics, "platform_trainer_jobs_running", { queue: "cpu" })).toBe(0);
    expect(metrics.find((s) => s.name === "platform_trainer_jobs_running")?.labels.trainer).toMatch(/-\d+$/);

    await redis.stop();
    await expect.poll(async () => (await fetch(`${base}/readyz`)).status, { timeout: 10_000 }).toBe(503);
    expect(await (await fetch(`${base}/readyz`)).json()).toMatchObject({ state: "redis_unavailable" });
    expect((await fetch(`${base}/livez`)).status).toBe(200);
  });
});
