/**
 * The serving benchmarks' model and peers (bench/serving.ts): a seeded random Llama of realistic
 * cost made here (bench/models/make-llama.py, BENCH_MODEL_SIZE) and registered through the
 * platform's converter; the platform under `platform up` (any number of replicas, affinity on or
 * off through its environment); node-llama-cpp called directly; llama-server built from the same
 * llama.cpp source. Each peer answers a trace's chat turns (src/benchmark/traces.ts, SendChat).
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  getLlama,
  JinjaTemplateChatWrapper,
  type LlamaContextSequence,
  LlamaLogLevel,
  type Token,
} from "node-llama-cpp";
import { type ChatTurnMessage, httpChat, type SendChat } from "../src/benchmark/traces.ts";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { convertCheckpoint } from "../src/formats/convert/index.ts";
import { freePort } from "../src/process/free-port.ts";
import { connectControl } from "../src/redis/connection.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { startStack } from "../test/helpers/stack.ts";
import { benchCache } from "./llama-server.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
export const SIZE = process.env.BENCH_MODEL_SIZE ?? "75m";
export const THREADS = Number(process.env.BENCH_THREADS ?? 1);
export const PARALLEL = Number(process.env.BENCH_PARALLEL ?? 4);
export const CONTEXT = 4096;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const modelDir = join(benchCache(), "models", `llama-${SIZE}-seed39`);
const gguf = `${modelDir}.gguf`;

/** The checkpoint and its GGUF, made on first use (never committed). */
export async function ensureModel(log: (line: string) => void): Promise<void> {
  if (!existsSync(join(modelDir, "config.json"))) {
    log(`making the ${SIZE} checkpoint in ${modelDir}`);
    const made = spawnSync(
      join(ROOT, ".venv-ref", "bin", "python"),
      [join(ROOT, "bench", "models", "make-llama.py"), SIZE, modelDir],
      { stdio: ["ignore", "inherit", "inherit"] },
    );
    if (made.status !== 0)
      throw new Error("bench/models/make-llama.py failed (is .venv-ref set up? scripts/reference/setup.sh)");
  }
  if (!existsSync(gguf)) await convertCheckpoint(modelDir, gguf);
}

export type Peer = { name: string; send: SendChat; stop: () => Promise<void> };

/**
 * `platform up` with the checkpoint registered and converted by the platform itself, `replicas`
 * replicas of PARALLEL sequences and THREADS threads; `env` reaches every role (PLATFORM_PREFIX_AFFINITY).
 */
export async function platformPeer(
  options: { name?: string; replicas?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<Peer> {
  const stack = await startStack({ env: options.env });
  const settings = loadSettings(stack.env);
  const ctl = connectControl(stack.redisUrl, settings.prefix);
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
    { name: "bench", framework: "llamacpp", source: modelDir },
  );
  const replicas = options.replicas ?? 1;
  await deployEndpoint(
    ctl,
    DeploymentConfig.parse({
      model: { name: "bench" },
      resources: { replicas, parallel: PARALLEL, cpu: THREADS },
      runtime: { max_model_len: CONTEXT },
    }),
  );
  await stack.waitFor(
    async () => {
      const { body } = await stack.admin<{ state: string; replicas?: { ready: number } }>(
        "GET",
        "/admin/v1/endpoints/bench",
      );
      return body.state === "available" && (body.replicas?.ready ?? 0) >= replicas;
    },
    `the bench endpoint to be available with ${replicas} replica(s)`,
    300_000,
  );
  await ctl.redis.quit();
  return {
    name: options.name ?? "platform",
    send: httpChat({ baseUrl: stack.baseUrl, apiKey: stack.apiKey, model: "bench" }),
    stop: async () => void (await stack.stop()),
  };
}

export async function llamaServerPeer(bin: string): Promise<Peer> {
  const port = await freePort();
  const child = spawn(
    bin,
    [
      ...["-m", gguf, "--host", "127.0.0.1", "--port", String(port)],
      ...["--parallel", String(PARALLEL), "-t", String(THREADS), "-tb", String(THREADS)],
      ...["-c", String(CONTEXT * PARALLEL), "--jinja"],
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const baseUrl = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  while ((await fetch(`${baseUrl}/health`).catch(() => undefined))?.status !== 200) {
    if (child.exitCode !== null || Date.now() - t0 > 120_000) throw new Error(`llama-server did not start:\n${err}`);
    await sleep(100);
  }
  const chat = httpChat({ baseUrl, apiKey: "none", model: "bench" });
  return {
    name: "llama-server",
    // llama-server (cpp-httplib) closes a kept-alive connection after a stream, and the client's
    // agent may reuse it before it sees the close: that request is reset before it is read. Sent
    // again, as HTTP clients do for a reused socket's reset; the platform's gateway keeps its
    // connections, so the platform's peer never needs it.
    send: async (messages, maxTokens) => {
      const first = await chat(messages, maxTokens);
      return !first.ok && first.output_tokens === 0 && /ECONNRESET|socket hang up/.test(String(first.error))
        ? chat(messages, maxTokens)
        : first;
    },
    stop: async () => {
      child.kill("SIGTERM");
      if (child.exitCode === null) await new Promise((r) => child.once("exit", r));
    },
  };
}

/** node-llama-cpp as its API is used: the chat rendered by the GGUF's template, any free sequence. */
export async function directPeer(): Promise<Peer> {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: gguf });
  // contextSize is per sequence in node-llama-cpp (llama-server's -c is the whole context).
  const context = await model.createContext({ sequences: PARALLEL, contextSize: CONTEXT, threads: THREADS });
  const free: LlamaContextSequence[] = Array.from({ length: PARALLEL }, () => context.getSequence());
  const template = new JinjaTemplateChatWrapper({ template: String(model.fileInfo.metadata.tokenizer?.chat_template) });
  const render = (messages: ChatTurnMessage[]) =>
    template
      .generateContextState({
        chatHistory: [
          ...messages.map((m) =>
            m.role === "assistant"
              ? { type: "model" as const, response: [m.content] }
              : { type: m.role, text: m.content },
          ),
          { type: "model", response: [] },
        ],
      })
      .contextText.tokenize(model.tokenizer);
  const send: SendChat = async (messages, maxTokens) => {
    const started = performance.now();
    const sequence = free.pop() as LlamaContextSequence;
    try {
      const prompt = render(messages) as Token[];
      await sequence.adaptStateToTokens(prompt.slice(0, -1), false);
      const cached = sequence.nextTokenIndex;
      const times: number[] = [];
      const tokens: Token[] = [];
      for await (const token of sequence.evaluate(prompt.slice(cached), { temperature: 0 })) {
        times.push(performance.now());
        tokens.push(token);
        if (tokens.length >= maxTokens) break;
      }
      return {
        ok: true,
        ttft_ms: (times[0] ?? started) - started,
        itl_ms: times.slice(1).map((t, i) => t - (times[i] as number)),
        e2e_ms: performance.now() - started,
        output_tokens: tokens.length,
        prompt_tokens: prompt.length,
        cached_tokens: cached,
        text: model.detokenize(tokens),
      };
    } finally {
      free.push(sequence);
    }
  };
  return {
    name: "node-llama-cpp",
    send,
    stop: async () => {
      await context.dispose();
      await model.dispose();
    },
  };
}
