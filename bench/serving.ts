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
 * And prefix-affine dispatch against dispatch by chance (BENCH_AFFINITY: 1 by default, 0 skips it,
 * "only" runs only it): two replicas of the platform on the multi-turn trace, with
 * PLATFORM_PREFIX_AFFINITY on and off, later turns' TTFT p95 per round (target ≤ 0.5).
 * Per trace: wall time, TTFT p50/p95 per turn (first turns and later ones), inter-token latency,
 * output tokens/s and the cached share of prompt tokens; ratios of the platform to each peer per
 * round, their median and half-range. Writes bench/results/serving.json (BENCH_RESULTS names
 * another file there); BENCH_ROUNDS (2), BENCH_TRACES (a comma list), BENCH_LLAMA_SERVER=0 and
 * BENCH_SMOKE=1 (tiny traces, to check the harness) make a run shorter. docs/performance.md
 * ("Serving traces") has the latest figures and what they mean.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  runTrace,
  TRACE_SHAPES,
  TRACES,
  type TraceName,
  type TraceResult,
  traceConversations,
  traceResult,
} from "../src/benchmark/traces.ts";
import { llamaServer } from "./llama-server.ts";
import { halfRange, median } from "./measure.ts";
import {
  directPeer,
  ensureModel,
  llamaServerPeer,
  PARALLEL,
  type Peer,
  platformPeer,
  SIZE,
  THREADS,
} from "./serving-peers.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const AFFINITY = process.env.BENCH_AFFINITY ?? "1";
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
const traces = AFFINITY === "only" ? [] : TRACES.filter((t) => !only || only.includes(t));
const log = (line: string) => console.error(`[bench:serving] ${line}`);

await ensureModel(log);

// ------------------------------------------------------------------ the rounds

const server =
  traces.length === 0
    ? { skipped: "no trace run (BENCH_AFFINITY=only)" }
    : process.env.BENCH_LLAMA_SERVER === "0"
      ? { skipped: "BENCH_LLAMA_SERVER=0" }
      : await llamaServer(log);
const serverSkipped = typeof server === "string" ? undefined : server.skipped;
if (serverSkipped) log(`llama-server skipped: ${serverSkipped}`);
const makers: [string, () => Promise<Peer>][] =
  traces.length === 0
    ? []
    : [
        ["platform", () => platformPeer()],
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

// ------------------------------------------------------------------ affinity: two replicas, on and off

/** Per round: the multi-turn trace on two replicas with prefix-affine dispatch, and with it off. */
const affinity: { affine: TraceResult; chance: TraceResult }[] = [];
if (AFFINITY !== "0") {
  const sides: Peer[] = [];
  try {
    log("starting two platforms of two replicas each: prefix affinity on, and off");
    const affine = await platformPeer({ name: "affine", replicas: 2 });
    sides.push(affine);
    const chance = await platformPeer({
      name: "by chance",
      replicas: 2,
      env: { PLATFORM_PREFIX_AFFINITY: "false" },
    });
    sides.push(chance);
    for (const side of sides) await side.send([{ role: "user", content: "hello" }], 4);
    for (let round = 0; round < ROUNDS; round++) {
      const conversations = traceConversations("multi-turn", SHAPES["multi-turn"], 139 + round);
      const got: Record<string, TraceResult> = {};
      // The order swapped every round, so a change in the machine's load lands on both alike.
      for (const side of round % 2 === 0 ? [affine, chance] : [chance, affine]) {
        const result = traceResult(
          "multi-turn",
          await runTrace(conversations, SHAPES["multi-turn"].concurrency, side.send),
        );
        got[side.name] = result;
        log(
          `${side.name} round ${round + 1}: TTFT later p50/p95 ${result.ttft_later_p50}/${result.ttft_later_p95} ms, first p50 ${result.ttft_first_p50} ms, cached ${result.cached_share}, wall ${result.wall_s.toFixed(1)} s${result.errors ? `, ${result.errors} errors` : ""}`,
        );
      }
      affinity.push({ affine: got.affine as TraceResult, chance: got["by chance"] as TraceResult });
    }
  } finally {
    for (const side of sides) await side.stop();
  }
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
const affinityRatio = (pick: (r: TraceResult) => number | null) => {
  const rounds = affinity.flatMap(({ affine, chance }) => {
    const [a, b] = [pick(affine), pick(chance)];
    return a !== null && b !== null && b > 0 ? [a / b] : [];
  });
  return rounds.length === 0
    ? null
    : { ratio: median(rounds), spread: halfRange(rounds), rounds: rounds.map((x) => Math.round(x * 1000) / 1000) };
};
const affinitySummary =
  affinity.length === 0
    ? null
    : {
        replicas: 2,
        ttft_later_p95: affinityRatio((r) => r.ttft_later_p95),
        ttft_later_p50: affinityRatio((r) => r.ttft_later_p50),
        wall: affinityRatio((r) => r.wall_s),
        affine: {
          ttft_later_p50: median(affinity.map((r) => r.affine.ttft_later_p50 ?? 0)),
          ttft_later_p95: median(affinity.map((r) => r.affine.ttft_later_p95 ?? 0)),
          cached_share: median(affinity.map((r) => r.affine.cached_share ?? 0)),
        },
        by_chance: {
          ttft_later_p50: median(affinity.map((r) => r.chance.ttft_later_p50 ?? 0)),
          ttft_later_p95: median(affinity.map((r) => r.chance.ttft_later_p95 ?? 0)),
          cached_share: median(affinity.map((r) => r.chance.cached_share ?? 0)),
        },
      };
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
  affinity: affinitySummary,
  results,
  affinity_results: affinity,
};
await mkdir(join(ROOT, "bench", "results"), { recursive: true });
await writeFile(
  join(ROOT, "bench", "results", process.env.BENCH_RESULTS ?? "serving.json"),
  `${JSON.stringify(report, null, 2)}\n`,
);

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
if (affinitySummary) {
  const a = affinitySummary;
  console.log("\nprefix-affine dispatch, 2 replicas, multi-turn trace (affinity on ÷ off)");
  console.log(
    `  affine     TTFT later p50/p95 ${f(a.affine.ttft_later_p50)}/${f(a.affine.ttft_later_p95)} ms, cached ${f(a.affine.cached_share, 3)}`,
  );
  console.log(
    `  by chance  TTFT later p50/p95 ${f(a.by_chance.ttft_later_p50)}/${f(a.by_chance.ttft_later_p95)} ms, cached ${f(a.by_chance.cached_share, 3)}`,
  );
  console.log(
    `  ratio: later p95 ${fr(a.ttft_later_p95)} (target ≤ 0.5), later p50 ${fr(a.ttft_later_p50)}, wall ${fr(a.wall)}`,
  );
}
