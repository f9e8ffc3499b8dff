/**
 * Prefix-affine dispatch (src/queue/lanes.ts) against real Redis and two real workers on the
 * shared tiny model: a conversation's turns reach one replica, a job its replica does not take
 * in time (or whose lane is full) moves to the shared queue and is answered there, and a dead
 * replica's lane is reclaimed, its jobs answered by the living one.
 */
import { randomUUID } from "node:crypto";
import type { Job, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { endpointQueueName } from "../../src/contracts/engines.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import { Admission } from "../../src/queue/admission.ts";
import { Dispatcher, type JobHandle, type Submission } from "../../src/queue/dispatcher.ts";
import { chooseReplica, laneName, prefixOf } from "../../src/queue/lanes.ts";
import { reclaimJobs } from "../../src/queue/reclaim.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import type { Replica } from "../../src/replicas/record.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { sharedModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const modelPath = sharedModelPath();
if (!modelPath) console.warn("lanes.test.ts: skipped, ../shared/models/stories260K is absent");

const NAME = "lanes";
const ENDPOINT: Endpoint = {
  name: NAME,
  config: DeploymentConfig.parse({ endpoint: NAME, model: { name: NAME, version: "v1" }, resources: { parallel: 1 } }),
  version: "v1",
  framework: "llamacpp",
  desired_replicas: 2,
  created: Date.now(),
  updated: Date.now(),
};
const QUEUE = endpointQueueName(ENDPOINT);

let server: PrivateRedis;
let ctl: Control;
let dispatcher: Dispatcher;
const routes: string[] = [];
const workers: RunningWorker[] = [];

beforeAll(async () => {
  if (!modelPath) return;
  server = await privateRedis();
  ctl = connectControl(server.url, `test-lanes-${randomUUID().slice(0, 8)}`);
  dispatcher = new Dispatcher(ctl, "gw-lanes", { onPrefixRoute: (outcome) => routes.push(outcome) });
  for (const id of ["lanes-r1", "lanes-r2"]) {
    const w = startWorker({
      ctl,
      endpoint: ENDPOINT,
      replicaId: id,
      heartbeatMs: 200,
      loadEngine: () => loadLlamaCpp({ modelPath: modelPath as string, parallel: 1, threads: 1 }),
    });
    workers.push(w);
  }
  await Promise.all(workers.map((w) => w.ready));
}, 120_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.drain({ deadlineMs: 0 })));
  await dispatcher?.close();
  ctl?.redis.disconnect();
  await server?.stop();
});

/** A conversation's turn `t`: its system prompt, first question, and `t` exchanges after it. */
function chat(system: string, t: number): Submission {
  const later = Array.from({ length: t }, (_, i) => [
    { role: "assistant" as const, content: `answer ${i}` },
    { role: "user" as const, content: `question ${i + 1}` },
  ]).flat();
  return {
    kind: "chat",
    request_id: randomUUID(),
    model: NAME,
    version: "v1",
    messages: [{ role: "system", content: system }, { role: "user", content: "Tell me a story." }, ...later],
    params: { max_tokens: 8, temperature: 0 },
  };
}

/** The replica that answered. */
async function answeredBy(handle: JobHandle): Promise<string> {
  for await (const event of handle.events) {
    if (event.type === "done") return event.result.replica;
    if (event.type === "error") throw new Error(event.error.message);
  }
  throw new Error("no answer");
}

const admission = () => new Admission(dispatcher, { capacityCacheMs: 0, depthCacheMs: 0, laneWaitMs: 5_000 });

describe.skipIf(!modelPath)("prefix-affine dispatch", () => {
  it("sends every turn of a conversation to one replica's lane, and the conversations over both", async () => {
    const served = new Map<string, Set<string>>();
    routes.length = 0;
    for (let c = 0; c < 6; c++) {
      const system = `You are assistant number ${c}, who tells short stories about animal ${c * 7}.`;
      for (let t = 0; t < 3; t++) {
        const { lanes } = await admission().admit(ENDPOINT);
        expect(lanes?.replicas.map((r) => r.id).sort()).toEqual(["lanes-r1", "lanes-r2"]);
        const submission = chat(system, t);
        const replica = chooseReplica(prefixOf(submission) as string, lanes?.replicas ?? []);
        const lane = replica && { name: replica.lane, maxDepth: 1, waitMs: 5_000 };
        const by = await answeredBy(await dispatcher.submit(submission, { timeoutMs: 60_000, queue: QUEUE, lane }));
        served.set(system, (served.get(system) ?? new Set()).add(by));
      }
    }
    for (const replicas of served.values()) expect(replicas.size).toBe(1);
    expect(new Set([...served.values()].flatMap((s) => [...s])).size).toBe(2);
    expect(routes).toEqual(Array(18).fill("affine"));
  }, 120_000);

  it("moves a job its replica does not take in time to the shared queue, and a full lane's at once", async () => {
    routes.length = 0;
    // A lane nobody serves (its replica stalled): the first job waits there its time, then spills;
    // the second finds the lane full (depth 1) and goes to the shared queue at once.
    const lane = { name: laneName(QUEUE, "lanes-stalled"), maxDepth: 1, waitMs: 300 };
    const first = await dispatcher.submit(chat("stalled", 0), { timeoutMs: 60_000, queue: QUEUE, lane });
    const second = await dispatcher.submit(chat("stalled", 1), { timeoutMs: 60_000, queue: QUEUE, lane });
    const [a, b] = await Promise.all([answeredBy(first), answeredBy(second)]);
    expect([a, b].every((r) => r === "lanes-r1" || r === "lanes-r2")).toBe(true);
    expect(routes).toEqual(["spilled", "spilled"]);
    expect(await dispatcher.queueNamed(lane.name).count()).toBe(0);
  }, 60_000);

  it("reclaims a dead replica's lane: its running job and its waiting one are answered by a living replica", async () => {
    const lane = laneName(QUEUE, "lanes-dead");
    // The dead replica's lane worker took one job and "died" holding it (its lock stays).
    let took: (job: Job) => void = () => undefined;
    const taken = new Promise<Job>((resolve) => (took = resolve));
    const dead: Worker = dispatcher.workerNamed(
      lane,
      (job) => {
        took(job);
        return new Promise(() => undefined);
      },
      { autorun: false, lockDuration: 60_000, concurrency: 1 },
    );
    void dead.run().catch(() => undefined);
    const options = { timeoutMs: 60_000, queue: QUEUE, lane: { name: lane, maxDepth: 5, waitMs: 60_000 } };
    const running = await dispatcher.submit(chat("dead", 0), options);
    await taken;
    const waiting = await dispatcher.submit(chat("dead", 1), options);
    await dead.close(true);
    const record: Replica = {
      id: "lanes-dead",
      endpoint: NAME,
      model: NAME,
      version: "v1",
      state: "ready",
      pid: 1,
      host: "h",
      started: Date.now(),
      heartbeat: Date.now(),
      in_flight: 2,
      parallel: 1,
      queue: QUEUE,
      queue_worker: "gone",
      lane,
      lane_worker: dead.id,
    };
    const reclaimed = await reclaimJobs(dispatcher, record);
    expect(reclaimed.requeued).toEqual([running.id]);
    const by = await Promise.all([answeredBy(running), answeredBy(waiting)]);
    expect(by.every((r) => r === "lanes-r1" || r === "lanes-r2")).toBe(true);
    expect(await dispatcher.queueNamed(lane).count()).toBe(0);
  }, 60_000);
});
