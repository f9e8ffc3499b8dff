/**
 * Processes leave nothing behind and kill nothing by mistake: `platform up`
 * killed outright (its in-flight job handed back, its data kept for the next
 * `up`), SIGHUP, a second Ctrl-C, a worker's drain deadline, and a gateway that
 * survives garbage on its reply stream.
 */
import { spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Queue } from "bullmq";
import { Redis } from "ioredis";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueName } from "../../src/contracts/naming.ts";
import { alive } from "../helpers/processes.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { QueueObserver } from "../helpers/queue-observer.ts";
import { BIN, type OwnStack, startStack } from "../helpers/stack.ts";
import { holdsWithin, sleep } from "../helpers/wait.ts";
import { startEmbeddedRedis } from "../../src/redis/embedded.ts";
import { connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { WORKER_ALLOCATOR_ENV } from "../../src/process/worker-env.ts";

type Status = { state: string; replica_list: { id: string; pid: number }[]; queue: { active: number } };

/** Every process on this machine that belongs to the stack: its data dir in its environment or command line. */
async function processesOf(dataDir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const environ = await readFile(`/proc/${entry}/environ`, "utf8").catch(() => "");
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (environ.split("\0").includes(`PLATFORM_DATA_DIR=${dataDir}`) || cmdline.includes(dataDir))
      found.push(`${entry}: ${cmdline.replace(/\0/g, " ")}`);
  }
  return found;
}

/** Polls until nothing of the stack runs; returns what still runs after `ms`. */
async function survivorsAfter(dataDir: string, pids: number[], ms: number): Promise<string[]> {
  let left: string[] = [];
  await holdsWithin(
    async () => {
      left = [...(await processesOf(dataDir)), ...pids.filter(alive).map((p) => `${p} (alive)`)];
      return left.length === 0;
    },
    ms,
    100,
  );
  return left;
}

function exitOf(stack: OwnStack): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const child = stack.process;
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
}

/** `use` on the stack's `tiny` queue, through connections of its own that close after it (the stack's Redis may go next). */
async function onTinyQueue<T>(redisUrl: string, use: (queue: Queue) => Promise<T>): Promise<T> {
  const ctl = connectControl(redisUrl, "platform");
  const queues = new QueueBase(ctl);
  try {
    return await use(queues.queue("tiny", "v1"));
  } finally {
    await queues.close();
    ctl.redis.disconnect();
  }
}

/** The id of the one job a worker holds on the `tiny` queue. */
async function pidsOf(stack: OwnStack): Promise<{ workers: number[]; redis: number }> {
  const s = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
  const redis = Number((await readFile(join(stack.dataDir, "redis", "redis.pid"), "utf8")).trim());
  return { workers: s.replica_list.map((r) => r.pid), redis };
}

let model: string;
beforeAll(async () => {
  model = await tinyModelPath({ contextLength: 4096 });
});

describe("one stack, attacked from inside", () => {
  let stack: OwnStack;
  let client: OpenAI;
  beforeAll(async () => {
    stack = await startStack({
      model,
      args: ["--name", "tiny"],
      // A short drain deadline, and a request timeout that ends a test rather than hanging it.
      env: { PLATFORM_DRAIN_TIMEOUT_MS: "200", PLATFORM_REQUEST_TIMEOUT_MS: "30000" },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("skips garbage on the gateway's reply stream and keeps answering", async () => {
    expect(
      (await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: 3 })).usage?.completion_tokens,
    ).toBe(3);
    const redis = new Redis(stack.redisUrl);
    try {
      const [, keys] = await redis.scan("0", "MATCH", "platform:*replies:*", "COUNT", 1000);
      const streams = keys.filter((k) => !k.includes(":batch:"));
      expect(streams.length).toBe(1);
      const stream = streams[0] as string;
      await redis.xadd(stream, "*", "job", "not-a-job", "e", "{this is not json");
      await redis.xadd(stream, "*", "only", "one-field");
      await redis.xadd(stream, "*", "job", "x", "e", JSON.stringify({ type: "unknown" }));
    } finally {
      redis.disconnect();
    }
    const res = await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: 4 });
    expect(res.usage?.completion_tokens).toBe(4);
    expect(stack.output()).not.toMatch(/SyntaxError/);
  });

  it("starts its workers, and only them, with the allocator settings made for a worker (scaler/backends/endpoints/backend.ts)", async () => {
    const environOf = async (pid: number) => (await readFile(`/proc/${pid}/environ`, "utf8")).split("\0");
    const workers = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.replica_list.map((r) => r.pid);
    expect(workers.length).toBeGreaterThan(0);
    for (const pid of workers)
      expect(await environOf(pid)).toEqual(
        expect.arrayContaining(Object.entries(WORKER_ALLOCATOR_ENV).map(([name, value]) => `${name}=${value}`)),
      );
    expect((await environOf(stack.process.pid as number)).filter((v) => v.startsWith("MALLOC_"))).toEqual([]);
  });

  it("a second `up` on the same data directory is refused while the first runs, and the first serves on", async () => {
    const redisPid = async () => {
      const redis = new Redis(stack.redisUrl);
      try {
        return Number(/process_id:(\d+)/.exec(await redis.info("server"))?.[1]);
      } finally {
        redis.disconnect();
      }
    };
    const before = await redisPid();
    const env = { ...stack.env, PLATFORM_BASE_URL: undefined, PLATFORM_API_KEY: undefined };
    const second = spawn(process.execPath, [BIN, "up", "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    second.stdout.on("data", (d) => (out += d));
    second.stderr.on("data", (d) => (out += d));
    const code = await new Promise<number | null>((resolve) => {
      // Were it to start, it would serve until stopped: stop it, and the assertions below say why.
      const started = setTimeout(() => second.kill("SIGINT"), 60_000);
      second.once("exit", (c) => {
        clearTimeout(started);
        resolve(c);
      });
    });
    expect(out).toMatch(
      new RegExp(`another \`platform up\` \\(process ${stack.process.pid}\\) is running on this data directory`),
    );
    expect(out).toMatch(/give this one its own --data-dir/);
    expect(code).toBe(1);
    expect(await redisPid()).toBe(before);
    expect(
      (await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: 2 })).usage?.completion_tokens,
    ).toBe(2);
  }, 90_000);

  it("a worker past its drain deadline aborts its generation and hands the job back", async () => {
    const before = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.replica_list[0] as {
      id: string;
      pid: number;
    };
    const victim = before.pid;
    const observer = await QueueObserver.start(stack.redisUrl, "platform", queueName("tiny", "v1"));
    let answered = false;
    const long = client.completions
      .create({ model: "tiny", prompt: "Once upon a time", max_tokens: 4000, temperature: 0 })
      .finally(() => {
        answered = true;
      });
    await stack.waitFor(
      async () => (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.queue.active === 1,
      "the request to be in flight",
    );
    process.kill(victim, "SIGTERM");
    await stack.waitFor(async () => !alive(victim), "the worker to exit", 30_000);
    // It did not wait for the generation to finish: the request is still open, and is then
    // served whole by the replacement replica, from the queue.
    expect(answered).toBe(false);
    const res = await long;
    expect(res.usage?.completion_tokens).toBe(4000);
    await observer.drain();
    await observer.stop();
    const [jobId] = observer.takenJobIds();
    // Taken twice — by the draining worker, then by its replacement — and handed back in
    // between, not left to stall or failed.
    expect(observer.takenJobIds().length).toBe(1);
    expect(observer.count(jobId as string, "active")).toBe(2);
    expect(observer.count(jobId as string, "stalled")).toBe(0);
    expect(observer.count(jobId as string, "failed")).toBe(0);
    await stack.waitFor(
      async () => (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.state === "available",
      "a replacement",
    );
  });

  it("killed outright (SIGKILL) mid-request, `up` leaves no worker and no Redis behind (within 10 s), and the job is handed back", async () => {
    await stack.waitFor(async () => (await pidsOf(stack)).workers.length === 1, "one replica");
    const { workers, redis } = await pidsOf(stack);
    expect(workers.every(alive) && alive(redis)).toBe(true);
    expect((await processesOf(stack.dataDir)).length).toBeGreaterThanOrEqual(3); // up, a worker, Redis (and its watchdog)
    // Streamed, so that the kill comes as soon as the first token does: the tiny model writes 4000
    // tokens in about a second, and a kill after polling for the job could come after its end.
    const stream = await client.completions.create({
      model: "tiny",
      prompt: "Once upon a time",
      max_tokens: 4000,
      stream: true,
    });
    const tokens = stream[Symbol.asyncIterator]();
    await tokens.next();
    stack.process.kill("SIGKILL");
    const rest = (async () => {
      while (!(await tokens.next()).done);
    })().catch((e: unknown) => e);
    await exitOf(stack);
    expect(await survivorsAfter(stack.dataDir, [...workers, redis], 10_000)).toEqual([]);
    expect(await rest).toBeInstanceOf(Error); // the gateway went with `up`
    // Where the job ended up, as this data directory's Redis replays it from its AOF: the worker
    // handed it back (Redis outlived `up` long enough), so no retry is spent and none is lost.
    const again = await startEmbeddedRedis(join(stack.dataDir, "redis"), { onNote: () => undefined });
    try {
      await onTinyQueue(again.url, async (queue) => {
        // The only job this test sent since the queue was last empty.
        // Waiting, or prioritized: online jobs carry their fair-share place as BullMQ's priority.
        const waiting = await queue.getJobs(["waiting", "prioritized"]);
        expect(waiting.map((j) => (j.data as { prompt?: string }).prompt)).toEqual(["Once upon a time"]);
        expect(await queue.getActiveCount()).toBe(0);
      });
    } finally {
      await again.stop();
    }
  }, 120_000);

  it("a second `up` on the same data directory keeps the admin key valid", async () => {
    const env = { ...stack.env, PLATFORM_BASE_URL: undefined, PLATFORM_API_KEY: undefined };
    const child = spawn(process.execPath, [BIN, "up", "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      const t0 = Date.now();
      while (!/Press Ctrl-C to stop/.test(out)) {
        if (child.exitCode !== null || Date.now() - t0 > 60_000)
          throw new Error(`the second \`up\` did not start:\n${out}`);
        await sleep(50);
      }
      // The key the first `up` minted (MULTI/EXEC) came back with the AOF: nothing re-minted.
      expect(out).not.toMatch(/not valid here|a new admin key replaces it/);
      expect((out.match(/API key\s+(\S+)/) ?? [])[1]).toBe(stack.apiKey);
      const baseUrl = (out.match(/base URL\s+(\S+)\/v1/) ?? [])[1] as string;
      const res = await fetch(`${baseUrl}/admin/v1/endpoints/tiny`, {
        headers: { authorization: `Bearer ${stack.apiKey}` },
      });
      expect(res.status).toBe(200);
    } finally {
      if (child.exitCode === null) child.kill("SIGINT");
    }
    expect(await exited).toBe(0);
    expect(await survivorsAfter(stack.dataDir, [], 10_000)).toEqual([]);
  }, 120_000);
});

describe("signals", () => {
  it("SIGHUP stops cleanly, like SIGTERM: exit 0, nothing left", async () => {
    const stack = await startStack({ model, args: ["--name", "tiny"] });
    try {
      const { workers, redis } = await pidsOf(stack);
      stack.process.kill("SIGHUP");
      expect(await exitOf(stack)).toEqual({ code: 0, signal: null });
      expect(stack.output()).toMatch(/SIGHUP: stopping/);
      expect(stack.output()).toMatch(/stopped\./);
      expect(await survivorsAfter(stack.dataDir, [...workers, redis], 10_000)).toEqual([]);
    } finally {
      await stack.stop();
    }
  });

  it("a second Ctrl-C forces a fast stop that still takes every child down, Redis included", async () => {
    const stack = await startStack({ model, args: ["--name", "tiny"] });
    try {
      const { workers, redis } = await pidsOf(stack);
      const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
      // A long generation keeps the first, graceful stop busy draining.
      const long = client.completions
        .create({ model: "tiny", prompt: "Once upon a time", max_tokens: 4000 })
        .catch(() => undefined);
      await stack.waitFor(
        async () => (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.queue.active === 1,
        "the request to be in flight",
      );
      stack.process.kill("SIGINT");
      await stack.waitFor(async () => /SIGINT: stopping/.test(stack.output()), "the first stop to begin");
      stack.process.kill("SIGINT");
      const exit = await exitOf(stack);
      expect(stack.output()).toMatch(/second signal/);
      expect(exit.code).toBe(1);
      expect(await survivorsAfter(stack.dataDir, [...workers, redis], 10_000)).toEqual([]);
      await long;
    } finally {
      await stack.stop();
    }
  });
});
