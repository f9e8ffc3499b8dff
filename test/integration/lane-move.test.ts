/**
 * A lane's waiting job moved to the shared queue (src/queue/lanes.ts, moveWaiting) against real
 * Redis and BullMQ: moved once however many callers race for it (a reclaim, a lane's timer), with
 * its data and priority, and never once a worker took it; a copy made of a job already taken and
 * answered would run it twice (seen as a job completed twice in fleet's failover on a loaded machine).
 */
import { randomUUID } from "node:crypto";
import type { Job } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { laneName, moveWaiting } from "../../src/queue/lanes.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

let ctl: Control;
let base: QueueBase;
let server: PrivateRedis;

beforeAll(async () => {
  server = await privateRedis();
  ctl = connectControl(server.url, `test-lane-move-${randomUUID().slice(0, 8)}`);
  base = new QueueBase(ctl);
});

afterAll(async () => {
  await base.close();
  ctl.redis.disconnect();
  await server.stop();
});

const queues = (model: string) => {
  const shared = base.queue(model, "v1");
  return { shared, lane: base.queueNamed(laneName(shared.name, "r1")) };
};

describe("moveWaiting", () => {
  it("moves a waiting job once when several callers race for it, priority and data kept", async () => {
    const { shared, lane } = queues("race");
    const job = await lane.add("chat", { n: 1 }, { priority: 3, jobId: randomUUID() });
    const moved = await Promise.all(
      Array.from({ length: 4 }, () => moveWaiting(ctl.redis, lane, shared, job.id as string)),
    );
    expect(moved.filter(Boolean)).toHaveLength(1);
    expect(await lane.getJob(job.id as string)).toBeUndefined();
    const copies = await shared.getJobs(["waiting", "prioritized"]);
    expect(copies.map((c) => [c.id, c.data, c.opts.priority])).toEqual([[job.id, { n: 1 }, 3]]);
  });

  it("moves nothing once a worker took the job, even after it finished and was removed", async () => {
    const { shared, lane } = queues("taken");
    const job = await lane.add("chat", { n: 2 }, { removeOnComplete: true, jobId: randomUUID() });
    let done: (j: Job) => void = () => undefined;
    const finished = new Promise<Job>((resolve) => (done = resolve));
    const worker = base.workerNamed(lane.name, async () => "answer", { autorun: false });
    worker.on("completed", (j) => done(j));
    void worker.run();
    await finished;
    await worker.close();
    expect(await moveWaiting(ctl.redis, lane, shared, job.id as string)).toBe(false);
    expect(await shared.getJobs(["waiting", "prioritized", "active", "completed"])).toEqual([]);
  });
});
