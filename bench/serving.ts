/**
 * `npm run bench:serving`: the traces a team sends (src/benchmark/traces.ts: multi-turn chat,
 * agentic shared prefix, decode-heavy) on a model of realistic cost, made here (bench/models/
 * make-llama.py: a seeded random Llama, ~75M parameters, or BENCH_MODEL_SIZE=300m), against, in
 * the same run and interleaved round by round:
 *   - the platform: `platform up`, the checkpoint registered through the platform's converter,
 *     one replica of PARALLEL sequences and THREADS threads;
 *   - node-llama-cpp called directly on the same GGUF, sequences and threads (a free sequence as
 *     its API hands them out, the common prefix of its cache kept, as LlamaCompletion does);
 *   - llama-server built from the llama.cpp source node-llama-cpp bundles (bench/llama-server.ts),
 *     `--parallel PARALLEL -t THREADS`; skipped, saying so, where it cannot be built.
 * Per trace: wall time, TTFT p50/p95 per turn (first turns and later ones), inter-token latency,
 * output tokens/s and the cached share of prompt tokens; ratios of the platform to each peer per
 * round, their median and half-range. Writes bench/results/serving.json; docs/performance.md
 * ("Serving traces") has the latest figures and what they mean.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  getLlama,
  JinjaTemplateChatWrapper,
  type LlamaContextSequence,
  LlamaLogLevel,
  type Token,
} from "node-llama-cpp";
import {
  type ChatTurnMessage,
  httpChat,
  runTrace,
  type SendChat,
  TRACE_SHAPES,
  TRACES,
  type TraceName,
  type TraceResult,
  traceConversations,
  traceResult,
} from "../src/benchmark/traces.ts";
import { DeploymentConfig } from "../src/contracts/deployment.ts";
import { deployEndpoint } from "../src/endpoints/store.ts";
import { convertCheckpoint } from "../src/formats/convert/index.ts";
import { freePort } from "../src/process/free-port.ts";
import { connectControl } from "../src/redis/connection.ts";
import { importModel } from "../src/models/import.ts";
import { loadSettings } from "../src/settings/index.ts";
import { openStore } from "../src/storage/index.ts";
import { startStack } from "../test/helpers/stack.ts";
import { benchCache, llamaServer } from "./llama-server.ts";
import { median } from "./measure.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SIZE = process.env.BENCH_MODEL_SIZE ?? "75m";
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const PARALLEL = Number(process.env.BENCH_PARALLEL ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONTEXT = 4096;
/** BENCH_SMOKE=1: two short conversations per trace, to check the harness (figures mean nothing). */
const SHAPES = Object.fromEntries(
  TRACES.map((t) => [
    t,
    process.env.BENCH_SMOKE === "1"
      ? { ...TRACE_SHAPES[t], conversations: 2, turns: Math.min(2, TRACE_SHAPES[t].turns), maxTokens: 8 }
      : TRACE_SHAPES[t],
  ]),
) as typeof TRACE_SHAPES;
const only = process.env.BENCH_TRACES?.split(",") as TraceName[] | undefined;
const traces = TRACES.filter((t) => !only || only.includes(t));
const halfRange = (xs: number[]) => (xs.length === 0 ? 0 : (Math.max(...xs) - Math.min(...xs)) / 2);
const log = (line: string) => console.error(`[bench:serving] ${line}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------------ the model, made here

const modelDir = join(benchCache(), "models", `llama-${SIZE}-seed39`);
const gguf = `${modelDir}.gguf`;
if (!existsSync(join(modelDir, "config.json"))) {
  log(`making the ${SIZE} checkpoint in ${modelDir}`);
  const made = spawnSync(
    join(ROOT, ".venv-ref", "bin", "python"),
    [join(ROOT, "bench", "models", "make-llama.py"), SIZE, modelDir],
    {
      stdio: ["ignore", "inherit", "inherit"],
    },
  );
  if (made.status !== 0)
    throw new Error("bench/models/make-llama.py failed (is .venv-ref set up? scripts/reference/setup.sh)");
}
if (!existsSync(gguf)) await convertCheckpoint(modelDir, gguf);

// ------------------------------------------------------------------ the peers

type Peer = { name: string; send: SendChat; stop: () => Promise<void> };

async function platformPeer(): Promise<Peer> {
  const stack = await startStack();
  const settings = loadSettings(stack.env);
  const ctl = connectControl(stack.redisUrl, settings.prefix);
  // The checkpoint directory: registered and converted by the platform itself.
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(stack.dataDir, "tmp") },
    { name: "bench", framework: "llamacpp", source: modelDir },
  );
  await deployEndpoint(
    ctl,
    DeploymentConfig.parse({
      model: { name: "bench" },
      resources: { replicas: 1, parallel: PARALLEL, cpu: THREADS },
      runtime: { max_model_len: CONTEXT },
    }),
  );
  await stack.waitFor(
    async () => (await stack.admin<{ state: string }>("GET", "/admin/v1/endpoints/bench")).body.state === "available",
    "the bench endpoint to be available",
    300_000,
  );
  await ctl.redis.quit();
  return {
    name: "platform",
    send: httpChat({ baseUrl: stack.baseUrl, apiKey: stack.apiKey, model: "bench" }),
    stop: async () => void (await stack.stop()),
  };
}

async function llamaServerPeer(bin: string): Promise<Peer> {
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
  return {
    name: "llama-server",
    send: httpChat({ baseUrl, apiKey: "none", model: "bench" }),
    stop: async () => {
      child.kill("SIGTERM");
      if (child.exitCode === null) await new Promise((r) => child.once("exit", r));
    },
  };
}

/** node-llama-cpp as its API is used: the chat rendered by the GGUF's template, any free sequence. */
async function directPeer(): Promise<Peer> {
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

// ------------------------------------------------------------------ the rounds

const server = process.env.BENCH_LLAMA_SERVER === "0" ? { skipped: "BENCH_LLAMA_SERVER=0" } : await llamaServer(log);
const serverSkipped = typeof server === "string" ? undefined : server.skipped;
if (serverSkipped) log(`llama-server skipped: ${serverSkipped}`);
const makers: [string, () => Promise<Peer>][] = [
  ["platform", platformPeer],
  ["node-llama-cpp", directPeer],
  ...(typeof server === "string"
    ? [["llama-server", () => llamaServerPeer(server)] as [string, () => Promise<Peer>]]
    : []),
];
const loadAtStart = loadavg();
/** results[trace][peer][round] */
const results: Record<string, Record<string, TraceResult[]>> = {};
// All up at once (idle ones cost next to nothing), each trace run by each peer in turn, round by
// round, so a change in the machine's load lands on every peer's round alike.
const peers: Peer[] = [];
try {
  for (const [name, make] of makers) {
    log(`starting ${name}`);
    const peer = await make();
    peers.push(peer);
    // Warm-up: a short request, so the first measured one pays no lazy start.
    await peer.send([{ role: "user", content: "hello" }], 4);
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const trace of traces) {
      // Fresh texts per round (the seed): no peer finds a previous round's conversations cached.
      const conversations = traceConversations(trace, SHAPES[trace], 39 + round);
      for (const peer of peers) {
        const run = await runTrace(conversations, SHAPES[trace].concurrency, peer.send);
        const result = traceResult(trace, run);
        const byPeer = results[trace] ?? {};
        results[trace] = byPeer;
        byPeer[peer.name] = [...(byPeer[peer.name] ?? []), result];
        log(
          `${peer.name} round ${round + 1} ${trace}: wall ${result.wall_s.toFixed(1)} s, ${result.output_tokens_per_s} tok/s, TTFT first ${result.ttft_first_p50} later ${result.ttft_later_p50} ms, cached ${result.cached_share}${result.errors ? `, ${result.errors} errors: ${result.error_samples.join("; ")}` : ""}`,
        );
      }
    }
  }
} finally {
  for (const peer of peers) await peer.stop();
}

// ------------------------------------------------------------------ report

type Ratio = { ratio: number; spread: number; rounds: number[] } | null;
/** The platform's figure over the peer's, per round (peers ran one after the other, round i against round i). */
function ratio(trace: string, peer: string, pick: (r: TraceResult) => number | null): Ratio {
  const mine = results[trace]?.platform ?? [];
  const theirs = results[trace]?.[peer] ?? [];
  const rounds = mine.flatMap((m, i) => {
    const a = pick(m);
    const b = theirs[i] ? pick(theirs[i] as TraceResult) : null;
    return a !== null && b !== null && b > 0 ? [a / b] : [];
  });
  return rounds.length === 0
    ? null
    : { ratio: median(rounds), spread: halfRange(rounds), rounds: rounds.map((x) => Math.round(x * 1000) / 1000) };
}
const summary = Object.fromEntries(
  traces.map((trace) => {
    const peers = Object.fromEntries(
      Object.entries(results[trace] ?? {}).map(([peer, rounds]) => [
        peer,
        {
          wall_s: median(rounds.map((r) => r.wall_s)),
          output_tokens_per_s: median(rounds.map((r) => r.output_tokens_per_s)),
          ttft_first_p50: median(rounds.map((r) => r.ttft_first_p50 ?? 0)),
          ttft_later_p50: median(rounds.map((r) => r.ttft_later_p50 ?? 0)),
          ttft_later_p95: median(rounds.map((r) => r.ttft_later_p95 ?? 0)),
          itl_p50: median(rounds.map((r) => r.itl_ms?.p50 ?? 0)),
          itl_p95: median(rounds.map((r) => r.itl_p95_ms ?? 0)),
          cached_share: rounds[0]?.cached_share ?? null,
          errors: rounds.reduce((n, r) => n + r.errors, 0),
        },
      ]),
    );
    const against = (peer: string) => ({
      wall: ratio(trace, peer, (r) => r.wall_s),
      tokens_per_s: ratio(trace, peer, (r) => r.output_tokens_per_s),
      ttft_first_p50: ratio(trace, peer, (r) => r.ttft_first_p50),
      ttft_later_p50: ratio(trace, peer, (r) => r.ttft_later_p50),
    });
    return [trace, { peers, vs_llama_server: against("llama-server"), vs_node_llama_cpp: against("node-llama-cpp") }];
  }),
);
const report = {
  model: `llama-${SIZE} (seeded random, bench/models/make-llama.py)`,
  threads: THREADS,
  parallel: PARALLEL,
  rounds: ROUNDS,
  llama_server: serverSkipped
    ? { skipped: serverSkipped }
    : "built from node-llama-cpp's bundled llama.cpp (GGML_NATIVE)",
  load_average: { at_start: loadAtStart, at_end: loadavg() },
  traces: summary,
  results,
};
await mkdir(join(ROOT, "bench", "results"), { recursive: true });
await writeFile(join(ROOT, "bench", "results", "serving.json"), `${JSON.stringify(report, null, 2)}\n`);

const f = (x: number | null | undefined, d = 0) => (x === null || x === undefined ? "—" : x.toFixed(d));
const fr = (r: Ratio) => (r ? `${f(r.ratio, 2)} ±${f(r.spread, 2)} (${r.rounds.map((x) => f(x, 2)).join(", ")})` : "—");
console.log(
  `model llama-${SIZE}, ${THREADS} thread(s), ${PARALLEL} sequences, ${ROUNDS} rounds; load ${loadAtStart.map((l) => l.toFixed(1)).join(" ")} at start`,
);
if (serverSkipped) console.log(`llama-server: skipped (${serverSkipped})`);
for (const trace of traces) {
  const s = summary[trace] as (typeof summary)[string];
  console.log(`\n${trace}`);
  for (const [peer, p] of Object.entries(s.peers))
    console.log(
      `  ${peer.padEnd(15)} wall ${f(p.wall_s, 1)} s, ${f(p.output_tokens_per_s)} tok/s, TTFT first p50 ${f(p.ttft_first_p50)} ms, later p50/p95 ${f(p.ttft_later_p50)}/${f(p.ttft_later_p95)} ms, ITL p50/p95 ${f(p.itl_p50, 1)}/${f(p.itl_p95, 1)} ms, cached ${f(p.cached_share, 3)}${p.errors ? `, ${p.errors} errors` : ""}`,
    );
  for (const [label, a] of [
    ["llama-server", s.vs_llama_server],
    ["node-llama-cpp", s.vs_node_llama_cpp],
  ] as const)
    console.log(
      `  platform / ${label}: wall ${fr(a.wall)}, tok/s ${fr(a.tokens_per_s)}, TTFT first ${fr(a.ttft_first_p50)}, later ${fr(a.ttft_later_p50)}`,
    );
}
