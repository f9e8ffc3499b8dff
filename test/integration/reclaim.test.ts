/**
 * Taking back a dead replica's jobs (src/queue/reclaim.ts, scaler/reaper.ts)
 * against real Redis and real BullMQ workers. A worker "dies" by dropping its
 * connections with a job in hand, leaving the job active and locked, as a
 * SIGKILL does.
 */
import { randomUUID } from "node:crypto";
import type { Job, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import type { Replica } from "../../src/replicas/record.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { writeReplica } from "../../src/replicas/heartbeats.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { reclaimJobs } from "../../src/queue/reclaim.ts";
import { decodeReplyEntry } from "../../src/queue/replies.ts";
import { reapSilentReplicas } from "../../scaler/reaper.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PREFIX = `test-reclaim-${randomUUID().slice(0, 8)}`;
let ctl: Control;
let base: QueueBase;
let server: PrivateRedis;

beforeAll(async () => {
  server = await privateRedis();
  ctl = connectControl(server.url, PREFIX);
  base = new QueueBase(ctl);
});

afterAll(async () => {
  await base.close();
  ctl.redis.disconnect();
  await server.stop();
});

/** A worker that takes one job and never finishes it; returns it once the job is active in its hands. */
async function workerHolding(model: string): Promise<{ worker: Worker; job: Job }> {
  let taken: (job: Job) => void = () => undefined;
  const took = new Promise<Job>((resolve) => (taken = resolve));
  const worker = base.worker(
    model,
    "v1",
    (job) => {
      taken(job);
      return new Promise(() => undefined);
    },
    { autorun: false, lockDuration: 60_000 },
  );
  void worker.run().catch(() => undefined);
  return { worker, job: await took };
}

function record(model: string, worker: Worker, heartbeat = Date.now()): Replica {
  return {
    id: `${model}-r1`,
    endpoint: model,
    model,
    version: "v1",
    state: "ready",
    pid: 1,
    host: "h",
    started: heartbeat,
    heartbeat,
    in_flight: 1,
    parallel: 1,
    queue_worker: worker.id,
    heartbeat_ms: 1000,
  };
}

async function replies(stream: string): Promise<unknown[]> {
  const entries = (await ctl.redis.xrange(stream, "-", "+")) as [string, string[]][];
  return entries.map(([, fields]) => decodeReplyEntry(fields));
}

describe("reclaimJobs", () => {
  it("puts a dead replica's job back at the head of the queue and tells the waiting client", async () => {
    const queue = base.queue("m1", "v1");
    const stream = `${PREFIX}:replies:m1`;
    const job = await queue.add("completion", { reply: { stream } });
    const { worker } = await workerHolding("m1");
    const other = await queue.add("completion", {});
    await worker.close(true).catch(() => undefined); // dies: the job stays active, its lock held
    expect(await queue.getJobState(job.id as string)).toBe("active");

    const done = await reclaimJobs(base, record("m1", worker));
    expect(done).toEqual({ requeued: [job.id], failed: [] });
    expect(await queue.getJobState(job.id as string)).toBe("waiting");
    // Next in line (workers take from the list's right end), ahead of the job already waiting.
    expect(await ctl.redis.lrange(queue.keys.wait as string, 0, -1)).toEqual([other.id, job.id]);
    expect(await replies(stream)).toEqual([
      { jobId: job.id, event: { type: "started", replica: "(requeued after replica m1-r1 stopped)", attempt: 0 } },
    ]);
  });

  it("leaves alone the jobs other workers hold, and fails a job that lost a second replica", async () => {
    const queue = base.queue("m2", "v1");
    const stream = `${PREFIX}:replies:m2`;
    const job = await queue.add("completion", { reply: { stream } });
    const first = await workerHolding("m2");
    await first.worker.close(true).catch(() => undefined);
    // Someone else's death: nothing of ours moves.
    expect(await reclaimJobs(base, { ...record("m2", first.worker), queue_worker: "another-worker" })).toEqual({
      requeued: [],
      failed: [],
    });
    expect(await queue.getJobState(job.id as string)).toBe("active");
    expect((await reclaimJobs(base, record("m2", first.worker))).requeued).toEqual([job.id]);

    const second = await workerHolding("m2");
    expect(second.job.id).toBe(job.id);
    await second.worker.close(true).catch(() => undefined);
    expect(await reclaimJobs(base, record("m2", second.worker))).toEqual({ requeued: [], failed: [job.id] });
    expect(await queue.getJobState(job.id as string)).toBe("failed");
    expect((await queue.getJob(job.id as string))?.failedReason).toMatch(/stalled/);
    // The client hears it at once, as the 502 a request that killed two replicas gets.
    expect((await replies(stream)).at(-1)).toEqual({
      jobId: job.id,
      event: { type: "error", error: expect.objectContaining({ status: 502, code: "replica_lost" }) },
    });
  });
});

describe("reapSilentReplicas", () => {
  it("takes back the jobs of a replica whose heartbeat went silent, and only those", async () => {
    const queue = base.queue("m3", "v1");
    const endpoint: Endpoint = {
      name: "m3",
      config: DeploymentConfig.parse({ model: { name: "m3", version: "v1" } }),
      version: "v1",
      framework: "llamacpp",
      desired_replicas: 1,
      created: 0,
      updated: 0,
    };
    const job = await queue.add("completion", {});
    const { worker } = await workerHolding("m3");
    await worker.close(true).catch(() => undefined);
    const lines: string[] = [];
    // Beating 1 s ago: alive.
    await writeReplica(ctl, record("m3", worker, Date.now() - 1000));
    await reapSilentReplicas(base, [endpoint], (l) => lines.push(l));
    expect(await queue.getJobState(job.id as string)).toBe("active");
    // Silent for 3 beats: dead.
    await writeReplica(ctl, record("m3", worker, Date.now() - 3000));
    await reapSilentReplicas(base, [endpoint], (l) => lines.push(l));
    expect(await queue.getJobState(job.id as string)).toBe("waiting");
    expect(lines.join("\n")).toMatch(/replica m3-r1 of m3 is silent for \d+ ms: 1 job\(s\) back in the queue/);
  });
});
