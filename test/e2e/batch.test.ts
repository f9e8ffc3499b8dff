/**
 * Batch inference end to end: the tiny model on two replicas of the shared stack,
 * batch coordinators in their own processes (on a queue of this file's own), real s3rver.
 *
 * 10,000 records through the real engine on file:// and on S3; a coordinator
 * SIGKILLed mid-job and replaced, with every engine invocation counted per
 * record; online requests overtaking a large batch.
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchJobs } from "../../src/batch/index.ts";
import { BatchOutputLine } from "../../src/batch/record.ts";
import { queueName } from "../../src/contracts/naming.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { openStore } from "../../src/storage/index.ts";
import { type CoordinatorProcess, type S3Server, spawnCoordinator, startS3, waitForJob } from "../helpers/batch-env.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { LanesObserver, QueueObserver } from "../helpers/queue-observer.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";
import { sleep } from "../helpers/wait.ts";

const MODEL = unique("tiny");
// 10,000 records take 10-30 s on two busy cores; the default 60 s is too tight a margin.
const LONG = 240_000;
const RECORDS = 10_000;
const BUCKET = "batch-bucket";
const WORDS = [
  "dog",
  "cat",
  "bird",
  "fish",
  "bear",
  "bunny",
  "frog",
  "duck",
  "cow",
  "pig",
  "horse",
  "mouse",
  "lion",
  "tree",
  "flower",
  "sun",
  "moon",
  "sky",
  "star",
  "park",
];
const PROMPTS = WORDS.flatMap((w) => [`Once upon a time there was a ${w}`, `The little ${w} went to the park and`]);

let stack: Stack;
let ctl: Control;
/** The model queue and the coordinator queue, as the tests look into them. */
let queues: QueueBase;
let jobs: BatchJobs;
let s3: S3Server;
let coordinator: CoordinatorProcess;
let coordinatorEnv: NodeJS.ProcessEnv;
let scratch: string;
let inputPath: string;
/** The uninterrupted file:// run's output: the reference for the other runs. */
let reference: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "platform-batch-"));
  const model = await tinyModelPath();
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: model, endpoint: { resources: { replicas: 2, parallel: 4 } } });
  ctl = connectControl(stack.redisUrl, "platform");
  queues = new QueueBase(ctl);
  // Our own coordinator queue: a coordinator the stack may run never takes these jobs.
  const queue = `batches-${randomUUID().slice(0, 8)}`;
  jobs = new BatchJobs(ctl, { queue });
  s3 = await startS3(join(scratch, "s3"), BUCKET);
  coordinatorEnv = {
    ...process.env,
    ...s3.env,
    REDIS_URL: stack.redisUrl,
    PLATFORM_PREFIX: "platform",
    BATCH_QUEUE: queue,
    BATCH_LOCK_MS: "3000",
    BATCH_STALLED_MS: "1000",
  };
  coordinator = await spawnCoordinator(coordinatorEnv);

  const lines: string[] = [];
  for (let i = 0; i < RECORDS; i++)
    lines.push(JSON.stringify({ id: `rec-${i}`, prompt: PROMPTS[i % PROMPTS.length], max_tokens: 2 }));
  inputPath = join(scratch, "prompts.jsonl");
  await writeFile(inputPath, `${lines.join("\n")}\n`);
});

afterAll(async () => {
  await coordinator?.stop();
  await jobs?.close();
  await queues?.close();
  await ctl?.redis.quit();
  await s3?.close();
  await undeploy(stack, MODEL);
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

function parseOutput(text: string): BatchOutputLine[] {
  return text
    .trimEnd()
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => BatchOutputLine.parse(JSON.parse(l)));
}

/** What the engine answers online for one prompt at temperature 0. */
async function online(prompt: string): Promise<{ text: string; total: number }> {
  const res = await fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 2, temperature: 0 }),
  });
  const body = (await res.json()) as { choices: { text: string }[]; usage: { total_tokens: number } };
  return { text: body.choices[0]?.text ?? "", total: body.usage.total_tokens };
}

describe("10,000 records through the real engine", () => {
  it(
    "on file://: every record once, in input order, with the engine's text and token counts",
    async () => {
      const outDir = join(scratch, "out-file");
      const created = await jobs.create({
        model: MODEL,
        version: "latest",
        input: inputPath,
        output: `${outDir}/`,
        concurrency: 16,
        batch_size: 100,
        temperature: 0,
      });
      expect(created.state).toBe("queued");
      const job = await waitForJob(jobs, created.id);
      expect(job.state).toBe("completed");
      expect(job.resolved_version).toBe("v1");
      expect(job.counts).toEqual({ total: RECORDS, succeeded: RECORDS, failed: 0, in_flight: 0 });
      expect(job.output_file).toBe(`file://${outDir}/${job.id}.jsonl`);

      reference = await readFile(fileURLToPath(job.output_file as string), "utf8");
      const lines = parseOutput(reference);
      expect(lines.map((l) => l.id)).toEqual(Array.from({ length: RECORDS }, (_, i) => `rec-${i}`));
      const expected = await Promise.all(PROMPTS.map(online));
      lines.forEach((line, i) => {
        const want = expected[i % PROMPTS.length] as { text: string; total: number };
        expect(line).toEqual({ id: `rec-${i}`, output: want.text, tokens_used: want.total, status: "success" });
      });
      // Parts are assembled and removed; nothing else is left beside the result.
      expect(await readdir(outDir)).toEqual([`${job.id}.jsonl`]);
      // BullMQ copies return values into the queue's event stream, kept long after the batch: the
      // records' completions there are receipts, their answers nowhere but the output.
      const events = await ctl.redis.xrevrange(`platform:${queueName(MODEL, "v1")}:events`, "+", "-", "COUNT", 5000);
      const returned = events.flatMap(([, f]) => {
        const field = (name: string) => f[f.indexOf(name) + 1] as string;
        return field("event") === "completed" && field("jobId").startsWith(`${job.id}-`)
          ? [JSON.parse(field("returnvalue")) as Record<string, unknown>]
          : [];
      });
      expect(returned.length).toBeGreaterThan(100);
      for (const r of returned) expect(Object.keys(r).sort()).toEqual(["finish_reason", "replica", "type", "usage"]);
    },
    LONG,
  );

  it(
    "on S3: the same output, assembled by multipart upload, parts removed",
    async () => {
      const store = openStore(`s3://${BUCKET}`, s3.settings);
      await store.put("in/prompts.jsonl", await readFile(inputPath));
      const created = await jobs.create({
        model: MODEL,
        input: `s3://${BUCKET}/in/prompts.jsonl`,
        output: `s3://${BUCKET}/out/`,
        concurrency: 16,
        temperature: 0,
      });
      const job = await waitForJob(jobs, created.id);
      expect(job.state).toBe("completed");
      expect(job.output_file).toBe(`s3://${BUCKET}/out/${job.id}.jsonl`);
      const chunks: Buffer[] = [];
      for await (const chunk of await store.get(`out/${job.id}.jsonl`)) chunks.push(chunk as Buffer);
      expect(Buffer.concat(chunks).toString("utf8")).toBe(reference);
      const left: string[] = [];
      for await (const o of store.list("out/")) left.push(o.key);
      expect(left).toEqual([`out/${job.id}.jsonl`]);
      store.close();
    },
    LONG,
  );

  it(
    "survives a SIGKILLed coordinator: resumed from the checkpoint, no record sent to the engine twice, same output",
    async () => {
      const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"));
      const outPath = join(scratch, "killed", "result.jsonl");
      const created = await jobs.create({
        model: MODEL,
        input: `file://${inputPath}`,
        output: outPath,
        concurrency: 16,
        batch_size: 100,
        temperature: 0,
      });
      const midway = await waitForJob(
        jobs,
        created.id,
        (j) => j.counts.succeeded >= RECORDS * 0.3 || (j.state !== "running" && j.state !== "queued"),
      );
      expect(midway.state).toBe("running");
      await coordinator.kill();

      // Nobody coordinates now: the job stays running. Records it had sent are still on the
      // model queue (running, or finished with answers no part holds yet): the resumed run must
      // take their answers, not send them again.
      const frozen = await jobs.get(created.id);
      expect(frozen.state).toBe("running");
      expect(frozen.counts.succeeded).toBeLessThan(RECORDS);
      const pending = (
        await queues.queue(MODEL, "v1").getJobs(["completed", "active", "prioritized", "waiting"])
      ).filter((j) => j.id?.startsWith(`${created.id}-`));
      expect(pending.length).toBeGreaterThan(0);

      coordinator = await spawnCoordinator(coordinatorEnv);
      const job = await waitForJob(jobs, created.id);
      expect(job.state).toBe("completed");
      expect(job.counts).toEqual({ total: RECORDS, succeeded: RECORDS, failed: 0, in_flight: 0 });
      expect(job.output_file).toBe(`file://${outPath}`);
      expect(await readFile(outPath, "utf8")).toBe(reference);

      const { lost } = await observer.drain();
      await observer.stop();
      expect(lost).toBe(0);
      const seen = observer.jobIds(`${created.id}-`);
      // One model job per record, never a retry, and each taken by a worker exactly once.
      expect(seen.length).toBe(RECORDS);
      const twice: string[] = [];
      for (let line = 1; line <= RECORDS; line++) {
        if (observer.count(`${created.id}-${line}`, "active") !== 1)
          twice.push(`line ${line}: ${observer.count(`${created.id}-${line}`, "active")}`);
      }
      expect(twice).toEqual([]);
      expect(existsSync(join(scratch, "killed", `${created.id}.parts`))).toBe(false);
    },
    LONG,
  );
});

describe("shutdown", () => {
  it(
    "a coordinator stopped with SIGTERM hands its job back at once; another finishes it",
    async () => {
      const records = 3000;
      const path = join(scratch, "first-3000.jsonl");
      await writeFile(path, `${(await readFile(inputPath, "utf8")).split("\n").slice(0, records).join("\n")}\n`);
      const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"));
      const created = await jobs.create({
        model: MODEL,
        input: path,
        output: join(scratch, "handoff/"),
        concurrency: 16,
        batch_size: 100,
        temperature: 0,
      });
      await waitForJob(jobs, created.id, (j) => j.counts.succeeded >= 500);
      await coordinator.stop();
      // Back in the queue without waiting for a lock to expire.
      expect(await queues.queueNamed(coordinatorEnv.BATCH_QUEUE as string).getJobState(created.id)).toBe("waiting");
      expect((await jobs.get(created.id)).state).toBe("running");

      coordinator = await spawnCoordinator(coordinatorEnv);
      const job = await waitForJob(jobs, created.id);
      expect(job).toMatchObject({ state: "completed", counts: { total: records, succeeded: records, failed: 0 } });
      const expected = reference.split("\n").slice(0, records).join("\n");
      expect(await readFile(fileURLToPath(job.output_file as string), "utf8")).toBe(`${expected}\n`);
      expect((await observer.drain()).lost).toBe(0);
      await observer.stop();
      const counts = Array.from({ length: records }, (_, i) => observer.count(`${created.id}-${i + 1}`, "active"));
      expect(counts.filter((n) => n !== 1)).toEqual([]);
    },
    LONG,
  );
});

describe("priority", () => {
  it(
    "serves online requests ahead of the batch records already waiting",
    async () => {
      const queue = queues.queue(MODEL, "v1");
      // The queue and its replicas' lanes, where prefix-affine dispatch places online jobs, in one order.
      const observer = await LanesObserver.start(stack.redisUrl, "platform", queueName(MODEL, "v1"), { keepLog: true });
      const created = await jobs.create({
        model: MODEL,
        input: inputPath,
        output: join(scratch, "out-priority/"),
        concurrency: 64,
        temperature: 0,
      });
      // Enough batch records waiting that a request behind them would wait for many.
      // The number waiting dips while the coordinator rolls over to a new output part, so sample
      // until the queue is deep, then send the online requests at once.
      await waitForJob(jobs, created.id, (j) => j.counts.succeeded > 200);
      let waitingBefore = 0;
      for (const until = Date.now() + 10_000; Date.now() < until; await sleep(10)) {
        waitingBefore = (await queue.getJobCounts("prioritized")).prioritized ?? 0;
        if (waitingBefore > 16) break;
      }
      expect(waitingBefore).toBeGreaterThan(16);

      const served = await Promise.all(Array.from({ length: 4 }, () => online("Once upon a time")));
      for (const s of served) expect(s.total).toBeGreaterThan(0);
      await jobs.cancel(created.id);
      await waitForJob(jobs, created.id);
      await observer.drain();
      await observer.stop();

      // For each online job: how many batch records a worker took between its arrival and its start.
      const log = observer.events();
      const onlineIds = [...new Set(log.filter((e) => !e.jobId.startsWith(created.id)).map((e) => e.jobId))];
      expect(onlineIds.length).toBe(4);
      for (const id of onlineIds) {
        const added = log.findIndex((e) => e.jobId === id && e.event === "waiting");
        const active = log.findIndex((e) => e.jobId === id && e.event === "active");
        expect(added).toBeGreaterThanOrEqual(0);
        expect(active).toBeGreaterThan(added);
        const overtakenBy = log
          .slice(added, active)
          .filter((e) => e.event === "active" && e.jobId.startsWith(created.id)).length;
        // At most the 8 sequences (2 replicas x 4) freeing up in a race with the arrival; far fewer than were waiting.
        expect(overtakenBy).toBeLessThanOrEqual(8);
        expect(overtakenBy).toBeLessThan(waitingBefore);
      }
    },
    LONG,
  );
});
