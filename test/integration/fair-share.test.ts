/**
 * Priority bands and fair share between tenants on one endpoint's queue (src/queue/fair-share.ts),
 * against real Redis and a real worker on the shared tiny model: the order replicas start jobs
 * in, asserted on the `started` events of the reply stream (their order is the order the worker
 * took a sequence for them). The jobs are queued before the replica starts, so the order is the
 * queue's and the replica's choice alone, not the machine's speed.
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { endpointQueueName } from "../../src/contracts/engines.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { BATCH_PRIORITY, JOB_SCHEMA_VERSION } from "../../src/contracts/job.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import { Dispatcher, type Submission } from "../../src/queue/dispatcher.ts";
import { decodeReplyEntry } from "../../src/queue/replies.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import type { Engine } from "../../workers/engines/engine.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { loadVllm } from "../../workers/engines/vllm.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { fakeVllmPath, writeFakeVllmBin } from "../helpers/fake-vllm.ts";
import { sharedModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const modelPath = sharedModelPath();
if (!modelPath) console.warn("fair-share.test.ts: skipped, ../shared/models/stories260K is absent");

let server: PrivateRedis;
let ctl: Control;
let dispatcher: Dispatcher;
let worker: RunningWorker | undefined;

beforeAll(async () => {
  server = await privateRedis();
  ctl = connectControl(server.url, `test-fair-${randomUUID().slice(0, 8)}`);
  dispatcher = new Dispatcher(ctl, "gw-fair");
});

afterEach(async () => {
  await worker?.drain({ deadlineMs: 0 });
  worker = undefined;
});

afterAll(async () => {
  await dispatcher?.close();
  ctl?.redis.disconnect();
  await server?.stop();
});

function endpoint(name: string): Endpoint {
  return {
    name,
    config: DeploymentConfig.parse({ endpoint: name, model: { name, version: "v1" }, resources: { parallel: 1 } }),
    version: "v1",
    framework: "llamacpp",
    desired_replicas: 1,
    created: Date.now(),
    updated: Date.now(),
  };
}

type Sent = { label: string; org: string; key?: string; priority?: number };

/**
 * Queues `jobs` in order on a fresh endpoint (after `before`), then starts its one replica (one
 * sequence): the labels in the order the replica started them, and when each answer came.
 */
async function run(
  jobs: (Sent | Sent[])[],
  before: (queue: string, model: string) => Promise<void> = async () => undefined,
  through: Dispatcher = dispatcher,
  loadEngine: (e: Endpoint) => Promise<Engine> = () =>
    loadLlamaCpp({ modelPath: modelPath as string, parallel: 1, threads: 1 }),
) {
  const e = endpoint(`fair${randomUUID().slice(0, 6)}`);
  const queue = endpointQueueName(e);
  await before(queue, e.name);
  const order: string[] = [];
  const handles = [];
  const submit = async (job: Sent) => {
    const submission: Submission = {
      kind: "completion",
      request_id: job.label,
      model: e.name,
      version: "v1",
      prompt: "Once upon a time",
      params: { max_tokens: 24, temperature: 0 },
      stream: true,
      tenant: { org: job.org, key: job.key ?? `${job.org}-key` },
      ...(job.priority !== undefined && { priority: job.priority }),
    };
    return { job, handle: await through.submit(submission, { timeoutMs: 120_000, queue, cost: 40 }) };
  };
  // A burst is sent at once, as a client's concurrent requests are: its jobs are placed before any is queued.
  for (const job of jobs)
    handles.push(...(Array.isArray(job) ? await Promise.all(job.map(submit)) : [await submit(job)]));
  worker = startWorker({
    ctl,
    endpoint: e,
    replicaId: `${e.name}-1`,
    loadEngine: () => loadEngine(e),
  });
  await worker.ready;
  await Promise.all(
    handles.map(async ({ job, handle }) => {
      for await (const event of handle.events) {
        if (event.type === "started") order.push(job.label);
        if (event.type === "error") throw new Error(`${job.label}: ${event.error.message}`);
      }
    }),
  );
  return { order };
}

const startOrder = async (jobs: (Sent | Sent[])[]) => (await run(jobs)).order;

const flood = (org: string, n: number, priority?: number): Sent[] =>
  Array.from({ length: n }, (_, i) => ({ label: `${org}${i}`, org, priority }));

describe.skipIf(!modelPath)("fair share and priority", () => {
  it("a quiet organization's request, sent after another's flood, is served next, not behind the flood", async () => {
    const order = await startOrder([...flood("a", 10), { label: "quiet", org: "b" }]);
    // The flood's first job came first and holds the sequence; the quiet one is next.
    expect(order).toEqual([
      "a0",
      "quiet",
      ...flood("a", 10)
        .slice(1)
        .map((j) => j.label),
    ]);
  }, 120_000);

  it("a quiet organization's request is served next even after a flood sent as one burst", async () => {
    const order = await startOrder([flood("a", 10), { label: "quiet", org: "b" }]);
    expect(order.indexOf("quiet")).toBe(1);
  }, 120_000);

  it("two flooding organizations are served in turn, whatever their flood's size", async () => {
    const order = await startOrder([...flood("a", 6), ...flood("b", 3)]);
    expect(order).toEqual(["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4", "a5"]);
  }, 120_000);

  it("an organization's keys split the organization's one share", async () => {
    // Org a floods on two keys, org c on one (queued after): c's jobs go every other turn or so,
    // where a share per key would give it every third.
    const jobs: Sent[] = [
      ...Array.from({ length: 4 }, (_, i) => [
        { label: `x${i}`, org: "a", key: "x" },
        { label: `y${i}`, org: "a", key: "y" },
      ]).flat(),
      ...flood("c", 4),
    ];
    const order = await startOrder(jobs);
    // Each key's first job starts at the band's virtual time (a tie); from then on a's two keys
    // advance twice as fast as c's one.
    expect(order).toEqual(["x0", "y0", "c0", "x1", "c1", "y1", "c2", "x2", "c3", "y2", "x3", "y3"]);
  }, 120_000);

  it("a better priority band goes first; batch records and a lower band come after", async () => {
    // A dispatcher of its own, so its reply stream holds this test's events alone, in the order
    // the replica wrote them: the batch record's `started` lands among the online jobs' own.
    const own = new Dispatcher(ctl, "gw-fair-bands");
    const batchId = `batch-${randomUUID()}`;
    try {
      const { order } = await run(
        [...flood("low", 3, 5), { label: "urgent", org: "a", priority: -3 }, { label: "normal", org: "a" }],
        async (queue, model) => {
          // A batch record queued before it all still runs last.
          await own.queueNamed(queue).add(
            "batch_record",
            {
              v: JOB_SCHEMA_VERSION,
              kind: "batch_record",
              request_id: batchId,
              model,
              version: "v1",
              batch_id: "b1",
              record_id: "r1",
              prompt: "Once upon a time",
              params: { max_tokens: 8, temperature: 0 },
              stream: true,
              reply: { stream: own.replyStream },
            },
            { jobId: batchId, priority: BATCH_PRIORITY, removeOnComplete: true, removeOnFail: true },
          );
        },
        own,
      );
      expect(order).toEqual(["urgent", "normal", "low0", "low1", "low2"]);
      const started = async () => {
        const entries = (await ctl.redis.xrange(own.replyStream, "-", "+")) as [string, string[]][];
        return entries.flatMap(([, fields]) => {
          const entry = decodeReplyEntry(fields);
          return "event" in entry && entry.event.type === "started" ? [entry.jobId] : [];
        });
      };
      // Six starts, the batch record's last.
      await expect.poll(async () => (await started()).length, { timeout: 30_000 }).toBe(6);
      expect((await started()).at(-1)).toBe(batchId);
    } finally {
      await own.close();
    }
  }, 120_000);

  it("gives a vLLM replica (the stand-in) the same order, and each job's priority for vLLM's own scheduling", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-fair-vllm-"));
    try {
      const bin = await writeFakeVllmBin(dir);
      const record = join(dir, "record.json");
      const weights = join(dir, "model.safetensors");
      await writeFile(weights, "weights");
      const { order } = await run(
        [...flood("a", 3), { label: "quiet", org: "b" }, { label: "urgent", org: "a", priority: -3 }],
        undefined,
        dispatcher,
        (e) =>
          loadVllm({
            modelPath: weights,
            servedName: e.name,
            runtime: e.config.runtime,
            resources: e.config.resources,
            bin,
            env: { FAKE_VLLM_RECORD: record, PATH: fakeVllmPath() },
            log: () => undefined,
          }),
      );
      expect(order).toEqual(["urgent", "a0", "quiet", "a1", "a2"]);
      const bodies = (await readFile(`${record}.requests.jsonl`, "utf8"))
        .split("\n")
        .filter(Boolean)
        .map((line) => (JSON.parse(line) as { path: string; body: { priority?: number } }).body)
        .filter((b) => b && "prompt" in b && (b as { max_tokens?: number }).max_tokens === 24);
      expect(bodies.map((b) => b.priority ?? 0)).toEqual([-3, 0, 0, 0, 0]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
