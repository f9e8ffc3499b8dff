/**
 * bench:fabric's report: the figures, each against its baseline and target, written to
 * bench/results/fabric.json and printed as the table docs/performance.md shows.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import type { EchoRound, Overhead } from "./fabric-echo.ts";
import type { EngineRound, Throughput } from "./fabric-engine.ts";
import type { CliRound, Rss } from "./fabric-process.ts";
import type { RedisFigures } from "./fabric-redis.ts";
import { halfRange, median } from "./measure.ts";

/**
 * The target proposed for the worker's engine path against the engine paced as the platform
 * runs it, beside the one against the engine called back to back (docs/performance.md,
 * "1-token chat: the worker's engine path").
 */
const PACED_TARGET = 1.5;
const PACED_TARGET_TEXT = "≤ 1.5× (proposed)";

export type FabricMeasurements = {
  modelPath: string;
  threads: number;
  parallel: number;
  rounds: number;
  loadAtStart: number[];
  echoRounds: EchoRound[];
  overhead: Overhead[];
  directP50: number;
  directP99: number;
  redisFigures: RedisFigures;
  realRounds: EngineRound[];
  throughput: Throughput[];
  replyEntriesPerToken: number;
  cliRounds: CliRound[];
  rss: Rss;
};

export async function report(m: FabricMeasurements): Promise<void> {
  const { modelPath, threads: THREADS, parallel: PARALLEL, rounds: ROUNDS, loadAtStart } = m;
  const { echoRounds, overhead, directP50, directP99, redisFigures, realRounds, throughput } = m;
  const { replyEntriesPerToken, cliRounds, rss } = m;

  type Figure = {
    figure: string;
    measured: number;
    baseline: number | null;
    unit: string;
    ratio: number | null;
    spread?: number;
    target: string;
    met: boolean;
  };
  const perRound = <T>(rounds: T[], m: (r: T) => number, b: (r: T) => number) => median(rounds.map((r) => m(r) / b(r)));
  // Not targets: where the queue floor sits between the HTTP floor and the platform; the echo
  // figures against the queue floor are the table's.
  const queueFloorFigures = {
    c1_p50_ms: median(echoRounds.map((r) => r.queued1.p50)),
    c32_requests_per_s: median(echoRounds.map((r) => r.queued32.perSecond)),
    c1_p50_vs_http_floor: perRound(
      echoRounds,
      (r) => r.queued1.p50,
      (r) => r.floor1.p50,
    ),
    c32_requests_per_s_vs_http_floor: perRound(
      echoRounds,
      (r) => r.queued32.perSecond,
      (r) => r.floor32.perSecond,
    ),
    echo_c1_p50_vs_queue_floor: perRound(
      echoRounds,
      (r) => r.echo1.p50,
      (r) => r.queued1.p50,
    ),
    echo_c32_requests_per_s_vs_queue_floor: perRound(
      echoRounds,
      (r) => r.echo32.perSecond,
      (r) => r.queued32.perSecond,
    ),
  };
  /**
   * The 1-token chat against what no design with a queue between two processes can save: the
   * queue floor (section 1, the same round) plus the engine paced as a worker runs it. Per round,
   * so the spread across rounds can be given.
   */
  const oneTokenBase = (r: (typeof realRounds)[number], i: number) =>
    (echoRounds[i] as (typeof echoRounds)[number]).queued1.p50 + r.paced.p50;
  const oneTokenRatios = realRounds.map((r, i) => r.chat.p50 / oneTokenBase(r, i));
  const oneTokenRatio = median(oneTokenRatios);
  const oneTokenSpread = halfRange(oneTokenRatios);
  /** What a 1-token chat costs above the echo replica's under the same `up`: the worker's engine path. */
  const enginePath = (r: (typeof realRounds)[number]) => r.chat.p50 - r.echo.p50;
  const enginePathMs = median(realRounds.map(enginePath));
  const enginePathRatio = perRound(realRounds, enginePath, (r) => r.direct.p50);
  const enginePathPacedRatio = perRound(realRounds, enginePath, (r) => r.paced.p50);
  const versionRatio = perRound(
    cliRounds,
    (r) => r.version,
    (r) => r.node,
  );
  const statusRatio = perRound(
    cliRounds,
    (r) => r.status,
    (r) => r.node,
  );
  const t1 = throughput[0] as (typeof throughput)[number];
  const t4 = throughput[1] as (typeof throughput)[number];
  const figures: Figure[] = [
    {
      figure: "echo c=1 p50 ÷ queue floor p50",
      measured: overhead[0]?.p50_ms as number,
      baseline: queueFloorFigures.c1_p50_ms,
      unit: "ms",
      ratio: queueFloorFigures.echo_c1_p50_vs_queue_floor,
      target: "≤ 2.5×",
      met: queueFloorFigures.echo_c1_p50_vs_queue_floor <= 2.5,
    },
    {
      figure: "echo c=32 req/s ÷ queue floor req/s",
      measured: overhead[2]?.requests_per_s as number,
      baseline: queueFloorFigures.c32_requests_per_s,
      unit: "req/s",
      ratio: queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor,
      target: "≥ 0.4×",
      met: queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor >= 0.4,
    },
    {
      figure: "1-token chat p50 ÷ (queue floor p50 + direct paced p50)",
      measured: median(realRounds.map((r) => r.chat.p50)),
      baseline: median(realRounds.map(oneTokenBase)),
      unit: "ms",
      ratio: oneTokenRatio,
      spread: oneTokenSpread,
      target: "≤ 1.5×",
      met: oneTokenRatio <= 1.5,
    },
    {
      figure: "1-token chat − echo chat p50 ÷ direct p50",
      measured: enginePathMs,
      baseline: median(realRounds.map((r) => r.direct.p50)),
      unit: "ms",
      ratio: enginePathRatio,
      target: "≤ 1.5×",
      met: enginePathRatio <= 1.5,
    },
    {
      figure: "1-token chat − echo chat p50 ÷ direct paced p50",
      measured: enginePathMs,
      baseline: median(realRounds.map((r) => r.paced.p50)),
      unit: "ms",
      ratio: enginePathPacedRatio,
      target: PACED_TARGET_TEXT,
      met: enginePathPacedRatio <= PACED_TARGET,
    },
    {
      figure: "tokens/s platform ÷ direct, 1 stream",
      measured: t1.platform_tokens_per_s,
      baseline: t1.direct_tokens_per_s,
      unit: "tok/s",
      ratio: t1.ratio,
      spread: t1.ratio_spread,
      target: "≥ 0.97 ±0.03",
      met: t1.ratio >= 0.97 && t1.ratio_spread <= 0.03,
    },
    {
      figure: "tokens/s platform ÷ direct, 4 streams",
      measured: t4.platform_tokens_per_s,
      baseline: t4.direct_tokens_per_s,
      unit: "tok/s",
      ratio: t4.ratio,
      spread: t4.ratio_spread,
      target: "≥ 0.97 ±0.03",
      met: t4.ratio >= 0.97 && t4.ratio_spread <= 0.03,
    },
    {
      figure: "`platform --version` ÷ `node -e 0`",
      measured: median(cliRounds.map((r) => r.version)),
      baseline: median(cliRounds.map((r) => r.node)),
      unit: "ms",
      ratio: versionRatio,
      target: "≤ 3×",
      met: versionRatio <= 3,
    },
    {
      figure: "`inference status --json` ÷ `node -e 0`",
      measured: median(cliRounds.map((r) => r.status)),
      baseline: median(cliRounds.map((r) => r.node)),
      unit: "ms",
      ratio: statusRatio,
      target: "≤ 8×",
      met: statusRatio <= 8,
    },
    {
      figure: "RSS, worker (model loaded, idle)",
      measured: rss.worker_mib,
      baseline: null,
      unit: "MiB",
      ratio: null,
      target: "≤ 120 MiB",
      met: rss.worker_mib <= 120,
    },
    {
      figure: "RSS, `platform up` process (idle)",
      measured: rss.up_mib,
      baseline: null,
      unit: "MiB",
      ratio: null,
      target: "≤ 120 MiB",
      met: rss.up_mib <= 120,
    },
    // used_memory moves by a few KiB on its own (allocator, client buffers): below 8 bytes a request over the steady run is that noise.
    {
      figure: "Redis used_memory retained per request",
      measured: redisFigures.retained_bytes_per_request,
      baseline: null,
      unit: "B",
      ratio: null,
      target: "≈ 0 (|x| < 8 B)",
      met: Math.abs(redisFigures.retained_bytes_per_request) < 8,
    },
    {
      figure: "job hashes left after steady run",
      measured: redisFigures.job_hashes_left,
      baseline: null,
      unit: "",
      ratio: null,
      target: "0",
      met: redisFigures.job_hashes_left <= 0,
    },
  ];

  const results = {
    when: new Date().toISOString(),
    model: modelPath.split("/").at(-1),
    threads: THREADS,
    parallel: PARALLEL,
    rounds: ROUNDS,
    load_average: { at_start: loadAtStart, at_end: loadavg() },
    figures,
    direct_engine_call: { p50_ms: directP50, p99_ms: directP99 },
    http_floor: {
      p50_ms: median(echoRounds.map((r) => r.floor1.p50)),
      p99_ms: median(echoRounds.map((r) => r.floor1.p99)),
      c32_requests_per_s: median(echoRounds.map((r) => r.floor32.perSecond)),
    },
    queue_floor: queueFloorFigures,
    overhead,
    redis: redisFigures,
    one_token: {
      platform_chat_p50_ms: median(realRounds.map((r) => r.chat.p50)),
      echo_chat_p50_ms: median(realRounds.map((r) => r.echo.p50)),
      direct_p50_ms: median(realRounds.map((r) => r.direct.p50)),
      direct_paced_p50_ms: median(realRounds.map((r) => r.paced.p50)),
      chat_less_echo_p50_ms: enginePathMs,
      chat_less_echo_vs_direct: enginePathRatio,
      chat_less_echo_vs_direct_paced: enginePathPacedRatio,
      chat_vs_queue_floor_plus_paced: oneTokenRatio,
      chat_vs_queue_floor_plus_paced_by_round: oneTokenRatios,
      chat_vs_direct: perRound(
        realRounds,
        (r) => r.chat.p50,
        (r) => r.direct.p50,
      ),
      platform_chat_p99_ms: median(realRounds.map((r) => r.chat.p99)),
      echo_chat_p99_ms: median(realRounds.map((r) => r.echo.p99)),
      direct_p99_ms: median(realRounds.map((r) => r.direct.p99)),
      direct_paced_p99_ms: median(realRounds.map((r) => r.paced.p99)),
      by_round: realRounds.map((r) => ({
        chat_p50_ms: r.chat.p50,
        echo_chat_p50_ms: r.echo.p50,
        direct_p50_ms: r.direct.p50,
        direct_paced_p50_ms: r.paced.p50,
      })),
    },
    throughput,
    reply_entries_per_streamed_token: replyEntriesPerToken,
    cli: cliRounds,
    rss,
  };

  const out = new URL("./results/", import.meta.url);
  await mkdir(out, { recursive: true });
  await writeFile(new URL("fabric.json", out), `${JSON.stringify(results, null, 2)}\n`);

  const f = (n: unknown, digits = 2) => (typeof n === "number" ? n.toFixed(digits) : String(n));
  const withUnit = (n: number | null, unit: string) =>
    n === null ? "-" : `${f(n, unit === "MiB" || unit === "ms" ? 2 : unit === "" ? 0 : 1)} ${unit}`.trim();
  console.log(
    `model ${results.model}, ${THREADS} thread(s), ${PARALLEL} sequences, ${ROUNDS} rounds; load average ${loadAtStart.map((l) => l.toFixed(2)).join(" ")} at start, ${results.load_average.at_end.map((l) => l.toFixed(2)).join(" ")} at end`,
  );
  console.log(
    "fabric overhead (echo engine; direct call p50 %s ms; HTTP floor p50 %s ms):",
    f(directP50, 3),
    f(results.http_floor.p50_ms),
  );
  for (const o of overhead)
    console.log(
      `  c=${o.concurrency}: p50 ${f(o.p50_ms)} ms (+${f(o.added_p50_ms)}), p99 ${f(o.p99_ms)} ms (+${f(o.added_p99_ms)}), ${f(o.requests_per_s, 0)} req/s`,
    );
  console.log(
    `queue floor (a list and the reply stream, no job queue): c=1 p50 ${f(queueFloorFigures.c1_p50_ms)} ms = ${f(queueFloorFigures.c1_p50_vs_http_floor)}× the HTTP floor, c=32 ${f(queueFloorFigures.c32_requests_per_s, 0)} req/s = ${f(queueFloorFigures.c32_requests_per_s_vs_http_floor)}× the HTTP floor; echo = ${f(queueFloorFigures.echo_c1_p50_vs_queue_floor)}× its p50 and ${f(queueFloorFigures.echo_c32_requests_per_s_vs_queue_floor)}× its req/s`,
  );
  console.log(
    `redis per echo request: ${f(redisFigures.commands_per_request_monitor, 1)} commands from clients (+${f(redisFigures.lua_commands_per_request, 1)} inside scripts); ${f(redisFigures.steady_commands_per_request, 1)} at steady load`,
  );
  console.log(
    `redis after ${redisFigures.steady_blocks} × ${redisFigures.steady_requests} steady requests: ${f(redisFigures.retained_bytes_per_request, 1)} B retained per request (by block: ${redisFigures.retained_bytes_per_request_by_block.map((x) => f(x, 1)).join(", ")}; dataset ${f(redisFigures.retained_dataset_bytes_per_request, 1)} B), ${redisFigures.keys_left} key(s) and ${redisFigures.job_hashes_left} job hash(es) left; the queue's event stream at its cap: ${redisFigures.event_stream_entries} entries, ${f(redisFigures.event_stream_bytes / 1024, 0)} KiB; stream entries added: ${JSON.stringify(redisFigures.stream_entries_added)}`,
  );
  const oneToken = results.one_token;
  console.log(
    `1-token chat under \`up\`: p50 ${f(oneToken.platform_chat_p50_ms)} ms, echo chat ${f(oneToken.echo_chat_p50_ms)} ms (the echo replica under the same \`up\`; echo c=1 above ${f(overhead[0]?.p50_ms)} ms), difference ${f(oneToken.chat_less_echo_p50_ms)} ms; the engine directly ${f(oneToken.direct_p50_ms, 3)} ms back to back, ${f(oneToken.direct_paced_p50_ms, 3)} ms paced (one call after each chat pair)`,
  );
  console.log(
    `1-token chat ÷ (queue floor + engine paced), by round: ${oneTokenRatios.map((x) => f(x, 2)).join(", ")} → ${f(oneTokenRatio, 2)} ±${f(oneTokenSpread, 2)}`,
  );
  console.log(
    `tokens/s, platform (streamed) vs direct (${f(replyEntriesPerToken, 3)} reply entries per streamed token: ${f(1 / replyEntriesPerToken, 1)} tokens an entry):`,
  );
  for (const t of throughput)
    console.log(
      `  ${t.streams} stream(s): ${f(t.platform_tokens_per_s, 0)} vs ${f(t.direct_tokens_per_s, 0)} → ratio ${f(t.ratio, 3)} ±${f(t.ratio_spread, 3)} (by round: ${t.ratios.map((x) => f(x, 3)).join(", ")})`,
    );
  console.log("");
  const header = ["figure", "measured", "baseline", "ratio", "target", "met"];
  const rows = figures.map((x) => [
    x.figure,
    withUnit(x.measured, x.unit),
    withUnit(x.baseline, x.unit),
    x.ratio === null
      ? "-"
      : `${f(x.ratio, x.spread === undefined ? 2 : 3)}${x.spread === undefined ? "×" : ` ±${f(x.spread, 3)}`}`,
    x.target,
    x.met ? "yes" : "no",
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 || i === 4 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(" | ")} |`;
  console.log(line(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const r of rows) console.log(line(r));
  console.log(`\nwritten to ${new URL("fabric.json", out).pathname}`);
}
