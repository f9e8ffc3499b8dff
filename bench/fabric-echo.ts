/**
 * bench:fabric, section 1: the fabric's own cost, on a worker process running a trivial engine
 * (bench/echo-worker.ts) behind a gateway and a private Redis. Latency and requests/s at c=1, 8
 * and 32 against the queue floor (bench/queue-floor.ts) and the HTTP floor, in interleaved rounds.
 * The stack it starts stays up for the Redis figures (fabric-redis.ts) until `close`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { startGateway } from "../src/gateway/server/app.ts";
import { createApiKey } from "../src/keys/store.ts";
import { connectControl } from "../src/redis/connection.ts";
import { startEmbeddedRedis } from "../src/redis/embedded.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { echoEngine } from "./echo-worker.ts";
import { median, pair, postJson, type Timed, timeEach } from "./measure.ts";
import { startQueueFloor } from "./queue-floor.ts";

/** bench/echo-worker.ts serving `endpoint` in a process of its own; resolves once it takes jobs. */
export async function startEchoWorker(
  endpoint: string,
  env: NodeJS.ProcessEnv,
  nodeFlags: readonly string[] = [],
): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    [...nodeFlags, fileURLToPath(new URL("./echo-worker.ts", import.meta.url)), endpoint],
    { env, stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
    child.once("exit", (code) => reject(new Error(`echo worker exited with ${code}`)));
  });
  return child;
}

export type EchoRound = {
  direct: Timed;
  floor1: Timed;
  queued1: Timed;
  echo1: Timed;
  echo8: Timed;
  floor32: Timed;
  queued32: Timed;
  echo32: Timed;
};
export type Overhead = {
  concurrency: number;
  p50_ms: number;
  p99_ms: number;
  added_p50_ms: number;
  added_p99_ms: number;
  requests_per_s: number;
};
export type EchoFabric = {
  redisUrl: string;
  prefix: string;
  /** One echo completion through the gateway. */
  echo: () => Promise<unknown>;
  close: () => Promise<void>;
};

/** The echo stack: a private Redis, the gateway in this process, the echo worker in its own. */
export async function startEchoFabric(modelPath: string): Promise<EchoFabric & { floorUrl: string }> {
  const dir = await mkdtemp(join(tmpdir(), "platform-bench-"));
  const redis = await startEmbeddedRedis(join(dir, "redis"));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dir }), redisUrl: redis.url };
  const ctl = connectControl(redis.url, settings.prefix);
  const key = (await createApiKey(ctl, "bench", "user")).key;
  const imports = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "tmp") };
  await importModel(imports, { name: "echo", framework: "llamacpp", source: modelPath });
  const echoEndpoint = await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "echo" } }));
  const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  // The worker in its own process, as deployed: its JS must not share the gateway's event loop.
  const echoWorker = await startEchoWorker(echoEndpoint.name, {
    ...process.env,
    REDIS_URL: redis.url,
    PLATFORM_PREFIX: settings.prefix,
  });
  // The floor any HTTP service pays here: the same client against a Hono route that answers at once.
  const floorApp = new Hono().post("/", async (c) => c.json({ echo: await c.req.json() }));
  const floorServer = serve({ fetch: floorApp.fetch, hostname: "127.0.0.1", port: 0 });
  await new Promise((r) => floorServer.once("listening", r));
  const floorUrl = `http://127.0.0.1:${(floorServer.address() as { port: number }).port}/`;
  const echo = () =>
    postJson<{ usage: { completion_tokens: number } }>(`${gateway.url}/v1/completions`, ECHO_REQUEST, {
      authorization: `Bearer ${key}`,
    });
  return {
    redisUrl: redis.url,
    prefix: settings.prefix,
    echo,
    floorUrl,
    close: async () => {
      echoWorker.kill("SIGTERM");
      await once(echoWorker, "exit");
      floorServer.close();
      await gateway.close();
      await ctl.redis.quit();
      await redis.stop();
    },
  };
}

const ECHO_REQUEST = { model: "echo", prompt: "hi", max_tokens: 1 };

/** The echo rounds against both floors; the queue floor is closed after them (before Redis is measured). */
export async function measureEcho(
  fabric: EchoFabric & { floorUrl: string },
  options: { rounds: number; requests: number },
): Promise<{ echoRounds: EchoRound[]; overhead: Overhead[]; directP50: number; directP99: number }> {
  const { rounds: ROUNDS, requests: REQUESTS } = options;
  // The least a hand-off to a second process through Redis and back costs, the same client in front.
  const queueFloor = await startQueueFloor(fabric.redisUrl, fabric.prefix);
  const echo = fabric.echo;
  const floor = () => postJson(fabric.floorUrl, ECHO_REQUEST);
  const queued = () => postJson(queueFloor.url, ECHO_REQUEST);
  const direct = () => echoEngine.generate({ kind: "prompt", prompt: "hi", params: {} }, {});
  await timeEach(100, 1, echo); // warm connections and caches
  await timeEach(100, 1, floor);
  await timeEach(200, 32, echo);
  await timeEach(200, 32, floor);
  await timeEach(100, 1, queued);
  await timeEach(200, 32, queued);

  const echoRounds: EchoRound[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const d = await timeEach(REQUESTS, 1, direct);
    const [floor1, echo1] = await pair(
      round,
      () => timeEach(REQUESTS, 1, floor),
      () => timeEach(REQUESTS, 1, echo),
    );
    const queued1 = await timeEach(REQUESTS, 1, queued);
    const echo8 = await timeEach(REQUESTS * 2, 8, echo);
    const [floor32, echo32] = await pair(
      round,
      () => timeEach(REQUESTS * 4, 32, floor),
      () => timeEach(REQUESTS * 4, 32, echo),
    );
    const queued32 = await timeEach(REQUESTS * 4, 32, queued);
    echoRounds.push({ direct: d, floor1, queued1, echo1, echo8, floor32, queued32, echo32 });
  }
  await queueFloor.close(); // before the command count and the memory snapshots (fabric-redis.ts)
  const directP50 = median(echoRounds.map((r) => r.direct.p50));
  const directP99 = median(echoRounds.map((r) => r.direct.p99));
  const overhead = (
    [
      [1, "echo1"],
      [8, "echo8"],
      [32, "echo32"],
    ] as const
  ).map(([concurrency, k]) => {
    const p50 = median(echoRounds.map((r) => r[k].p50));
    const p99 = median(echoRounds.map((r) => r[k].p99));
    return {
      concurrency,
      p50_ms: p50,
      p99_ms: p99,
      added_p50_ms: p50 - directP50,
      added_p99_ms: p99 - directP99,
      requests_per_s: median(echoRounds.map((r) => r[k].perSecond)),
    };
  });
  return { echoRounds, overhead, directP50, directP99 };
}
