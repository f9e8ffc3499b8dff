/**
 * `platform inference benchmark <model>`: its flags, and the report printed. The run itself
 * (levels, configurations, temporary endpoints, the files) is src/benchmark/.
 */
import { mkdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { type Command, Option } from "commander";
import { AXES } from "../benchmark/configs.ts";
import { TRACE_SHAPES, TRACES, type TraceName } from "../benchmark/traces.ts";
import type { BenchmarkPlan } from "../benchmark/run.ts";
import { parseDuration } from "../contracts/duration.ts";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import { dataDirOf } from "../settings/core.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber, wholeNumberList } from "./common/flags.ts";
import { printJson, printTable } from "./common/output.ts";
import { Progress } from "./common/progress.ts";

type Flags = {
  concurrency: number[];
  requests?: number;
  duration?: string;
  prompt?: string;
  promptFile?: string;
  maxTokens: number;
  api: string;
  size?: string;
  steps?: number;
  configs: string[];
  speculativeModel?: string;
  numSpeculativeTokens?: number;
  out?: string;
  json?: boolean;
  trace?: string;
};

const DEFAULT_PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived a curious girl who";
const MAX_CONCURRENCY = 1024;

const CONFIGS_FORM = `expected <field>=<value>,<value>... with field ${Object.entries(AXES)
  .map(([k, a]) => `${k} (${a.values.join(", ")})`)
  .join(" or ")}`;

export function registerBenchmark(inference: Command): void {
  inference
    .command("benchmark <model>")
    .description(
      "measure an endpoint through the gateway: TTFT, inter-token and end-to-end latency, requests/s and tokens/s per concurrency level; --configs compares deployments",
    )
    .addOption(
      new Option("--concurrency <list>", "concurrency levels: requests in flight at once, comma-separated")
        .argParser(wholeNumberList(1, MAX_CONCURRENCY))
        .default([1, 4, 16], "1,4,16"),
    )
    .option("--requests <n>", "requests per level (default: 4 × the level, at least 16)", wholeNumber(1))
    .option(
      "--duration <time>",
      "instead of --requests: send requests for this long per level, e.g. 30s (those in flight at the end still count)",
    )
    .option("--prompt <text>", "the prompt of every request")
    .option("--prompt-file <file>", "the prompt of every request, read from a file (all of it)")
    .option("--max-tokens <n>", "output tokens per request, at most", wholeNumber(1), 128)
    .option(
      "--api <api>",
      "chat (/v1/chat/completions), completions (/v1/completions) or images (/v1/images/generations; what a diffusers endpoint always gets)",
      "chat",
    )
    .option("--size <WxH>", "image requests: the size, e.g. 512x512 (default: the model's)")
    .option("--steps <n>", "image requests: denoising steps (default: the pipeline's)", wholeNumber(1))
    .option(
      "--configs <field=values>",
      "compare deployments: quantization=none,int8,int4 or speculative=off,on; each value runs on a temporary endpoint <model>--bench-<value> (repeatable: every combination)",
      (spec: string, all: string[]) => [...all, spec],
      [],
    )
    .option("--speculative-model <name>", "draft model for speculative=on")
    .option("--num-speculative-tokens <n>", "tokens proposed per speculative step, for speculative=on", wholeNumber(1))
    .option(
      "--out <dir>",
      "where the JSON and HTML reports go (default: <data dir>/benchmarks/benchmark-<model>-<timestamp>, the data dir being PLATFORM_DATA_DIR or ~/.local/share/platform)",
    )
    .option(
      "--trace <name>",
      `instead of levels: a trace a team sends (${TRACES.join(", ")}), in its own shape (docs/performance.md, "Serving traces"): TTFT per turn, inter-token latency, tokens/s, cached share`,
    )
    .option("--json", "print the report as JSON instead of the table")
    .action(async (model: string, flags: Flags) =>
      flags.trace === undefined ? benchmark(model, flags) : traceBenchmark(model, flags),
    );
}

/** Every flag checked before anything is sent: bad input exits 2 naming the flag and the form. */
export async function parseFlags(model: string, flags: Flags, now = new Date()): Promise<BenchmarkPlan> {
  if (!NAME_PATTERN.test(model))
    throw new CliError(`<model> "${model}": expected an endpoint name (letters, digits, ".", "_", "-")`, 2);
  if (flags.requests !== undefined && flags.duration !== undefined)
    throw new CliError("--requests and --duration: give one of them (requests per level, or a time per level)", 2);
  let durationMs: number | undefined;
  if (flags.duration !== undefined) {
    durationMs = parseDuration(flags.duration);
    if (durationMs === undefined || durationMs <= 0)
      throw new CliError(`--duration: expected "<n>s" (also <n>ms, <n>m), got "${flags.duration}"`, 2);
  }
  if (flags.prompt !== undefined && flags.promptFile !== undefined)
    throw new CliError("--prompt and --prompt-file: give one of them", 2);
  let prompt = flags.prompt ?? DEFAULT_PROMPT;
  if (flags.promptFile !== undefined) {
    try {
      prompt = await readFile(flags.promptFile, "utf8");
    } catch (e) {
      throw new CliError(
        `--prompt-file ${flags.promptFile}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (e as Error).message}`,
        2,
      );
    }
  }
  if (prompt.trim() === "")
    throw new CliError(
      `${flags.promptFile !== undefined ? "--prompt-file" : "--prompt"}: expected some text, got none`,
      2,
    );
  if (flags.api !== "chat" && flags.api !== "completions" && flags.api !== "images")
    throw new CliError(`--api: expected chat, completions or images, got "${flags.api}"`, 2);
  if (flags.size !== undefined && !/^\d{1,5}x\d{1,5}$/.test(flags.size))
    throw new CliError(`--size: expected <width>x<height>, e.g. 512x512, got "${flags.size}"`, 2);
  const axes = configAxes(flags.configs);
  if (
    (flags.speculativeModel !== undefined || flags.numSpeculativeTokens !== undefined) &&
    !axes.some((a) => a.name === "speculative" && a.values.includes("on"))
  ) {
    throw new CliError(
      "--speculative-model and --num-speculative-tokens: they set up speculative=on; add --configs speculative=off,on",
      2,
    );
  }
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z")
    .replace("T", "-");
  return {
    model,
    concurrency: flags.concurrency,
    requests: flags.requests,
    durationMs,
    prompt,
    maxTokens: flags.maxTokens,
    api: flags.api,
    size: flags.size,
    steps: flags.steps,
    axes,
    speculative: { model: flags.speculativeModel, tokens: flags.numSpeculativeTokens },
    // Not the current directory: run from a checkout, a report folder there would be one more untracked thing.
    out: resolve(flags.out ?? join(dataDirOf(process.env), "benchmarks", `benchmark-${model}-${stamp}`)),
  };
}

/** `--configs` as the fields to vary and their values, each checked against AXES. */
function configAxes(specs: string[]): BenchmarkPlan["axes"] {
  const axes: BenchmarkPlan["axes"] = [];
  for (const spec of specs) {
    const m = /^([a-z_]+)=(.+)$/.exec(spec.trim());
    const axis = m ? AXES[m[1] as string] : undefined;
    if (!m || !axis) throw new CliError(`--configs "${spec}": ${CONFIGS_FORM}`, 2);
    const name = m[1] as string;
    const values = (m[2] as string).split(",").map((v) => v.trim());
    const wrong = values.find((v) => !axis.values.includes(v));
    if (wrong !== undefined)
      throw new CliError(`--configs "${spec}": ${name} takes ${axis.values.join(", ")}, got "${wrong}"`, 2);
    if (new Set(values).size !== values.length) throw new CliError(`--configs "${spec}": a value is named twice`, 2);
    if (axes.some((a) => a.name === name))
      throw new CliError(
        `--configs: ${name} is given twice; list its values once, e.g. ${name}=${axis.values.join(",")}`,
        2,
      );
    axes.push({ name, values });
  }
  return axes;
}

async function benchmark(model: string, flags: Flags): Promise<void> {
  const plan = await parseFlags(model, flags);
  // Loaded here, not with the module: `inference status` and the rest of the group load this file too.
  const { prepareBenchmark, runBenchmark } = await import("../benchmark/run.ts");
  const { notes, tableHead, tableRows } = await import("../benchmark/report.ts");
  const api = await ApiClient.fromCredentials();
  const bearer = await api.bearer();
  const progress = new Progress();
  const prepared = await prepareBenchmark(api, plan);
  // Before the run, so an unwritable --out fails now and not after minutes of measuring.
  try {
    await mkdir(plan.out, { recursive: true });
  } catch (e) {
    throw new CliError(
      `--out ${plan.out}: cannot create it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      2,
    );
  }
  progress.line(`report: ${plan.out}`);
  const interruption = new CliError("interrupted: nothing written", 130);
  const report = await runBenchmark(api, prepared, { bearer, progress, interruption }).finally(() => progress.done());

  if (flags.json) {
    printJson(report);
    console.error(`JSON: ${report.files.json}\nHTML: ${report.files.html}`);
  } else {
    printTable(tableHead(report), tableRows(report));
    for (const note of notes(report)) console.log(`note: ${note}`);
    console.log(`JSON: ${report.files.json}`);
    console.log(`HTML: ${report.files.html}`);
  }
  const failed = report.configurations.filter((c) => c.error !== undefined);
  if (failed.length > 0)
    throw new CliError(
      `${failed.length} of ${report.configurations.length} configurations could not be measured: ${failed.map((c) => `${c.name}: ${c.error}`).join("; ")}`,
    );
}

/** `--trace`: one trace against the endpoint through the gateway; the JSON goes to --out as trace-<name>.json. */
async function traceBenchmark(model: string, flags: Flags): Promise<void> {
  const trace = flags.trace as string;
  if (!(TRACES as readonly string[]).includes(trace))
    throw new CliError(`--trace: expected ${TRACES.join(", ")}, got "${trace}"`, 2);
  if (flags.configs.length > 0 || flags.api !== "chat")
    throw new CliError("--trace: sends chat requests to the endpoint as it is; leave out --configs and --api", 2);
  const plan = await parseFlags(model, flags);
  const { httpChat, runTrace, traceConversations, traceResult } = await import("../benchmark/traces.ts");
  const { closeConnections } = await import("../benchmark/measure.ts");
  const name = trace as TraceName;
  const shape = TRACE_SHAPES[name];
  const api = await ApiClient.fromCredentials();
  const send = httpChat({ baseUrl: api.baseUrl, apiKey: await api.bearer(), model });
  const progress = new Progress();
  const turns = shape.conversations * shape.turns;
  const run = await runTrace(traceConversations(name, shape), shape.concurrency, send, (done) =>
    progress.status(`${name}: ${done}/${turns} requests`),
  ).finally(() => {
    progress.done();
    closeConnections();
  });
  const result = { model, shape, ...traceResult(name, run) };
  await mkdir(plan.out, { recursive: true });
  const file = join(plan.out, `trace-${name}.json`);
  const { writeFile } = await import("node:fs/promises");
  await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
  if (flags.json) printJson(result);
  else {
    const ms = (x: number | null | undefined) => (x === null || x === undefined ? "—" : x.toFixed(0));
    printTable(
      ["FIGURE", "VALUE"],
      [
        ["requests (errors)", `${result.turns} (${result.errors})`],
        ["wall", `${result.wall_s.toFixed(1)} s`],
        ["output tokens/s", result.output_tokens_per_s.toFixed(1)],
        ["TTFT first turns p50", `${ms(result.ttft_first_p50)} ms`],
        ["TTFT later turns p50 / p95", `${ms(result.ttft_later_p50)} / ${ms(result.ttft_later_p95)} ms`],
        ...result.ttft_by_turn.map((t) => [`TTFT turn ${t.turn + 1} p50 / p95`, `${ms(t.p50)} / ${ms(t.p95)} ms`]),
        [
          "inter-token p50 / p95",
          `${result.itl_ms?.p50.toFixed(1) ?? "—"} / ${result.itl_p95_ms?.toFixed(1) ?? "—"} ms`,
        ],
        [
          "cached share of prompt tokens",
          result.cached_share === null ? "not reported" : result.cached_share.toFixed(3),
        ],
      ],
    );
    for (const e of result.error_samples) console.log(`error: ${e}`);
    console.log(`JSON: ${file}`);
  }
  if (result.errors === result.turns)
    throw new CliError(`every request of the ${name} trace failed: ${result.error_samples.join("; ")}`);
}
