/**
 * Admission control against real Redis and a real BullMQ queue, with replica
 * heartbeats written by hand: every branch of the 429/503 decision, the
 * per-endpoint limits, and the queue-wait bound in the dispatcher.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AutoscalingSettings } from "../../src/autoscaling/config.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import type { ReplicaState } from "../../src/replicas/record.ts";
import { setAutoscaling } from "../../src/autoscaling/store.ts";
import { type Control, connectControl, duplicate, type RedisClient } from "../../src/redis/connection.ts";
import { removeReplica, writeReplica } from "../../src/replicas/heartbeats.ts";
import { detailOf, PlatformError } from "../../src/contracts/errors.ts";
import { BATCH_PRIORITY } from "../../src/contracts/job.ts";
import { Admission, limitsFor } from "../../src/queue/admission.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { Dispatcher } from "../../src/queue/dispatcher.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PREFIX = `test-admission-${randomUUID().slice(0, 8)}`;
let ctl: Control;
let dispatcher: Dispatcher;
let server: PrivateRedis;

beforeAll(async () => {
  server = await privateRedis();
  ctl = connectControl(server.url, PREFIX);
  dispatcher = new Dispatcher(ctl, "gw-test");
});

afterAll(async () => {
  await dispatcher.close();
  ctl.redis.disconnect();
  await server.stop();
});

function endpoint(name: string, desired: number, resources: Record<string, unknown> = {}): Endpoint {
  return {
    name,
    config: DeploymentConfig.parse({ endpoint: name, model: { name, version: "v1" }, resources }),
    version: "v1",
    framework: "llamacpp",
    desired_replicas: desired,
    created: Date.now(),
    updated: Date.now(),
  };
}

async function replica(name: string, id: string, state: ReplicaState, error?: string): Promise<void> {
  const now = Date.now();
  await writeReplica(ctl, {
    id,
    endpoint: name,
    model: name,
    version: "v1",
    state,
    pid: 1,
    host: "h",
    started: now,
    heartbeat: now,
    in_flight: 0,
    parallel: 1,
    error,
  });
}

/** No caching, so each call sees what the test just wrote. */
const fresh = () => new Admission(dispatcher, { depthCacheMs: 0, capacityCacheMs: 0 });

async function refusal(p: Promise<unknown>): Promise<PlatformError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(PlatformError);
  return e as PlatformError;
}

describe("admission", () => {
  it("reads gateway-wide defaults from the environment, and per-endpoint limits from resources", () => {
    expect(loadSettings({}).admission).toEqual({ maxQueueDepth: 1000, maxQueueWaitMs: 60_000, laneWaitMs: 500 });
    const env = loadSettings({
      PLATFORM_MAX_QUEUE_DEPTH: "50",
      PLATFORM_MAX_QUEUE_WAIT_MS: "1500",
      PLATFORM_PREFIX_AFFINITY: "0",
    }).admission;
    expect(env).toEqual({ maxQueueDepth: 50, maxQueueWaitMs: 1500, laneWaitMs: undefined });
    expect(() => loadSettings({ PLATFORM_MAX_QUEUE_DEPTH: "0" })).toThrow(/PLATFORM_MAX_QUEUE_DEPTH/);
    expect(limitsFor(endpoint("x", 1, { max_queue_depth: 7, max_queue_wait: "2m" }), env)).toEqual({
      maxQueueDepth: 7,
      maxQueueWaitMs: 120_000,
    });
    expect(limitsFor(endpoint("x", 1), env)).toEqual({ maxQueueDepth: 50, maxQueueWaitMs: 1500 });
    expect(
      DeploymentConfig.safeParse({ model: { name: "x" }, resources: { max_queue_wait: "60" } }).error?.issues[0]
        ?.message,
    ).toMatch(/expected "<n>s"/);
  });

  it("refuses with 503 no_capacity when nothing is ready and nothing is coming", async () => {
    const admission = fresh();
    // Scaled to zero, no autoscaling.
    const zero = endpoint("zero", 0);
    let e = await refusal(admission.admit(zero));
    expect([e.status, e.code, e.retryAfter]).toEqual([503, "no_capacity", 30]);
    expect(e.message).toMatch(/scaled to zero and autoscaling is off/);
    // Autoscaling that may not go above zero does not count either; one that can, does.
    await setAutoscaling(ctl, "zero", AutoscalingSettings.parse({ enabled: false, min_replicas: 0, max_replicas: 1 }));
    expect((await refusal(admission.admit(zero))).code).toBe("no_capacity");
    await setAutoscaling(ctl, "zero", AutoscalingSettings.parse({ min_replicas: 0, max_replicas: 1 }));
    const wakeups: string[] = [];
    const sub: RedisClient = duplicate(ctl);
    await sub.subscribe(ctl.keys.scalerWakeup);
    sub.on("message", (_c, m: string) => wakeups.push(m));
    await expect(admission.admit(zero)).resolves.toEqual({ maxQueueDepth: 1000, maxQueueWaitMs: 60_000, idle: true });
    for (let i = 0; i < 50 && wakeups.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(wakeups).toEqual(["zero"]);
    await sub.quit();

    // Every replica failed to start and none is starting: the error says where to look; the
    // replica's own error (it may quote server paths) is kept for the gateway log, not the client.
    const broken = endpoint("broken", 1);
    await replica("broken", "broken-1", "failed", "model file /srv/models/x.gguf is corrupt");
    e = await refusal(admission.admit(broken));
    expect([e.status, e.code]).toEqual([503, "no_capacity"]);
    expect(e.message).toMatch(
      /no replica of "broken" could start; `platform inference status broken` \(admin\) shows why/,
    );
    expect(e.message).not.toContain("/srv/models");
    expect(detailOf(e)?.detail).toMatch(/model file \/srv\/models\/x.gguf is corrupt/);
    // A replica starting again: requests wait for it.
    await replica("broken", "broken-2", "starting");
    await expect(admission.admit(broken)).resolves.toBeDefined();
    // Replicas of another version do not count.
    await removeReplica(ctl, "broken", "broken-2");
    await writeReplica(ctl, {
      id: "broken-old",
      endpoint: "broken",
      model: "broken",
      version: "v0",
      state: "ready",
      pid: 1,
      host: "h",
      started: 0,
      heartbeat: Date.now(),
      in_flight: 0,
      parallel: 1,
    });
    expect((await refusal(admission.admit(broken))).code).toBe("no_capacity");
  });

  it("refuses with 429 queue_full at max_queue_depth online requests waiting, counting its own admissions between reads", async () => {
    const e = endpoint("full", 1, { max_queue_depth: 3 });
    await replica("full", "full-1", "ready");
    const queue = dispatcher.queue("full", "v1");
    await queue.add("completion", {});
    // A gateway's online job waits in its priority band: it counts.
    await queue.add("completion", {}, { priority: 1000 });
    // Batch records wait at a lower priority: they never delay an online request, so they do not count.
    await queue.addBulk(
      Array.from({ length: 5 }, () => ({ name: "batch_record", data: {}, opts: { priority: BATCH_PRIORITY } })),
    );
    // A long cache: only this gateway's own admissions move the count after the first read.
    const admission = new Admission(dispatcher, { depthCacheMs: 60_000 });
    await admission.admit(e); // 2 waiting → 3
    const err = await refusal(admission.admit(e));
    expect([err.status, err.code, err.type, err.retryAfter]).toEqual([429, "queue_full", "rate_limit_error", 2]);
    expect(err.message).toMatch(/3 requests are already waiting for "full" \(max_queue_depth 3\)/);
    // Concurrent requests share one read and still stop at the limit.
    await queue.drain();
    const burst = new Admission(dispatcher, { depthCacheMs: 60_000 });
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => burst.admit(e)));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(3);
  });

  it("withdraws a request nobody took within max_queue_wait and answers 503 queue_timeout", async () => {
    const handle = await dispatcher.submit(
      { kind: "completion", request_id: "r1", model: "slow", version: "v1", prompt: "hi", params: {} },
      { timeoutMs: 30_000, queueWaitMs: 300 },
    );
    const queue = dispatcher.queue("slow", "v1");
    expect(await queue.getJobState(handle.id)).toBe("waiting");
    const e = await refusal(handle.events.next());
    expect([e.status, e.code, e.retryAfter]).toEqual([503, "queue_timeout", 5]);
    expect(await queue.getJob(handle.id)).toBeUndefined();
    expect(await ctl.redis.exists(ctl.keys.cancelled(handle.id))).toBe(1);
  });

  it("keeps waiting past max_queue_wait once a replica has the job", async () => {
    const handle = await dispatcher.submit(
      { kind: "completion", request_id: "r2", model: "taken", version: "v1", prompt: "hi", params: {} },
      { timeoutMs: 30_000, queueWaitMs: 200 },
    );
    const queue = dispatcher.queue("taken", "v1");
    // Take the job the way a worker does, without answering yet.
    let finish: (() => void) | undefined;
    const worker = dispatcher.worker("taken", "v1", () => new Promise<void>((resolve) => (finish = resolve)), {});
    for (let i = 0; i < 100 && (await queue.getJobState(handle.id)) !== "active"; i++)
      await new Promise((r) => setTimeout(r, 20));
    let settled: string | undefined;
    handle.events.next().then(
      () => (settled = "event"),
      (e: unknown) => (settled = (e as PlatformError).code),
    );
    await new Promise((r) => setTimeout(r, 600));
    // Three times the queue wait and still waiting for the answer: no 503 for a job that runs.
    expect(settled).toBeUndefined();
    await handle.cancel();
    finish?.();
    await worker.close();
  });

  it("hears an answer that arrives while it checks whether a replica has the job", async () => {
    const handle = await dispatcher.submit(
      { kind: "completion", request_id: "r3", model: "race", version: "v1", prompt: "hi", params: {} },
      { timeoutMs: 60_000, queueWaitMs: 200 },
    );
    const queue = dispatcher.queue("race", "v1");
    // The replica that holds the job answers exactly while the dispatcher asks for the job's state,
    // as a worker whose prefetched job reaches its queue deadline does.
    const getJobState = queue.getJobState.bind(queue);
    queue.getJobState = async (jobId: string) => {
      const reply = JSON.stringify({
        type: "error",
        error: { status: 503, code: "queue_timeout", param: null, message: "no sequence came free", retry_after: 5 },
      });
      await ctl.redis.xadd(dispatcher.replyStream, "*", "job", jobId, "e", reply);
      await new Promise((r) => setTimeout(r, 300)); // the reply is routed meanwhile
      return "active";
    };
    // Missed, the answer would sit unread until the request's 60 s timeout.
    const hang = new Promise<"hang">((r) => setTimeout(() => r("hang"), 15_000).unref());
    const next = await Promise.race([handle.events.next(), hang]);
    queue.getJobState = getJobState;
    expect(next).toEqual({
      done: false,
      value: { type: "error", error: expect.objectContaining({ status: 503, code: "queue_timeout" }) },
    });
  });
});

describe("jobs lost with a Redis failover", () => {
  it("ends a request whose job vanished with a retryable 503 job_lost, long before its timeout", async () => {
    const quick = new Dispatcher(ctl, "gw-lost", { lostJobCheckMs: 200 });
    try {
      const handle = await quick.submit(
        { kind: "completion", request_id: "r4", model: "lost", version: "v1", prompt: "hi", params: {} },
        { timeoutMs: 60_000 },
      );
      // What a promoted replica that never got the write looks like: the job is simply not there.
      await quick.queue("lost", "v1").remove(handle.id);
      // job_lost, not the 504 timeout the request would otherwise end with a minute later.
      const e = await refusal(handle.events.next());
      expect([e.status, e.code, e.retryAfter]).toEqual([503, "job_lost", 1]);
    } finally {
      await quick.close();
    }
  });

  it("does not mistake a finished job (deleted at once) for a lost one while its answer is on its way", async () => {
    const quick = new Dispatcher(ctl, "gw-finished", { lostJobCheckMs: 100 });
    try {
      const handle = await quick.submit(
        { kind: "completion", request_id: "r5", model: "finished", version: "v1", prompt: "hi", params: {} },
        { timeoutMs: 60_000 },
      );
      await quick.queue("finished", "v1").remove(handle.id);
      // The answer lands between the two checks that would call the job lost.
      await new Promise((r) => setTimeout(r, 150));
      const done = JSON.stringify({
        type: "done",
        result: {
          type: "text",
          text: "ok",
          finish_reason: "stop",
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          replica: "r",
        },
      });
      await ctl.redis.xadd(quick.replyStream, "*", "job", handle.id, "e", done);
      const next = await handle.events.next();
      expect(next).toMatchObject({ done: false, value: { type: "done" } });
    } finally {
      await quick.close();
    }
  });
});
