/**
 * A separate producer process, as another team's service would be: it enqueues
 * straight into BullMQ following the README's queue contract, then prints the
 * result (and, with a reply stream, the streamed tokens) as one JSON line.
 * Usage: node test/helpers/producer.ts <redis-url> <model> <version> <prompt> <max_tokens>
 */
import { randomUUID } from "node:crypto";
import { Queue, QueueEvents } from "bullmq";
import { Redis } from "ioredis";

const [redisUrl, model, version, prompt, maxTokens] = process.argv.slice(2) as [string, string, string, string, string];
const connection = { url: redisUrl };
const queueName = `${model}@${version}`;
const queue = new Queue(queueName, { connection, prefix: "platform" });
const events = new QueueEvents(queueName, { connection, prefix: "platform" });
await events.waitUntilReady();

// 1. Final result only: BullMQ's own completion tracking.
const plain = await queue.add("completion", {
  v: 1,
  kind: "completion",
  request_id: randomUUID(),
  model,
  version,
  prompt,
  params: { max_tokens: Number(maxTokens), temperature: 0 },
});
const result = await plain.waitUntilFinished(events, 90_000);

// 2. Streaming: name a reply stream and read the job's events from it.
const redis = new Redis(redisUrl);
const stream = `my-service:replies:${randomUUID()}`;
const streamed = await queue.add("completion", {
  v: 1,
  kind: "completion",
  request_id: randomUUID(),
  model,
  version,
  prompt,
  stream: true,
  reply: { stream },
  params: { max_tokens: Number(maxTokens), temperature: 0 },
});
const tokens: string[] = [];
const types: string[] = [];
let last = "0-0";
for (let done = false; !done; ) {
  const read = (await redis.xread("BLOCK", 5000, "STREAMS", stream, last)) as [string, [string, string[]][]][] | null;
  // A job BullMQ fails on its own (its replicas died with it twice) puts no event on the
  // stream: while the stream is quiet, ask the queue (README, queue contract).
  if (!read && (await streamed.getState()) === "failed") {
    console.error(`job ${streamed.id} failed without an event: ${(await queue.getJob(streamed.id as string))?.failedReason}`);
    process.exit(1);
  }
  for (const [, entries] of read ?? []) {
    for (const [id, fields] of entries) {
      last = id;
      if (fields[1] !== streamed.id) continue;
      const event = JSON.parse(fields[3] as string);
      types.push(event.type);
      if (event.type === "token") tokens.push(event.text);
      if (event.type === "done" || event.type === "error") done = true;
    }
  }
}
console.log(JSON.stringify({ result, tokens, types }));
await Promise.all([queue.close(), events.close(), redis.quit()]);
