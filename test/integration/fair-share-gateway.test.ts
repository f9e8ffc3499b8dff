/**
 * Fair share and priority through the gateway (src/gateway/serve.ts sets each job's tenant from
 * its caller, and its band from the request's `priority`): a real gateway and worker (one
 * sequence) on the shared tiny model, keys of two organizations. The requests are queued before
 * the replica starts, so the order it answers them in is the queue's alone; with one sequence,
 * each answer ends before the next begins.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { endpointQueueName } from "../../src/contracts/engines.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { sharedModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const modelPath = sharedModelPath();
if (!modelPath) console.warn("fair-share-gateway.test.ts: skipped, ../shared/models/stories260K is absent");

let redis: PrivateRedis;
let ctl: Control;
let gateway: RunningGateway;
let worker: RunningWorker | undefined;
let dataDir: string;
const keys: Record<string, string> = {};

beforeAll(async () => {
  if (!modelPath) return;
  redis = await privateRedis();
  dataDir = await mkdtemp(join(tmpdir(), "platform-fair-"));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  await createOrg(ctl, "quiet");
  keys.flood = (await createApiKey(ctl, "flood", "admin")).key;
  keys.quiet = (await createApiKey(ctl, "quiet", "admin", undefined, "quiet")).key;
  // A key whose requests are in band -2 unless they say otherwise.
  keys.vip = (await createApiKey(ctl, "vip", "admin", { priority: -2 })).key;
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny", framework: "llamacpp", source: modelPath },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny" }, resources: { parallel: 1 } }));
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
}, 120_000);

afterAll(async () => {
  await worker?.drain({ deadlineMs: 0 });
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe.skipIf(!modelPath)("fair share through the gateway", () => {
  it("serves a better band (the request's priority, else its key's) first, then a quiet organization's request before another's flood", async () => {
    const endpoint = await getEndpoint(ctl, "tiny");
    const queue = new QueueBase(ctl).queueNamed(endpointQueueName(endpoint));
    const order: string[] = [];
    const answers: Promise<void>[] = [];
    const send = async (label: string, key: string, extra: Record<string, unknown> = {}) => {
      const queued = (await queue.getJobCounts("prioritized")).prioritized ?? 0;
      answers.push(
        fetch(`${gateway.url}/v1/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny", prompt: "Once upon a time", max_tokens: 16, temperature: 0, ...extra }),
        }).then(async (res) => {
          expect(res.status, await res.clone().text()).toBe(200);
          order.push(label);
        }),
      );
      // Queued (in its band) before the next is sent: the order of arrival is known.
      await expect.poll(async () => (await queue.getJobCounts("prioritized")).prioritized).toBe(queued + 1);
    };
    for (let i = 0; i < 6; i++) await send(`flood${i}`, keys.flood as string);
    await send("quiet", keys.quiet as string);
    await send("urgent", keys.flood as string, { priority: -1 });
    await send("vip", keys.vip as string);
    await send("vip-asks-less", keys.vip as string, { priority: 3 });
    worker = startWorker({
      ctl,
      endpoint,
      replicaId: "tiny-fair-1",
      loadEngine: () => loadLlamaCpp({ modelPath: modelPath as string, parallel: 1, threads: 1 }),
    });
    await worker.ready;
    await Promise.all(answers);
    // The better band first; then the quiet organization's one request at the band's head, where
    // first come first served would have put it behind the six of the flood. (flood0 found the
    // queue idle and took the head without a tag; flood1 was placed level with it.)
    // The key's default band (-2) goes first; a request's own priority overrides it (3: last).
    expect(order).toEqual([
      "vip",
      "urgent",
      "flood0",
      "flood1",
      "quiet",
      "flood2",
      "flood3",
      "flood4",
      "flood5",
      "vip-asks-less",
    ]);
  }, 120_000);
});
