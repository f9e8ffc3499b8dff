/**
 * `platform training evaluate`: evaluation jobs on model versions and adapters (docs/evaluation.md).
 * A version no endpoint serves is evaluated on a temporary endpoint `<model>--eval-<version>`,
 * deployed for the run and removed at its end, on failure and on Ctrl-C (temporary-endpoints.ts).
 */
import { existsSync, openAsBlob, statSync } from "node:fs";
import { basename, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { Command } from "commander";
import { type DeploymentConfig, NAME_PART } from "../contracts/deployment.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { printJson, printTable } from "./output.ts";
import { Progress } from "./progress.ts";
import { type EndpointInfo, TemporaryEndpoints, temporaryName } from "./temporary-endpoints.ts";
import { taskDataset } from "./training-task.ts";

type Evaluation = {
  id: string;
  model: string;
  metric: string;
  state: string;
  base: { name: string; version: string };
  items: number;
  done: number;
  dataset_sha256: string;
  result: { metric: string; value: number; n: number; stderr: number | null; boundary_merges?: number } | null;
  error: { code: string; message: string } | null;
};
type Comparison = {
  a: Evaluation;
  b: Evaluation;
  difference: number;
  stderr: number | null;
  ci95: [number, number] | null;
  method: "paired" | "unpaired";
};

type Flags = {
  dataset?: string;
  metric?: string;
  task?: string;
  json?: boolean;
  compare?: string;
  maxTokens?: string;
  /** false with --no-deploy. */
  deploy: boolean;
};

const METRICS = ["perplexity", "accuracy", "exact_match"];
const TARGET = new RegExp(`^(${NAME_PART})(?:@(${NAME_PART}))?(?::(${NAME_PART}))?$`);

export function registerEvaluate(training: Command): void {
  training
    .command("evaluate <target>")
    .description(
      "evaluate a model version (<model>@<version>) or adapter (<model>@<version>:<adapter>) on a JSONL dataset: perplexity, multiple-choice accuracy or exact match, as transformers and lm-evaluation-harness compute them; a version no endpoint serves is evaluated on a temporary endpoint <model>--eval-<version> (removed at the end)",
    )
    .option(
      "--dataset <uri|file>",
      "JSONL dataset: a local file (uploaded), an uploaded file id, or a URI the gateway reads",
    )
    .option("--metric <metric>", "perplexity, accuracy or exact_match (default: from the dataset's lines)")
    .option(
      "--task <yaml>",
      "a local lm-eval task YAML (multiple_choice or generate_until over a local JSON/JSONL dataset), turned into the dataset",
    )
    .option("--max-tokens <n>", "exact_match: the most tokens generated per answer (default 256)")
    .option(
      "--compare <v1,v2>",
      "evaluate two versions (or version:adapter) of <model> on the same dataset and print both with the difference and its 95% interval",
    )
    .option(
      "--no-deploy",
      "refuse a version no endpoint serves (409 model_not_deployed) instead of deploying a temporary endpoint for it (an admin key's)",
    )
    .option("--json", 'print {"metric", "value", "n", "stderr"} (with --compare: both and the difference)')
    .action(async (target: string, flags: Flags) => {
      const m = TARGET.exec(target);
      if (!m) throw new CliError(`${target}: expected <model>@<version> or <model>@<version>:<adapter>`, 2);
      if (flags.metric !== undefined && !METRICS.includes(flags.metric))
        throw new CliError(`--metric ${flags.metric}: use perplexity, accuracy or exact_match`, 2);
      if ((flags.dataset === undefined) === (flags.task === undefined))
        throw new CliError("name the data with --dataset <file or URI> or --task <lm-eval task YAML> (one of them)", 2);
      const maxTokens = flags.maxTokens === undefined ? undefined : Number(flags.maxTokens);
      if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && maxTokens >= 1 && maxTokens <= 4096))
        throw new CliError(`--max-tokens ${flags.maxTokens}: a whole number from 1 to 4096`, 2);
      const model = m[1] as string;
      const targets = flags.compare === undefined ? [target] : compareTargets(model, flags.compare);
      if (flags.compare === undefined && m[2] === undefined)
        throw new CliError(`${target}: name the version, e.g. ${model}@v1 (or pass --compare v1,v2)`, 2);
      const api = await ApiClient.fromCredentials();
      const task = flags.task === undefined ? undefined : await taskDataset(flags.task);
      const dataset = await datasetId(api, task?.path ?? (flags.dataset as string), flags.json === true);
      const metric = flags.metric ?? task?.metric;
      const body = (t: string) => ({
        model: t,
        dataset,
        ...(metric ? { metric } : {}),
        ...(maxTokens ? { max_tokens: maxTokens } : {}),
      });
      const finished = await evaluateAll(api, model, targets.map(body), flags.deploy, flags.json === true);
      const failed = finished.find((e) => e.state !== "succeeded");
      if (failed)
        throw new CliError(
          `evaluation ${failed.id} of ${failed.model} ${failed.state}${failed.error ? `: ${failed.error.message}` : ""}`,
        );
      if (finished.length === 1) return printOne(finished[0] as Evaluation, flags.json === true);
      const [a, b] = finished as [Evaluation, Evaluation];
      const comparison = await api.request<Comparison>(
        "GET",
        `/admin/v1/evaluations/compare?a=${encodeURIComponent(a.id)}&b=${encodeURIComponent(b.id)}`,
      );
      printComparison(comparison, flags.json === true);
    });
}

/** `--compare v1,v2` (each may carry `:<adapter>`) as two targets of `model`. */
function compareTargets(model: string, list: string): [string, string] {
  const parts = list.split(",").map((s) => s.trim());
  if (parts.length !== 2 || parts.some((p) => !new RegExp(`^${NAME_PART}(?::${NAME_PART})?$`).test(p)))
    throw new CliError(`--compare ${list}: expected two versions, e.g. v1,v2 (or v1,v1:my-adapter)`, 2);
  return [`${model}@${parts[0]}`, `${model}@${parts[1]}`];
}

/** A local file is uploaded (as /v1/files, purpose batch); anything else is the gateway's to read. */
async function datasetId(api: ApiClient, dataset: string, quiet: boolean): Promise<string> {
  if (/^file-[A-Za-z0-9]+$/.test(dataset) || /^(s3|https?):\/\//i.test(dataset)) return dataset;
  const path = dataset.startsWith("file://") ? new URL(dataset).pathname : resolve(dataset);
  if (!existsSync(path) || !statSync(path).isFile()) {
    if (dataset.startsWith("file://") || dataset.startsWith("/")) return dataset; // a path on the gateway's side
    throw new CliError(`--dataset ${dataset}: no such file`, 2);
  }
  if (!quiet) process.stderr.write(`uploading ${dataset}...\n`);
  const form = new FormData();
  form.set("purpose", "batch");
  form.set("file", await openAsBlob(path), basename(path));
  const res = await api.send("POST", "/v1/files", { body: form });
  if (!res.ok) {
    const err = ((await res.json().catch(() => ({}))) as { error?: { message?: string } }).error;
    throw new CliError(`--dataset ${dataset}: upload failed: ${err?.message ?? `HTTP ${res.status}`}`);
  }
  return ((await res.json()) as { id: string }).id;
}

/**
 * Creates an evaluation of each target and waits for them all. A version no endpoint serves (the
 * 409) gets a temporary endpoint unless `deploy` is false; the evaluations on one are cancelled
 * when the run fails or is interrupted, as their endpoint goes with it.
 */
async function evaluateAll(
  api: ApiClient,
  model: string,
  requests: { model: string }[],
  deploy: boolean,
  quiet: boolean,
): Promise<Evaluation[]> {
  const progress = new Progress();
  let temporary: TemporaryEndpoints | undefined;
  /** `<model>@<version>` of each version served by a temporary endpoint of this run. */
  const onTemporary = new Set<string>();
  const created: Evaluation[] = [];
  try {
    for (const request of requests) {
      const evaluation = await api.request<Evaluation>("POST", "/admin/v1/evaluations", request).catch(async (e) => {
        if (!deploy || !(e instanceof CliError) || !/\(model_not_deployed\)$/.test(e.message)) throw e;
        temporary ??= new TemporaryEndpoints(api, progress, {
          purpose: "evaluation",
          interruption: "interrupted: the evaluations on temporary endpoints were cancelled",
        });
        // `<model>@<version>[:<adapter>]`: an adapter is served by its base's endpoint.
        const version = (request.model.split(":")[0] as string).split("@")[1] as string;
        onTemporary.add(`${model}@${await deployFor(api, temporary, model, version, e, progress)}`);
        return api.request<Evaluation>("POST", "/admin/v1/evaluations", request);
      });
      created.push(evaluation);
    }
    return await waitFor(api, created, quiet, progress, temporary?.signal);
  } catch (e) {
    for (const c of created)
      if (onTemporary.has(`${c.base.name}@${c.base.version}`))
        await api.request("POST", `/admin/v1/evaluations/${encodeURIComponent(c.id)}/cancel`).catch(() => undefined);
    throw temporary?.signal.aborted ? temporary.signal.reason : e;
  } finally {
    progress.done();
    await temporary?.close();
  }
}

/**
 * Deploys `<model>--eval-<version>` for a version no endpoint serves (`refusal`, the 409), with the
 * settings of the endpoint serving the model's other version when there is one (so the numbers
 * come from the same engine settings, e.g. dtype), else the defaults; one replica. Its version, resolved.
 */
async function deployFor(
  api: ApiClient,
  temporary: TemporaryEndpoints,
  model: string,
  version: string,
  refusal: CliError,
  progress: Progress,
): Promise<string> {
  let endpoints: EndpointInfo[];
  try {
    endpoints = (await api.request<{ data: EndpointInfo[] }>("GET", "/admin/v1/endpoints")).data;
  } catch (e) {
    if (e instanceof CliError && /\(permission_denied\)$/.test(e.message))
      throw new CliError(`${refusal.message}; deploying a temporary endpoint for it takes an admin key: ${e.message}`);
    throw e;
  }
  const ofModel = endpoints.filter((e) => e.config.model.name === model);
  const like =
    ofModel.find((e) => e.endpoint === model) ??
    ofModel.find((e) => e.variant_of === undefined && !/--(bench|eval)-/.test(e.endpoint)) ??
    ofModel[0];
  const name = temporaryName(model, "eval", version);
  const settings = like ? (({ autoscaling: _autoscaling, ...config }) => config)(like.config) : undefined;
  const config: DeploymentConfig & { endpoint: string } = {
    endpoint: name,
    model: { ...settings?.model, name: model, version },
    runtime: settings?.runtime ?? {},
    resources: { ...(settings?.resources ?? { parallel: 4 }), replicas: 1 },
  };
  progress.line(
    `no endpoint serves ${model}@${version}: deploying the temporary endpoint ${name}; it is removed at the end (${like ? `${like.endpoint}'s settings` : "default settings"}, 1 replica)`,
  );
  return (await temporary.deploy(config, "")).version;
}

async function waitFor(
  api: ApiClient,
  jobs: Evaluation[],
  quiet: boolean,
  progress: Progress,
  signal?: AbortSignal,
): Promise<Evaluation[]> {
  let current = jobs;
  let shown = "";
  for (;;) {
    current = await Promise.all(
      current.map((e) => api.request<Evaluation>("GET", `/admin/v1/evaluations/${encodeURIComponent(e.id)}`)),
    );
    const line = current.map((e) => `${e.model} ${e.metric}: ${e.state} ${e.done}/${e.items}`).join(" · ");
    const final = current.every((e) => ["succeeded", "failed", "cancelled"].includes(e.state));
    // On a terminal one line redrawn, kept at the end; elsewhere a line per change.
    if (!quiet && process.stderr.isTTY) {
      if (final) progress.line(line);
      else if (line !== shown) progress.status(line);
    } else if (!quiet && line !== shown) progress.line(line);
    shown = line;
    if (final) return current;
    await sleep(500, undefined, signal ? { signal } : undefined);
  }
}

const fmt = (v: number | null | undefined) =>
  v === null || v === undefined
    ? "-"
    : Math.abs(v) >= 1e6 || (v !== 0 && Math.abs(v) < 1e-4)
      ? v.toExponential(4)
      : v.toFixed(4);

function printOne(e: Evaluation, json: boolean): void {
  const r = e.result as NonNullable<Evaluation["result"]>;
  if (json) {
    printJson({ metric: r.metric, value: r.value, n: r.n, stderr: r.stderr });
    return;
  }
  printTable(
    ["MODEL", "METRIC", "VALUE", "STDERR", "N", "DATASET", "JOB"],
    [[e.model, r.metric, fmt(r.value), fmt(r.stderr), r.n, e.dataset_sha256.slice(0, 12), e.id]],
  );
}

function printComparison(c: Comparison, json: boolean): void {
  const ra = c.a.result as NonNullable<Evaluation["result"]>;
  const rb = c.b.result as NonNullable<Evaluation["result"]>;
  if (json) {
    printJson({
      metric: ra.metric,
      a: { model: c.a.model, value: ra.value, n: ra.n, stderr: ra.stderr },
      b: { model: c.b.model, value: rb.value, n: rb.n, stderr: rb.stderr },
      difference: c.difference,
      stderr: c.stderr,
      ci95: c.ci95,
      method: c.method,
    });
    return;
  }
  printTable(
    ["MODEL", "METRIC", "VALUE", "STDERR", "N"],
    [
      [c.a.model, ra.metric, fmt(ra.value), fmt(ra.stderr), ra.n],
      [c.b.model, rb.metric, fmt(rb.value), fmt(rb.stderr), rb.n],
    ],
  );
  const ci = c.ci95 ? `[${fmt(c.ci95[0])}, ${fmt(c.ci95[1])}]` : "-";
  console.log(
    `difference (${c.b.model} − ${c.a.model}): ${fmt(c.difference)}, 95% CI ${ci} (${c.method === "paired" ? "paired per item: same dataset" : "unpaired: from the two standard errors"})`,
  );
}
