/**
 * `platform inference benchmark <model>`: load an endpoint through the gateway at several
 * concurrency levels and, with --configs, compare deployments that differ in one field by
 * deploying each as a temporary endpoint beside it (removed at the end, on Ctrl-C and on failure
 * too: temporary-endpoints.ts). Measuring is benchmark-measure.ts, the files benchmark-report.ts.
 */
import { mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { parseDuration } from "../contracts/duration.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import type { Api, RequestSpec } from "./benchmark-measure.ts";
import type { BenchmarkReport, ConfigurationResult } from "./benchmark-report.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { printJson, printTable } from "./output.ts";
import { Progress } from "./progress.ts";
import { type EndpointInfo, TemporaryEndpoints, temporaryName, waitAvailable } from "./temporary-endpoints.ts";

type Flags = {
  concurrency: string;
  requests?: string;
  duration?: string;
  prompt?: string;
  promptFile?: string;
  maxTokens: string;
  api: string;
  configs: string[];
  speculativeModel?: string;
  numSpeculativeTokens?: string;
  out?: string;
  json?: boolean;
};

type Status = EndpointInfo;

const DEFAULT_PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived a curious girl who";
const MAX_CONCURRENCY = 1024;
/** Without --requests or --duration: enough rounds per level that its percentiles mean something, and a floor for low levels. */
const defaultRequests = (concurrency: number) => Math.max(16, 4 * concurrency);

/**
 * A field a configuration may vary: its values, and how each changes the measured endpoint's
 * runtime section. Another axis is one more entry here.
 */
type Axis = {
  values: readonly string[];
  /** The deployment fields it touches, as `status` names them in not_applied. */
  fields: readonly string[];
  apply: (runtime: Record<string, unknown>, value: string, flags: Flags) => void;
  /** The endpoint name's part for a value, short: names are at most 63 characters. */
  slug: (value: string) => string;
};

const AXES: Record<string, Axis> = {
  quantization: {
    values: ["none", "int8", "int4"],
    fields: ["runtime.quantization"],
    apply: (runtime, value) => {
      if (value === "none") delete runtime.quantization;
      else runtime.quantization = value;
    },
    slug: (value) => (value === "none" ? "noquant" : value),
  },
  speculative: {
    values: ["off", "on"],
    fields: ["runtime.speculative_model", "runtime.num_speculative_tokens"],
    apply: (runtime, value, flags) => {
      if (value === "off") {
        delete runtime.speculative_model;
        delete runtime.num_speculative_tokens;
        return;
      }
      if (flags.speculativeModel !== undefined) runtime.speculative_model = flags.speculativeModel;
      if (flags.numSpeculativeTokens !== undefined) runtime.num_speculative_tokens = Number(flags.numSpeculativeTokens);
      if (runtime.speculative_model === undefined) {
        throw new CliError(
          "--speculative-model: required with --configs speculative=on (the endpoint has no draft model to speculate with)",
          2,
        );
      }
    },
    slug: (value) => `spec-${value}`,
  },
};

const CONFIGS_FORM = `expected <field>=<value>,<value>... with field ${Object.entries(AXES)
  .map(([k, a]) => `${k} (${a.values.join(", ")})`)
  .join(" or ")}`;

export function registerBenchmark(inference: Command): void {
  inference
    .command("benchmark <model>")
    .description(
      "measure an endpoint through the gateway: TTFT, inter-token and end-to-end latency, requests/s and tokens/s per concurrency level; --configs compares deployments",
    )
    .option("--concurrency <list>", "concurrency levels: requests in flight at once, comma-separated", "1,4,16")
    .option("--requests <n>", "requests per level (default: 4 × the level, at least 16)")
    .option(
      "--duration <time>",
      "instead of --requests: send requests for this long per level, e.g. 30s (those in flight at the end still count)",
    )
    .option("--prompt <text>", "the prompt of every request")
    .option("--prompt-file <file>", "the prompt of every request, read from a file (all of it)")
    .option("--max-tokens <n>", "output tokens per request, at most", "128")
    .option("--api <api>", "chat (/v1/chat/completions) or completions (/v1/completions)", "chat")
    .option(
      "--configs <field=values>",
      "compare deployments: quantization=none,int8,int4 or speculative=off,on; each value runs on a temporary endpoint <model>--bench-<value> (repeatable: every combination)",
      (spec: string, all: string[]) => [...all, spec],
      [],
    )
    .option("--speculative-model <name>", "draft model for speculative=on")
    .option("--num-speculative-tokens <n>", "tokens proposed per speculative step, for speculative=on")
    .option("--out <dir>", "where the JSON and HTML reports go (default ./benchmark-<model>-<timestamp>)")
    .option("--json", "print the report as JSON instead of the table")
    .action(async (model: string, flags: Flags) => benchmark(model, flags));
}

type Plan = {
  concurrency: number[];
  requests?: number;
  durationMs?: number;
  prompt: string;
  maxTokens: number;
  api: Api;
  axes: { name: string; axis: Axis; values: string[] }[];
  out: string;
};

/** Every flag checked before anything is sent: bad input exits 2 naming the flag and the form. */
export async function parseFlags(model: string, flags: Flags, now = new Date()): Promise<Plan> {
  if (!NAME_PATTERN.test(model))
    throw new CliError(`<model> "${model}": expected an endpoint name (letters, digits, ".", "_", "-")`, 2);
  const concurrency = flags.concurrency.split(",").map((s) => s.trim());
  const levels = concurrency.map((s) => Number(s));
  if (concurrency.some((s) => !/^\d+$/.test(s)) || levels.some((n) => n < 1 || n > MAX_CONCURRENCY)) {
    throw new CliError(
      `--concurrency: expected comma-separated integers from 1 to ${MAX_CONCURRENCY}, e.g. 1,4,16, got "${flags.concurrency}"`,
      2,
    );
  }
  if (flags.requests !== undefined && flags.duration !== undefined)
    throw new CliError("--requests and --duration: give one of them (requests per level, or a time per level)", 2);
  const requests = flags.requests === undefined ? undefined : positive("--requests", flags.requests);
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
  const maxTokens = positive("--max-tokens", flags.maxTokens);
  if (flags.api !== "chat" && flags.api !== "completions")
    throw new CliError(`--api: expected chat or completions, got "${flags.api}"`, 2);
  if (flags.numSpeculativeTokens !== undefined) positive("--num-speculative-tokens", flags.numSpeculativeTokens);
  const axes: Plan["axes"] = [];
  for (const spec of flags.configs) {
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
    axes.push({ name, axis, values });
  }
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
    concurrency: [...new Set(levels)],
    requests,
    durationMs,
    prompt,
    maxTokens,
    api: flags.api,
    axes,
    out: resolve(flags.out ?? `benchmark-${model}-${stamp}`),
  };
}

function positive(flag: string, value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1)
    throw new CliError(`${flag}: expected a positive integer, got "${value}"`, 2);
  return n;
}

/** One configuration to measure: the measured endpoint itself, or a temporary one with `runtime`. */
type Candidate = {
  name: string;
  fields: Record<string, string>;
  endpoint: string;
  temporary: boolean;
  runtime: Record<string, unknown>;
  varied: string[];
};

/** Every combination of the --configs values; a combination the endpoint already runs is measured on it. */
function candidates(model: string, base: Status | undefined, plan: Plan, flags: Flags): Candidate[] {
  if (plan.axes.length === 0)
    return [{ name: "as deployed", fields: {}, endpoint: model, temporary: false, runtime: {}, varied: [] }];
  if (!base) throw new CliError("--configs deploys temporary endpoints, which takes an admin key");
  let combos: Record<string, string>[] = [{}];
  for (const { name, values } of plan.axes) combos = combos.flatMap((c) => values.map((v) => ({ ...c, [name]: v })));
  return combos.map((fields) => {
    const runtime: Record<string, unknown> = structuredClone(base.config.runtime ?? {});
    for (const [name, value] of Object.entries(fields)) (AXES[name] as Axis).apply(runtime, value, flags);
    const same = JSON.stringify(sortKeys(runtime)) === JSON.stringify(sortKeys(base.config.runtime ?? {}));
    const slug = Object.entries(fields)
      .map(([name, value]) => (AXES[name] as Axis).slug(value))
      .join("-");
    return {
      name: Object.entries(fields)
        .map(([k, v]) => `${k}=${v}`)
        .join(", "),
      fields,
      endpoint: same ? model : temporaryName(model, "bench", slug),
      temporary: !same,
      runtime,
      varied: plan.axes.flatMap((a) => a.axis.fields),
    };
  });
}

const sortKeys = (o: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));

async function benchmark(model: string, flags: Flags): Promise<void> {
  const plan = await parseFlags(model, flags);
  // Loaded here, not with the module: `inference status` and the rest of the group load this file too.
  const { closeConnections, runLevel, sendStreamed } = await import("./benchmark-measure.ts");
  const { formatRate, notes, renderHtml, tableHead, tableRows } = await import("./benchmark-report.ts");
  const api = await ApiClient.fromCredentials();
  // One bearer for the whole run: a CLI token lives for hours, a benchmark minutes.
  const bearer = await api.bearer();
  const progress = new Progress();
  const base = await baseStatus(api, model, plan);
  const planned = candidates(model, base, plan, flags);
  // Before the run, so an unwritable --out fails now and not after minutes of measuring.
  try {
    await mkdir(plan.out, { recursive: true });
  } catch (e) {
    throw new CliError(
      `--out ${plan.out}: cannot create it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      2,
    );
  }
  // The measured endpoint first, before any temporary one shares its queue; then one temporary at a time.
  const order = [...planned.filter((c) => !c.temporary), ...planned.filter((c) => c.temporary)];

  const temporary = new TemporaryEndpoints(api, progress, {
    purpose: "benchmark",
    interruption: "interrupted: nothing written",
  });
  const signal = temporary.signal;

  const started = new Date();
  const results = new Map<Candidate, ConfigurationResult>();
  const spec = (endpoint: string): RequestSpec => ({
    baseUrl: api.baseUrl,
    apiKey: bearer,
    api: plan.api,
    model: endpoint,
    prompt: plan.prompt,
    maxTokens: plan.maxTokens,
  });
  try {
    for (const [i, candidate] of order.entries()) {
      const tag =
        order.length > 1
          ? `[${i + 1}/${order.length} ${candidate.name}]`
          : `[${candidate.temporary ? candidate.name : model}]`;
      const result: ConfigurationResult = {
        name: candidate.name,
        fields: candidate.fields,
        endpoint: candidate.endpoint,
        temporary: candidate.temporary,
        version: base?.version ?? null,
        framework: base?.framework ?? null,
        not_applied: [],
        varied_not_applied: [],
        queue_shared_with: [],
        levels: [],
      };
      results.set(candidate, result);
      try {
        // A measured endpoint still starting is waited for too; one scaled to zero or degraded is measured as it is (the warm-up wakes it).
        const status = candidate.temporary
          ? await temporary.deploy(temporaryConfig(base as Status, candidate), tag)
          : base && (base.state === "pending" || base.state === "failed")
            ? await waitAvailable(api, model, progress, tag, signal)
            : base;
        if (status) {
          result.version = status.version;
          result.framework = status.framework;
          result.not_applied = status.not_applied;
          result.varied_not_applied = status.not_applied.filter((f) => candidate.varied.includes(f));
          result.queue_shared_with = await queueSharers(api, status);
          if (result.varied_not_applied.length > 0)
            progress.line(
              `${tag} not applied by ${status.framework}: ${result.varied_not_applied.join(", ")} (its numbers are not that setting's effect)`,
            );
        }
        progress.status(`${tag} warm-up request`);
        const warm = await sendStreamed(spec(candidate.endpoint), signal);
        if (!warm.ok) throw new CliError(warm.error ?? "the warm-up request failed");
        for (const c of plan.concurrency) {
          const total = plan.durationMs === undefined ? (plan.requests ?? defaultRequests(c)) : undefined;
          const level = await runLevel(
            { concurrency: c, requests: total, durationMs: plan.durationMs },
            () => sendStreamed(spec(candidate.endpoint), signal),
            (p) => {
              const of =
                total !== undefined
                  ? `${p.finished}/${total} requests`
                  : `${p.finished} requests, ${Math.min(100, Math.floor((p.elapsedMs / (plan.durationMs as number)) * 100))}% of ${(plan.durationMs as number) / 1000} s`;
              progress.status(
                `${tag} concurrency ${c}: ${of}, ${p.errors} failed, ${(p.elapsedMs / 1000).toFixed(1)} s`,
              );
            },
          );
          result.levels.push(level);
          progress.line(
            `${tag} concurrency ${c}: ${level.completed} ok, ${level.errors} failed, ${formatRate(level.requests_per_s)} req/s, ${formatRate(level.output_tokens_per_s)} output tok/s in ${level.duration_s.toFixed(1)} s`,
          );
        }
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        // The measured endpoint failing is the run failing; a temporary configuration failing is one row.
        if (!candidate.temporary) throw e;
        result.error = e instanceof Error ? e.message : String(e);
        progress.line(`${tag} failed: ${result.error}`);
      } finally {
        if (candidate.temporary) await temporary.remove(candidate.endpoint, tag);
      }
    }
  } catch (e) {
    // Nothing was written: leave no empty report directory behind (rmdir keeps a directory that has files).
    await rmdir(plan.out).catch(() => undefined);
    throw e;
  } finally {
    progress.done();
    await temporary.close();
    closeConnections();
  }

  const report: BenchmarkReport = {
    object: "benchmark",
    model,
    base_url: `${api.baseUrl}/v1`,
    started: started.toISOString(),
    finished: new Date().toISOString(),
    settings: {
      api: plan.api,
      concurrency: plan.concurrency,
      requests_per_level: plan.requests ?? null,
      duration_s: plan.durationMs === undefined ? null : plan.durationMs / 1000,
      max_tokens: plan.maxTokens,
      prompt_chars: plan.prompt.length,
      temperature: 0,
      warmup_requests: 1,
    },
    configurations: planned.map((c) => results.get(c) as ConfigurationResult),
    files: { json: join(plan.out, "benchmark.json"), html: join(plan.out, "benchmark.html") },
  };
  await writeFile(report.files.json, `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(report.files.html, renderHtml(report));

  if (flags.json) {
    printJson(report);
    console.error(`JSON: ${report.files.json}\nHTML: ${report.files.html}`);
  } else {
    printTable(tableHead(), tableRows(report));
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

/**
 * The measured endpoint's status (its deployment, version, engine). Undefined for a key that may
 * not read it (not an admin): then the endpoint is only checked to exist, and no --configs.
 */
async function baseStatus(api: ApiClient, model: string, plan: Plan): Promise<Status | undefined> {
  try {
    return await api.request<Status>("GET", `/admin/v1/endpoints/${encodeURIComponent(model)}`);
  } catch (e) {
    if (!(e instanceof CliError) || !/\(permission_denied\)$/.test(e.message)) throw e;
    if (plan.axes.length > 0)
      throw new CliError(`--configs deploys temporary endpoints, which takes an admin key: ${e.message}`);
  }
  await api.request("GET", `/v1/models/${encodeURIComponent(model)}`);
  return undefined;
}

/** The candidate's deployment: the measured endpoint's, with the candidate's runtime, beside it. */
function temporaryConfig(base: Status, candidate: Candidate): DeploymentConfig & { endpoint: string } {
  const { autoscaling: _autoscaling, ...config } = base.config;
  return {
    ...config,
    endpoint: candidate.endpoint,
    // The version the measured endpoint runs, not whatever "latest" means now.
    model: { ...config.model, version: base.version },
    runtime: candidate.runtime as DeploymentConfig["runtime"],
    // As many replicas as the measured endpoint wants now (autoscaling may have moved it), and no autoscaling: a fixed size compares.
    resources: { ...config.resources, replicas: Math.max(1, base.replicas.desired) },
  };
}

/**
 * The other endpoints on this endpoint's queue (a model version's, and the engine settings that change
 * answers: engines.ts `endpointQueueName`): their replicas serve its requests too.
 */
async function queueSharers(api: ApiClient, status: Status): Promise<string[]> {
  const all = await api.request<{ data: Status[] }>("GET", "/admin/v1/endpoints");
  const queueOf = (s: Status) => endpointQueueName({ config: s.config, version: s.version });
  return all.data
    .filter((e) => e.endpoint !== status.endpoint && queueOf(e) === queueOf(status) && e.replicas.desired > 0)
    .map((e) => e.endpoint);
}
