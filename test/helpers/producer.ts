/**
 * A separate producer process, as another team's service would be: it enqueues
 * into the model queue following the README's queue contract, with no gateway
 * in between, then prints the result (and, with a reply stream, the streamed
 * tokens) as one JSON line. It reaches BullMQ through src/queue/, the
 * same code as the platform's own producers.
 * Usage: node test/helpers/producer.ts <redis-url> <model> <version> <prompt> <max_tokens>
 */
import { randomUUID } from "node:crypto";
import { connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { replyHandler } from "../../src/queue/replies.ts";

const [redisUrl, model, version, prompt, maxTokens] = process.argv.slice(2) as [string, string, string, string, string];
const ctl = connectControl(redisUrl, "platform");
const base = new QueueBase(ctl);
const queue = base.queue(model, version);
const events = base.events(queue.name);
await events.waitUntilReady();

const job = () => ({
  v: 1,
  kind: "completion",
  request_id: randomUUID(),
  model,
  version,
  prompt,
  params: { max_tokens: Number(maxTokens), temperature: 0 },
});

// 1. Final result only: BullMQ's own completion tracking.
const plain = await queue.add("completion", job());
const result = await plain.waitUntilFinished(events, 90_000);

// 2. Streaming: name a reply stream and read the job's events from it.
const stream = `my-service:replies:${randomUUID()}`;
const streamed = await queue.add("completion", { ...job(), stream: true, reply: { stream } });
const tokens: string[] = [];
const types: string[] = [];
let done = false;
const onEvents = replyHandler("producer", (jobId, event) => {
  if (jobId !== streamed.id) return;
  types.push(event.type);
  if (event.type === "token") tokens.push(event.text);
  if (event.type === "done" || event.type === "error") done = true;
});
const reader = base.reader(stream, { blockMs: 5000 });
while (!done) {
  const read = await reader.readOnce(onEvents);
  // A job BullMQ fails on its own (its replicas died with it twice) puts no event on the
  // stream: while the stream is quiet, ask the queue (docs/queue-contract.md).
  if (read === 0 && (await streamed.getState()) === "failed") {
    console.error(
      `job ${streamed.id} failed without an event: ${(await queue.getJob(streamed.id as string))?.failedReason}`,
    );
    process.exit(1);
  }
}
console.log(JSON.stringify({ result, tokens, types }));
await base.close();
await ctl.redis.quit();
