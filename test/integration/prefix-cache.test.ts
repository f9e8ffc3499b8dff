/**
 * Prefix-aware sequences on llama.cpp (issue 39): a request takes the free sequence whose KV cache
 * holds the longest part of its prompt (the least recently used where none holds more than half of
 * it), evaluates only the rest, and says how much it found there as OpenAI's
 * `usage.prompt_tokens_details.cached_tokens`: on the engine (stories260K, with and without a draft
 * model), and through a real gateway and worker on chat and completions, streamed and not, in the
 * key's usage records and in `platform_prompt_tokens_cached_total`.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Usage } from "../../src/contracts/job.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import type { Engine } from "../../workers/engines/engine.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { moved, scrape } from "../helpers/metrics-text.ts";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const shared = sharedModelPath();
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
/** Token ids (stories260K has 512), evaluated as given: no BOS token, so each count is exact. */
const A = range(100, 60);
const B = range(300, 60);
const C = range(20, 60);

const cachedOf = (u: Usage) => u.prompt_tokens_details?.cached_tokens;

async function complete(engine: Engine, prompt: number[]) {
  return engine.generate({ kind: "prompt", prompt, params: { max_tokens: 4, temperature: 0 } }, {});
}

describe.skipIf(shared === undefined)("the engine's choice of sequence (stories260K, 2 sequences)", () => {
  const engines: Engine[] = [];
  const load = async (draft: boolean) => {
    const modelPath = shared as string;
    const engine = await loadLlamaCpp({
      modelPath,
      parallel: 2,
      threads: 1,
      ...(draft ? { draft: { modelPath, tokens: 3 } } : {}),
    });
    engines.push(engine);
    return engine;
  };
  afterAll(async () => {
    for (const e of engines) await e.dispose();
  });

  /**
   * One conversation, then another, then each one's next turn: each turn lands on its own
   * conversation's sequence (taking the last one given back, as `free.pop()` did, puts A's turn on
   * B's cache: 0 cached). A third conversation takes the least recently used sequence, so B's cache
   * survives it.
   */
  const conversations = async (engine: Engine) => {
    const a1 = await complete(engine, A);
    const b1 = await complete(engine, B);
    const a2 = await complete(engine, [...A.slice(0, 51), ...range(400, 10)]);
    const b2 = await complete(engine, [...B.slice(0, 41), ...range(420, 20)]);
    const c1 = await complete(engine, C);
    const b3 = await complete(engine, [...B.slice(0, 45), ...range(440, 16)]);
    const a3 = await complete(engine, [...A.slice(0, 51), ...range(460, 10)]);
    return { a1, b1, a2, b2, c1, b3, a3 };
  };

  it("puts each turn on its conversation's sequence and evaluates only the rest; a new one takes the least recently used", async () => {
    const { a1, b1, a2, b2, c1, b3, a3 } = await conversations(await load(false));
    expect([a1, b1, c1].map((o) => cachedOf(o.usage))).toEqual([0, 0, 0]);
    expect(cachedOf(a2.usage)).toBe(51);
    expect(cachedOf(b2.usage)).toBe(41);
    // C went where A was (used longer ago than B): B's cache is whole, A's gone.
    expect(cachedOf(b3.usage)).toBe(41);
    expect(cachedOf(a3.usage)).toBe(0);
    expect(a2.usage.prompt_tokens).toBe(61);
  });

  it("with speculative decoding: the same sequences chosen, the same cached counts, the same answers", async () => {
    const plain = await conversations(await load(false));
    const drafted = await conversations(await load(true));
    for (const turn of Object.keys(plain) as (keyof typeof plain)[]) {
      expect(drafted[turn].text, turn).toBe(plain[turn].text);
      expect(drafted[turn].usage, turn).toEqual(plain[turn].usage);
    }
    expect([drafted.a2, drafted.b2, drafted.b3].map((o) => cachedOf(o.usage))).toEqual([51, 41, 41]);
    const engine = engines[engines.length - 1] as Engine;
    expect(engine.speculation?.()?.validated).toBeGreaterThan(0);
  });

  it("a repeated text prompt finds all but its last token cached (that one is evaluated for the first new token)", async () => {
    const engine = await load(false);
    const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    const ask = () =>
      engine.generate({ kind: "prompt", prompt, params: { max_tokens: 3, temperature: 0 } }, { onText: () => {} });
    const first = await ask();
    const again = await ask();
    expect(cachedOf(first.usage)).toBe(0);
    expect(cachedOf(again.usage)).toBe(again.usage.prompt_tokens - 1);
    expect(again.text).toBe(first.text);
  });
});

describe("cached tokens through the gateway (tiny model, one replica of 2 sequences)", () => {
  let redis: PrivateRedis;
  let ctl: Control;
  let gateway: RunningGateway;
  let worker: RunningWorker;
  let key: string;
  let keyId: string;
  let dataDir: string;

  beforeAll(async () => {
    redis = await privateRedis();
    dataDir = await mkdtemp(join(tmpdir(), "platform-prefix-"));
    const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url };
    ctl = connectControl(redis.url, settings.prefix);
    const created = await createApiKey(ctl, "admin", "admin");
    key = created.key;
    keyId = created.record.id;
    const modelPath = await tinyModelPath();
    await importModel(
      { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
      { name: "tiny", framework: "llamacpp", source: modelPath },
    );
    await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny" }, resources: { parallel: 2 } }));
    worker = startWorker({
      ctl,
      endpoint: await getEndpoint(ctl, "tiny"),
      replicaId: "tiny-prefix-1",
      loadEngine: () => loadLlamaCpp({ modelPath, parallel: 2, threads: 1 }),
    });
    await worker.ready;
    gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  }, 120_000);

  afterAll(async () => {
    await gateway?.close();
    await worker?.drain({ deadlineMs: 0 });
    await ctl?.redis.quit();
    await redis?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const post = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const usageOf = async (res: Response): Promise<Usage> => {
    expect(res.status, await res.clone().text()).toBe(200);
    return ((await res.json()) as { usage: Usage }).usage;
  };
  /** A stream's usage chunk (stream_options.include_usage), the one before [DONE]. */
  const streamedUsage = async (res: Response): Promise<Usage> => {
    expect(res.status).toBe(200);
    const events = (await res.text())
      .split("\n\n")
      .map((e) => e.replace(/^data: /, ""))
      .filter((e) => e.startsWith("{"))
      .map((e) => JSON.parse(e) as { usage?: Usage | null });
    const withUsage = events.filter((e) => e.usage);
    expect(withUsage).toHaveLength(1);
    return withUsage[0]?.usage as Usage;
  };

  it("chat and completions, streamed and not, report the cached share; usage records and the metric add it up", async () => {
    const before = await scrape(gateway.metricsUrl);
    const prompt = "Once upon a time there was a little dog who liked to run in the park with his friends.";
    const completion = { model: "tiny", prompt, max_tokens: 4, temperature: 0 };
    const c1 = await usageOf(await post("/v1/completions", completion));
    const c2 = await usageOf(await post("/v1/completions", completion));
    const s2 = await streamedUsage(
      await post("/v1/completions", { ...completion, stream: true, stream_options: { include_usage: true } }),
    );
    const chat = {
      model: "tiny",
      messages: [{ role: "user", content: "The cat sat on the mat and looked at the birds outside the window." }],
      max_tokens: 4,
      temperature: 0,
    };
    // A new conversation (only its BOS token in common with the completions' cache): the other sequence.
    const h1 = await streamedUsage(
      await post("/v1/chat/completions", { ...chat, stream: true, stream_options: { include_usage: true } }),
    );
    const h2 = await usageOf(await post("/v1/chat/completions", chat));
    const h3 = await streamedUsage(
      await post("/v1/chat/completions", { ...chat, stream: true, stream_options: { include_usage: true } }),
    );
    // The completions' cache stayed on its sequence through the chats.
    const c3 = await usageOf(await post("/v1/completions", completion));

    expect(cachedOf(c1)).toBe(0);
    // The warm-up's sequence (the least recently used): its BOS token is the chat's first too.
    expect(cachedOf(h1)).toBe(1);
    for (const u of [c2, s2, c3]) expect(cachedOf(u)).toBe(c1.prompt_tokens - 1);
    for (const u of [h2, h3]) expect(cachedOf(u)).toBe(h1.prompt_tokens - 1);
    const all = [c1, c2, s2, h1, h2, h3, c3];
    const cached = all.reduce((n, u) => n + (cachedOf(u) ?? 0), 0);

    const after = await scrape(gateway.metricsUrl);
    const labels = { model_name: "tiny", version: "v1", source: "online" };
    expect(moved(before, after, "platform_prompt_tokens_cached_total", labels)).toBe(cached);
    expect(moved(before, after, "vllm:prompt_tokens_total", labels)).toBe(all.reduce((n, u) => n + u.prompt_tokens, 0));
    const report = await fetch(`${gateway.url}/v1/usage?since=1h&key=${keyId}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(report.status).toBe(200);
    const rows = ((await report.json()) as { data: { cached_tokens: number; prompt_tokens: number }[] }).data;
    expect(rows.reduce((n, r) => n + r.cached_tokens, 0)).toBe(cached);
  });
});
