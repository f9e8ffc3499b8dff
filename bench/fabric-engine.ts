/**
 * bench:fabric, section 2: a real engine (stories260K, else the tests' tiny model) under
 * `platform up`, 1 thread and 4 sequences. 1-token chat latency against the queue floor plus the
 * engine paced, and against an echo replica under the same `up` (the worker's engine path);
 * streamed tokens/s against node-llama-cpp called directly with the same model, threads and
 * sequences; reply entries per streamed token. The stack stays up for fabric-process.ts.
 */
import { once } from "node:events";
import { join } from "node:path";
import { getLlama, LlamaCompletion, type LlamaContextSequence, LlamaLogLevel } from "node-llama-cpp";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { WORKER_NODE_FLAGS, withWorkerAllocator } from "../src/process/worker-env.ts";
import { connectControl } from "../src/redis/connection.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { type OwnStack, startStack } from "../test/helpers/stack.ts";
import { startEchoWorker } from "./fabric-echo.ts";
import { halfRange, median, pair, postJson, postText, summarize, type Timed, timeEach, timeOne } from "./measure.ts";

export const THREADS = 1;
export const PARALLEL = 4;
const TOKENS = 400;
/** Samples per side per round for tokens/s: one generation lasts a fifth of a second with stories260K, too short to be stable alone. */
const REPEATS = 4;

export type EngineRound = {
  chat: Timed;
  echo: Timed;
  direct: Timed;
  paced: Timed;
  rates: Record<number, { direct: number; platform: number }>;
};
export type Throughput = {
  streams: number;
  direct_tokens_per_s: number;
  platform_tokens_per_s: number;
  ratio: number;
  ratio_spread: number;
  ratios: number[];
};
export type ModelStack = {
  stack: OwnStack;
  ctl: ReturnType<typeof connectControl>;
  settings: ReturnType<typeof loadSettings>;
  endpoint: string;
  modelPath: string;
};

/** `platform up` serving the model: one replica of PARALLEL sequences and THREADS threads. */
export async function startModelStack(modelPath: string): Promise<ModelStack> {
  const stack = await startStack();
  const stackSettings = loadSettings(stack.env);
  const stackCtl = connectControl(stack.redisUrl, stackSettings.prefix);
  await importModel(
    { ctl: stackCtl, artifacts: openStore(stackSettings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
    { name: "model", framework: "llamacpp", source: modelPath },
  );
  const modelEndpoint = await deployEndpoint(
    stackCtl,
    DeploymentConfig.parse({ model: { name: "model" }, resources: { replicas: 1, parallel: PARALLEL, cpu: THREADS } }),
  );
  await stack.waitFor(
    async () =>
      (await stack.admin<{ state: string }>("GET", `/admin/v1/endpoints/${modelEndpoint.name}`)).body.state ===
      "available",
    "the model endpoint to be available",
    120_000,
  );
  return { stack, ctl: stackCtl, settings: stackSettings, endpoint: modelEndpoint.name, modelPath };
}

export async function measureEngine(
  ms: ModelStack,
  options: { rounds: number; oneTokenRequests: number },
): Promise<{ realRounds: EngineRound[]; throughput: Throughput[]; replyEntriesPerToken: number }> {
  const { stack, ctl: stackCtl, settings: stackSettings, modelPath } = ms;
  const { rounds: ROUNDS, oneTokenRequests: ONE_TOKEN_REQUESTS } = options;
  const auth = { authorization: `Bearer ${stack.apiKey}` };
  // An echo replica under the same `up`, started as `up` starts workers (its Node flags and
  // allocator): a 1-token chat to the model less one to it is the worker's engine path alone.
  // Deployed with no replicas of `up`'s own, so `up` leaves it to the bench's process.
  await importModel(
    { ctl: stackCtl, artifacts: openStore(stackSettings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
    { name: "echo", framework: "llamacpp", source: modelPath },
  );
  const stackEchoEndpoint = await deployEndpoint(
    stackCtl,
    DeploymentConfig.parse({ model: { name: "echo" }, resources: { replicas: 0, parallel: PARALLEL } }),
  );
  const stackEchoWorker = await startEchoWorker(
    stackEchoEndpoint.name,
    withWorkerAllocator({ ...stack.env, REDIS_URL: stack.redisUrl, PLATFORM_PREFIX: stackSettings.prefix }),
    WORKER_NODE_FLAGS,
  );
  const prompts = ["Once upon a time", "The little dog", "One day, a girl", "There was a big tree"];

  // node-llama-cpp directly, set up as the worker sets itself up: one context, PARALLEL sequences
  // kept for the whole run and reused (so both sides may reuse a cached prompt prefix alike).
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({
    sequences: PARALLEL,
    threads: THREADS,
    contextSize: Math.min(model.trainContextSize, 4096),
  });
  const sequences: LlamaContextSequence[] = Array.from({ length: PARALLEL }, () => context.getSequence());
  async function directGenerate(i: number, prompt: string, maxTokens: number): Promise<number> {
    const completion = new LlamaCompletion({ contextSequence: sequences[i] as LlamaContextSequence });
    let tokens = 0;
    try {
      await completion.generateCompletion(prompt, {
        maxTokens,
        temperature: 0,
        repeatPenalty: false,
        onToken: (t) => (tokens += t.length),
      });
    } finally {
      completion.dispose();
    }
    return tokens;
  }
  const chatOne = () =>
    postJson(
      `${stack.baseUrl}/v1/chat/completions`,
      { model: "model", messages: [{ role: "user", content: prompts[0] }], max_tokens: 1, temperature: 0 },
      auth,
    );
  const echoChatOne = () =>
    postJson(
      `${stack.baseUrl}/v1/chat/completions`,
      { model: "echo", messages: [{ role: "user", content: prompts[0] }], max_tokens: 1, temperature: 0 },
      auth,
    );
  const directOne = () => directGenerate(0, prompts[0] as string, 1);
  await stack.waitFor(async () => Boolean(await echoChatOne()), "the echo replica under `up` to answer", 30_000);

  /**
   * 1-token chats to the model and to the echo replica, alternating (the order swapped every
   * request), each pair followed by one direct engine call ("paced"): that call then runs, as the
   * worker's engine does, after the client, the gateway, Redis and the other processes have run on
   * the same two cores, with what that leaves of its code and data in the caches
   * (docs/performance.md, "1-token chat: the worker's engine path").
   */
  async function oneTokenSeries(round: number): Promise<{ chat: Timed; echo: Timed; paced: Timed }> {
    const latencies = { chat: [] as number[], echo: [] as number[], paced: [] as number[] };
    const start = performance.now();
    for (let i = 0; i < ONE_TOKEN_REQUESTS; i++) {
      if ((round + i) % 2 === 0) {
        latencies.chat.push(await timeOne(chatOne));
        latencies.echo.push(await timeOne(echoChatOne));
      } else {
        latencies.echo.push(await timeOne(echoChatOne));
        latencies.chat.push(await timeOne(chatOne));
      }
      latencies.paced.push(await timeOne(directOne));
    }
    const elapsed = performance.now() - start;
    return {
      chat: summarize(latencies.chat, elapsed),
      echo: summarize(latencies.echo, elapsed),
      paced: summarize(latencies.paced, elapsed),
    };
  }

  /** Tokens and milliseconds of `streams` concurrent streams, each generating one completion. */
  async function sample(
    streams: number,
    k: number,
    generate: (i: number, prompt: string) => Promise<number>,
  ): Promise<{ tokens: number; ms: number }> {
    const t0 = performance.now();
    const counts = await Promise.all(
      Array.from({ length: streams }, (_, i) => generate(i, prompts[(i + k) % prompts.length] as string)),
    );
    return { tokens: counts.reduce((a, b) => a + b, 0), ms: performance.now() - t0 };
  }
  /**
   * Tokens/s of both sides, from REPEATS samples each taken in alternation (ABAB…), so a burst of
   * load from elsewhere on the machine falls on both sides rather than on one.
   */
  async function rates(round: number, streams: number): Promise<{ direct: number; platform: number }> {
    const sum = { direct: { tokens: 0, ms: 0 }, platform: { tokens: 0, ms: 0 } };
    for (let k = 0; k < REPEATS; k++) {
      const [p, d] = await pair(
        round + k,
        () => sample(streams, k, platformGenerate),
        () => sample(streams, k, directGenerateTokens),
      );
      for (const [side, x] of [
        ["platform", p],
        ["direct", d],
      ] as const) {
        sum[side].tokens += x.tokens;
        sum[side].ms += x.ms;
      }
    }
    return {
      direct: (sum.direct.tokens / sum.direct.ms) * 1000,
      platform: (sum.platform.tokens / sum.platform.ms) * 1000,
    };
  }
  const directGenerateTokens = (i: number, prompt: string) => directGenerate(i, prompt, TOKENS);
  /** Streamed, as a chat UI reads it: the count from the usage chunk the stream ends with. */
  async function platformGenerate(_i: number, prompt: string): Promise<number> {
    const events = await postText(
      `${stack.baseUrl}/v1/completions`,
      {
        model: "model",
        prompt,
        max_tokens: TOKENS,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      },
      auth,
    );
    const last = events.slice(0, events.lastIndexOf("data: [DONE]")).trimEnd();
    const usage = JSON.parse(last.slice(last.lastIndexOf("data: ") + 6)) as { usage: { completion_tokens: number } };
    return usage.usage.completion_tokens;
  }

  // Warm both sides alike.
  await timeEach(20, 1, chatOne);
  await timeEach(20, 1, echoChatOne);
  await timeEach(20, 1, directOne);
  for (const streams of [1, 4]) {
    await sample(streams, 0, directGenerateTokens);
    await sample(streams, 0, platformGenerate);
  }
  const realRounds: {
    chat: Timed;
    echo: Timed;
    direct: Timed;
    paced: Timed;
    rates: Record<number, { direct: number; platform: number }>;
  }[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const [{ chat, echo: echoChat, paced }, d] = await pair(
      round,
      () => oneTokenSeries(round),
      () => timeEach(ONE_TOKEN_REQUESTS, 1, directOne),
    );
    const byStreams: Record<number, { direct: number; platform: number }> = {};
    for (const streams of [1, 4]) byStreams[streams] = await rates(round, streams);
    realRounds.push({ chat, echo: echoChat, direct: d, paced, rates: byStreams });
  }
  stackEchoWorker.kill("SIGTERM");
  await once(stackEchoWorker, "exit");
  // Reply entries one streamed generation costs (src/queue/replies.ts gathers a stream's tokens):
  // what every token would otherwise cost the worker, Redis, the gateway and the client.
  const replyStreams = (await stackCtl.redis.keys(`${stackSettings.prefix}:cp:replies:*`)) as string[];
  const entriesAddedTo = async (k: string) => {
    const info = (await stackCtl.redis.call("XINFO", "STREAM", k)) as unknown[];
    return Number(info[info.indexOf("entries-added") + 1]);
  };
  const allReplyEntries = async () =>
    (await Promise.all(replyStreams.map((k) => entriesAddedTo(k).catch(() => 0)))).reduce((a, b) => a + b, 0);
  const entriesBefore = await allReplyEntries();
  const streamedTokens = await platformGenerate(0, prompts[0] as string);
  const replyEntriesPerToken = ((await allReplyEntries()) - entriesBefore) / streamedTokens;
  const throughput = [1, 4].map((streams) => {
    const ratios = realRounds.map(
      (r) => (r.rates[streams] as { platform: number }).platform / (r.rates[streams] as { direct: number }).direct,
    );
    return {
      streams,
      direct_tokens_per_s: median(realRounds.map((r) => (r.rates[streams] as { direct: number }).direct)),
      platform_tokens_per_s: median(realRounds.map((r) => (r.rates[streams] as { platform: number }).platform)),
      ratio: median(ratios),
      ratio_spread: halfRange(ratios),
      ratios,
    };
  });
  await context.dispose();
  await model.dispose();
  return { realRounds, throughput, replyEntriesPerToken };
}
