/**
 * A gateway keeps nothing of a request once it is answered: served requests, streamed or not,
 * from a key with rate limits (whose meter listens for the client leaving) and from one without,
 * leave the heap where it was. Two leaks this found: every request's context held alive through
 * the request signal's FinalizationRegistry entry (src/gateway/client-gone.ts), and every job's
 * reply waiter left in the dispatcher when the caller stopped reading at its answer.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { echoEngine } from "../../bench/echo-worker.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { getEndpoint } from "../../src/endpoints/store.ts";
import { Dispatcher } from "../../src/queue/dispatcher.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

let gw: TinyGateway;
let worker: RunningWorker;
let keys: string[];

beforeAll(async () => {
  gw = await startTinyGateway();
  worker = startWorker({
    ctl: gw.ctl,
    endpoint: await getEndpoint(gw.ctl, "tiny"),
    replicaId: "echo-memory",
    loadEngine: async () => echoEngine,
  });
  await worker.ready;
  keys = [
    (await createApiKey(gw.ctl, "plain", "user")).key,
    (await createApiKey(gw.ctl, "limited", "user", { rpm: 1_000_000, tpm: 1_000_000_000, max_concurrency: 1000 })).key,
  ];
});

afterAll(async () => {
  await worker?.drain({ deadlineMs: 0 });
  await gw?.stop();
});

/** `n` requests, 8 at a time: chat and completions, streamed and not, from both keys. */
async function serve(n: number): Promise<void> {
  let next = 0;
  const one = async () => {
    while (next < n) {
      const i = next++;
      const chat = i % 2 === 0;
      const res = await fetch(`${gw.gateway.url}/v1/${chat ? "chat/completions" : "completions"}`, {
        method: "POST",
        headers: { authorization: `Bearer ${keys[i % keys.length]}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "tiny",
          max_tokens: 2,
          stream: i % 3 === 0,
          ...(chat ? { messages: [{ role: "user", content: `hi ${i}` }] } : { prompt: `hi ${i}` }),
        }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
  };
  await Promise.all(Array.from({ length: 8 }, one));
}

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

describe("gateway memory", () => {
  it("keeps nothing of the requests it has answered", { timeout: 120_000 }, async () => {
    await serve(300); // warm: JIT, caches, pools
    const before = heapAfterGc();
    await serve(2000);
    const grown = heapAfterGc() - before;
    // Each leaked request held ~10 KB (2,000 → ~20 MB); what remains is allocator noise.
    expect(grown, `heap grew ${(grown / 1024 / 1024).toFixed(1)} MB over 2,000 requests`).toBeLessThan(4 * 1024 * 1024);
  });

  it("forgets a job's reply waiter with its answer, even when the caller reads no further", async () => {
    const dispatcher = new Dispatcher(gw.ctl, "memory-test");
    try {
      for (let i = 0; i < 5; i++) {
        const handle = await dispatcher.submit(
          {
            kind: "completion",
            request_id: `r${i}`,
            model: "tiny",
            version: "v1",
            prompt: "hi",
            params: { max_tokens: 2 },
          },
          { timeoutMs: 30_000 },
        );
        // As the gateway reads: up to the answer, and not once more.
        let event = await handle.events.next();
        while (!event.done && event.value.type !== "done") event = await handle.events.next();
        expect(event.done ? undefined : event.value.type).toBe("done");
      }
      expect(dispatcher.awaiting).toBe(0);
    } finally {
      await dispatcher.close();
    }
  });
});
