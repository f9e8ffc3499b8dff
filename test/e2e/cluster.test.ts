/**
 * Redis Cluster (issue 8): `platform up` against a three-primary cluster on
 * loopback serves a chat completion, a streamed one, a producer enqueuing by
 * the documented contract and a small batch; afterwards its keys lie on more
 * than one node, and each queue's keys, the control records and each batch's
 * working keys share one slot apiece. Cancelling several jobs at once, whose
 * marks lie in different slots, works there too.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { controlKeys, queueName } from "../../src/contracts/naming.ts";
import { connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { cancelJobs, isCancelled, listenForCancels } from "../../src/queue/cancel.ts";
import { type RedisCluster, startRedisCluster } from "../helpers/cluster.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type OwnStack, startStack } from "../helpers/stack.ts";
import { sleep } from "../helpers/wait.ts";

const MODEL = "tiny";
const RECORDS = 20;
const PROMPT = "Once upon a time";

let cluster: RedisCluster;
let stack: OwnStack;
let scratch: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "platform-cluster-e2e-"));
  cluster = await startRedisCluster();
  stack = await startStack({
    model: await tinyModelPath(),
    args: ["--name", MODEL, "--replicas", "1", "--parallel", "4", "--storage-root", scratch],
    env: { REDIS_URL: cluster.url },
  });
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  await cluster?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

it("serves requests, a producer and a batch through a Redis Cluster, with each queue in one slot and keys on several nodes", {
  timeout: 180_000,
}, async () => {
  const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey });
  const messages = [{ role: "user" as const, content: PROMPT }];
  const t0 = Date.now();
  const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 });
  const text = plain.choices[0]?.message.content ?? "";
  expect(text.length).toBeGreaterThan(0);
  const chatMs = Date.now() - t0;

  let streamed = "";
  let chunks = 0;
  for await (const chunk of await client.chat.completions.create({
    model: MODEL,
    messages,
    max_tokens: 8,
    temperature: 0,
    stream: true,
  })) {
    streamed += chunk.choices[0]?.delta.content ?? "";
    chunks++;
  }
  expect(streamed).toBe(text);
  expect(chunks).toBeGreaterThan(2);

  // A producer outside the platform, by the queue contract, on a cluster connection of its own.
  const producer = spawn(
    process.execPath,
    [new URL("../helpers/producer.ts", import.meta.url).pathname, cluster.url, MODEL, "v1", PROMPT, "5"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  let err = "";
  producer.stdout.on("data", (d) => (out += d));
  producer.stderr.on("data", (d) => (err += d));
  expect(await new Promise((resolve) => producer.once("exit", resolve)), err).toBe(0);
  expect(JSON.parse(out).result).toMatchObject({ type: "text", usage: { completion_tokens: 5 } });

  const burst = Date.now();
  const many = await Promise.all(
    Array.from({ length: 50 }, () =>
      client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 }),
    ),
  );
  const burstMs = Date.now() - burst;
  for (const r of many) expect(r.choices[0]?.message.content).toBe(text);

  const input = join(scratch, "in.jsonl");
  await writeFile(
    input,
    `${Array.from({ length: RECORDS }, (_, i) => JSON.stringify({ id: `r${i}`, prompt: PROMPT, max_tokens: 4 })).join("\n")}\n`,
  );
  const batchStart = Date.now();
  const created = await stack.admin<{ id: string }>("POST", "/v1/batch-jobs", {
    model: MODEL,
    input,
    output: join(scratch, "out.jsonl"),
    batch_size: 5,
    concurrency: 4,
  });
  expect(created.status).toBe(201);
  const batchId = created.body.id;
  type Job = { state: string; counts: { total: number; succeeded: number; failed: number } };
  const batchJob = async () => (await stack.admin<Job>("GET", `/v1/batch-jobs/${batchId}`)).body;
  await expect
    .poll(async () => (await batchJob()).state, { timeout: 120_000 })
    .toMatch(/^(completed|failed|cancelled)$/);
  const job = await batchJob();
  const batchMs = Date.now() - batchStart;
  expect(job).toMatchObject({ state: "completed", counts: { total: RECORDS, succeeded: RECORDS, failed: 0 } });
  const lines = (await readFile(join(scratch, "out.jsonl"), "utf8"))
    .trimEnd()
    .split("\n")
    .map((l) => JSON.parse(l) as { id: string; status: string });
  expect(lines.map((l) => l.id)).toEqual(Array.from({ length: RECORDS }, (_, i) => `r${i}`));
  expect(lines.every((l) => l.status === "success")).toBe(true);

  // Where the keys went: every node's keys, each with its slot.
  const byNode = await Promise.all(cluster.nodes.map(async (node) => (await node.keys("*")) as string[]));
  const slotOf = async (key: string) => (await cluster.nodes[0]!.call("CLUSTER", "KEYSLOT", key)) as number;
  const slotsOf = async (keys: string[]) => new Set(await Promise.all(keys.map(slotOf)));
  const all = byNode.flat();
  expect(byNode.filter((keys) => keys.length > 0).length).toBeGreaterThanOrEqual(2);

  const queueKeys = all.filter((k) => k.startsWith(`platform:${queueName(MODEL, "v1")}:`));
  expect(queueKeys.length).toBeGreaterThan(3);
  expect((await slotsOf(queueKeys)).size).toBe(1);
  const coordinatorKeys = all.filter((k) => k.startsWith("platform:{batches}:"));
  expect(coordinatorKeys.length).toBeGreaterThan(0);
  expect((await slotsOf(coordinatorKeys)).size).toBe(1);
  const keys = controlKeys("platform");
  const records = all.filter((k) => k.startsWith("platform:{cp}:"));
  expect(records).toEqual(expect.arrayContaining([keys.endpoints, keys.apiKeys, keys.batches, keys.batch(batchId)]));
  expect((await slotsOf(records)).size).toBe(1);
  // The one record key outside the tag would break a MULTI or script over the records. Keys with a
  // tag of their own are meant to spread: per-request, per-batch, per-API-key rate limits, usage.
  expect(
    all.filter(
      (k) =>
        k.startsWith("platform:cp:") &&
        !k.includes(":replies:") &&
        !k.includes(":cancelled:") &&
        !k.startsWith("platform:cp:batch:{") &&
        !k.startsWith("platform:cp:ratelimit:{") &&
        !k.startsWith("platform:cp:{usage}:"),
    ),
  ).toEqual([]);
  const slots = await slotsOf(all);
  console.log(
    `cluster: one chat ${chatMs} ms; 50 concurrent chats ${burstMs} ms; ${RECORDS}-record batch ${batchMs} ms; ` +
      `${all.length} keys in ${slots.size} slots, per node ${byNode.map((k) => k.length).join("/")}`,
  );
  expect(slots.size).toBeGreaterThanOrEqual(3);
  // Errors the platform survives are logged, not thrown: a key in the wrong slot would show here.
  const logs = await Promise.all(
    (await readdir(join(stack.dataDir, "logs"))).map((f) => readFile(join(stack.dataDir, "logs", f), "utf8")),
  );
  for (const log of [stack.output(), ...logs])
    expect(log).not.toMatch(/CROSSSLOT|\bMOVED\b|\bASK\b|ClusterAllFailed|Cluster redirections/);
});

it("cancels several jobs at once (marks in different slots) and announces each over the cluster", async () => {
  const ctl = connectControl(cluster.url, "cancel-test");
  const heard: string[] = [];
  const cancels = await listenForCancels(ctl, (id) => heard.push(id));
  const base = new QueueBase(ctl);
  try {
    const ids = ["job-a", "job-b", "job-c", "job-d"];
    await cancelJobs(ctl, base.queue("nobody", "v1"), ids);
    for (const id of ids) expect(await isCancelled(ctl, id)).toBe(true);
    const slots = new Set(
      await Promise.all(ids.map((id) => cluster.nodes[0]!.call("CLUSTER", "KEYSLOT", ctl.keys.cancelled(id)))),
    );
    expect(slots.size).toBeGreaterThan(1);
    for (let t0 = Date.now(); heard.length < ids.length && Date.now() - t0 < 5000; ) await sleep(20);
    expect(heard.sort()).toEqual(ids);
  } finally {
    await base.close();
    await cancels.close();
    ctl.redis.disconnect();
  }
});
