/**
 * The bench's queue floor: the least a hand-off between two processes through
 * Redis costs on this machine, to set the echo figures against. A route in the
 * bench process pushes each request onto a Redis list; a second process
 * (`node bench/queue-floor.ts <list>`, REDIS_URL set) takes up to 64 at a time
 * (BLMPOP) and answers each on the reply stream it names, with the platform's
 * own reply codec and stream reader. Nothing else: no lock, no retry, no
 * priority, no record of the job, no authentication. What the platform costs
 * above this is BullMQ's protocol and the gateway's and worker's own work;
 * what this costs above the HTTP floor no queue design can save
 * (docs/performance.md, "The queue floor").
 */
import { randomUUID } from "node:crypto";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import type { JobEvent } from "../src/contracts/job.ts";
import { connectControl, duplicate } from "../src/redis/connection.ts";
import { QueueBase } from "../src/queue/base.ts";
import { appendReply, replyHandler } from "../src/queue/replies.ts";

type FloorJob = { id: string; reply: string };
const TAKE = 64;

/** The bench's side: a Hono route on 127.0.0.1 whose every request goes through the list and back. */
export async function startQueueFloor(
  redisUrl: string,
  prefix: string,
): Promise<{ url: string; close: () => Promise<void> }> {
  const ctl = connectControl(redisUrl, prefix);
  const base = new QueueBase(ctl);
  const list = `${prefix}:bench:queue-floor`;
  const replyStream = `${prefix}:bench:queue-floor:replies`;
  const waiters = new Map<string, (event: JobEvent) => void>();
  base.reader(replyStream).start(replyHandler("queue floor", (id, event) => waiters.get(id)?.(event)));
  const taker = spawn(process.execPath, [fileURLToPath(import.meta.url), list], {
    env: { ...process.env, REDIS_URL: redisUrl },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    taker.stdout.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
    taker.once("exit", (code) => reject(new Error(`queue floor process exited with ${code}`)));
  });
  const app = new Hono().post("/", async (c) => {
    const body = await c.req.json();
    const id = randomUUID();
    const answered = new Promise<JobEvent>((resolve) => waiters.set(id, resolve));
    await ctl.redis.lpush(list, JSON.stringify({ id, reply: replyStream, body }));
    const event = await answered;
    waiters.delete(id);
    return c.json({ event });
  });
  const server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 });
  await new Promise((r) => server.once("listening", r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/`,
    close: async () => {
      taker.kill("SIGTERM");
      server.close();
      await base.close();
      await ctl.redis.del(list, replyStream);
      await ctl.redis.quit();
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const list = process.argv[2] as string;
  const ctl = connectControl(process.env.REDIS_URL as string, "");
  const taker = duplicate(ctl); // its reads block
  process.once("SIGTERM", () => process.exit(0));
  console.log("ready");
  for (;;) {
    const taken = (await taker.blmpop(0, 1, list, "RIGHT", "COUNT", TAKE)) as [string, string[]] | null;
    await Promise.all(
      (taken?.[1] ?? []).map((raw) => {
        const job = JSON.parse(raw) as FloorJob;
        return appendReply(ctl.redis, job.reply, job.id, {
          type: "done",
          result: {
            type: "text",
            text: "ok",
            finish_reason: "stop",
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
            replica: "queue-floor",
          },
        });
      }),
    );
  }
}
