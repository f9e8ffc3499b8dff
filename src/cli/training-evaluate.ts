/**
 * `platform training evaluate`: evaluation jobs on model versions and adapters (docs/evaluation.md).
 * A version no endpoint serves is evaluated on a temporary endpoint `<model>--eval-<version>`,
 * deployed for the run and removed at its end, on failure and on Ctrl-C (src/evaluation/client.ts).
 */
import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { NAME_PART } from "../contracts/deployment.ts";
import { PlatformError } from "../contracts/errors.ts";
import type { PublicEvaluation } from "../evaluation/jobs.ts";
import type { Comparison } from "../evaluation/metrics.ts";
import { taskDataset } from "../evaluation/lm-eval-task.ts";
import { Metric } from "../evaluation/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";
import { printJson, printTable } from "./common/output.ts";
import { Progress } from "./common/progress.ts";
import { uploadFile } from "./common/upload.ts";

type Evaluation = PublicEvaluation;
type Compared = { a: Evaluation; b: Evaluation } & Comparison;

type Flags = {
  dataset?: string;
  metric?: string;
  task?: string;
  json?: boolean;
  compare?: string;
  maxTokens?: number;
  /** false with --no-deploy. */
  deploy: boolean;
};

const METRICS: readonly string[] = Metric.options;
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
    .option("--max-tokens <n>", "exact_match: the most tokens generated per answer (default 256)", wholeNumber(1, 4096))
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
      const maxTokens = flags.maxTokens;
      const model = m[1] as string;
      const targets = flags.compare === undefined ? [target] : compareTargets(model, flags.compare);
      if (flags.compare === undefined && m[2] === undefined)
        throw new CliError(`${target}: name the version, e.g. ${model}@v1 (or pass --compare v1,v2)`, 2);
      const api = await ApiClient.fromCredentials();
      const task =
        flags.task === undefined
          ? undefined
          : await taskDataset(flags.task).catch((e: unknown) => {
              throw e instanceof PlatformError ? new CliError(`--task ${e.message}`, 2) : e;
            });
      const dataset = await datasetId(api, task?.path ?? (flags.dataset as string), flags.json === true);
      const metric = flags.metric ?? task?.metric;
      const body = (t: string) => ({
        model: t,
        dataset,
        ...(metric ? { metric } : {}),
        ...(maxTokens ? { max_tokens: maxTokens } : {}),
      });
      const finished = await evaluate(api, model, targets.map(body), flags);
      const failed = finished.find((e) => e.state !== "succeeded");
      if (failed)
        throw new CliError(
          `evaluation ${failed.id} of ${failed.model} ${failed.state}${failed.error ? `: ${failed.error.message}` : ""}`,
        );
      if (finished.length === 1) return printOne(finished[0] as Evaluation, flags.json === true);
      const [a, b] = finished as [Evaluation, Evaluation];
      const comparison = await api.request<Compared>(
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
  return uploadFile(api, path, "batch", `--dataset ${dataset}`);
}

/** Runs them (src/evaluation/client.ts), showing their progress on stderr unless --json. */
async function evaluate(
  api: ApiClient,
  model: string,
  requests: { model: string }[],
  flags: Flags,
): Promise<Evaluation[]> {
  const { evaluateAll } = await import("../evaluation/client.ts");
  const progress = new Progress();
  const quiet = flags.json === true;
  let shown = "";
  try {
    return await evaluateAll(api, model, requests, {
      deploy: flags.deploy,
      progress,
      interruption: new CliError("interrupted: the evaluations on temporary endpoints were cancelled", 130),
      onUpdate: (current, final) => {
        const line = current.map((e) => `${e.model} ${e.metric}: ${e.state} ${e.done}/${e.items}`).join(" · ");
        // On a terminal one line redrawn, kept at the end; elsewhere a line per change.
        if (!quiet && process.stderr.isTTY) {
          if (final) progress.line(line);
          else if (line !== shown) progress.status(line);
        } else if (!quiet && line !== shown) progress.line(line);
        shown = line;
      },
    });
  } finally {
    progress.done();
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

function printComparison(c: Compared, json: boolean): void {
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
