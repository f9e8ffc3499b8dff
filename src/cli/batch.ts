/**
 * `platform inference batch`: submit a batch job (the default subcommand, so
 * `platform inference batch --model ... --input ... --output ...` works), and
 * `batch status|cancel|list`. Talks to /v1/batch-jobs on the gateway.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { Command } from "commander";
import type { BatchJobList, BatchJobRecord, CreateBatchRequestInput } from "../contracts/batch.ts";
import { FINAL_BATCH_STATES } from "../contracts/batch.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./credentials.ts";
import { printJson, printTable } from "./output.ts";

type SubmitFlags = {
  model: string;
  version: string;
  input: string;
  output: string;
  concurrency: string;
  batchSize: string;
  temperature?: string;
  watch?: boolean;
  json?: boolean;
};

const POLL_MS = 1000;

export function registerBatch(inference: Command): void {
  const batch = inference.command("batch").description("batch inference: JSONL in object storage (path, file:// or s3://) through a deployed model");

  batch
    .command("submit", { isDefault: true })
    .description("submit a batch job and print its id (the default: `platform inference batch --model ...`)")
    .requiredOption("--model <name>", "registered model name (an endpoint must serve the version)")
    .option("--version <version>", "model version or latest", "latest")
    .requiredOption("--input <uri>", 'JSONL input object; each line {"id", "prompt", "max_tokens"}')
    .requiredOption("--output <uri>", "a prefix or directory (receives <job id>.jsonl) or an object URI ending in .jsonl")
    .option("--concurrency <n>", "records of this job in flight at once", "8")
    .option("--batch-size <n>", "records per checkpoint", "100")
    .option("--temperature <t>", "sampling temperature for every record (0: deterministic)")
    .option("--watch", "follow the job with a progress bar until it ends")
    .option("--json", "print the job record as JSON")
    .action(async (flags: SubmitFlags) => {
      const body: CreateBatchRequestInput = {
        model: flags.model,
        version: flags.version,
        input: absoluteUri(flags.input),
        output: absoluteUri(flags.output),
        concurrency: integer("--concurrency", flags.concurrency),
        batch_size: integer("--batch-size", flags.batchSize),
        ...(flags.temperature !== undefined ? { temperature: number("--temperature", flags.temperature) } : {}),
      };
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJobRecord>("POST", "/v1/batch-jobs", body);
      if (flags.watch) return watch(api, job, flags.json === true);
      if (flags.json) return printJson(job);
      console.log(job.id);
      if (process.stdout.isTTY) console.error(`follow it with \`platform inference batch status ${job.id}\``);
    });

  batch
    .command("status <job_id>")
    .description("state, counts, throughput, output location and errors of a batch job")
    .option("--json", "print JSON")
    .option("--watch", "follow the job with a progress bar until it ends")
    .action(async (id: string, opts: { json?: boolean; watch?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJobRecord>("GET", `/v1/batch-jobs/${encodeURIComponent(id)}`);
      if (opts.watch) return watch(api, job, opts.json === true);
      if (opts.json) return printJson(job);
      printStatus(job);
    });

  batch
    .command("cancel <job_id>")
    .description("cancel a queued or running batch job (written batches become a partial output)")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJobRecord>("POST", `/v1/batch-jobs/${encodeURIComponent(id)}/cancel`);
      if (opts.json) return printJson(job);
      console.log(`${job.id}: ${job.state}`);
    });

  batch
    .command("list")
    .description("batch jobs, newest first")
    .option("--limit <n>", "how many", "20")
    .option("--json", "print JSON")
    .action(async (opts: { limit: string; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const list = await api.request<BatchJobList>("GET", `/v1/batch-jobs?limit=${integer("--limit", opts.limit)}`);
      if (opts.json) return printJson(list);
      printTable(
        ["JOB", "STATE", "MODEL", "DONE/TOTAL", "FAILED", "CREATED"],
        list.data.map((j) => [j.id, j.state, `${j.model}@${j.resolved_version ?? j.version}`, `${done(j)}/${j.counts.total}`, j.counts.failed, new Date(j.created).toISOString()]),
      );
    });
}

/** Relative paths mean this machine's working directory, which the gateway cannot know. */
function absoluteUri(uri: string): string {
  if (/^[a-z][a-z0-9+.-]+:/i.test(uri)) return uri;
  const url = pathToFileURL(resolve(uri)).href;
  return uri.endsWith("/") && !url.endsWith("/") ? `${url}/` : url;
}

function done(job: BatchJobRecord): number {
  return job.counts.succeeded + job.counts.failed;
}

function printStatus(job: BatchJobRecord): void {
  const rows: [string, string][] = [
    ["job", job.id],
    ["state", job.state],
    ["model", `${job.model}@${job.resolved_version ?? job.version}${job.resolved_version && job.version !== job.resolved_version ? ` (${job.version})` : ""}`],
    ["records", `${done(job)}/${job.counts.total} done: ${job.counts.succeeded} succeeded, ${job.counts.failed} failed, ${job.counts.in_flight} in flight`],
  ];
  if (job.throughput) {
    rows.push(["throughput", `${job.throughput.records_per_second} records/s, ${job.throughput.tokens_per_second} tokens/s${eta(job) ? `, ETA ${eta(job)}` : ""}`]);
  }
  rows.push(["input", job.input], ["output", job.output_file ?? `${job.output} (written when the job completes)`]);
  rows.push(["concurrency", `${job.concurrency} records in flight, checkpoint every ${job.batch_size} records`]);
  if (job.error) rows.push(["error", `${job.error.message} (${job.error.code})`]);
  rows.push(["created", new Date(job.created).toISOString()]);
  if (job.started) rows.push(["started", new Date(job.started).toISOString()]);
  if (job.finished) rows.push(["finished", `${new Date(job.finished).toISOString()} (${formatSeconds((job.finished - (job.started ?? job.created)) / 1000)})`]);
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
}

function eta(job: BatchJobRecord): string | undefined {
  const rate = job.throughput?.records_per_second ?? 0;
  if (rate <= 0 || job.counts.total === 0) return undefined;
  return formatSeconds((job.counts.total - done(job)) / rate);
}

function formatSeconds(s: number): string {
  if (s < 60) return `${Math.ceil(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.ceil(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

function progressLine(job: BatchJobRecord, bar: boolean): string {
  const total = job.counts.total;
  const finished = done(job);
  const parts: string[] = [];
  if (bar && total > 0) {
    const width = 30;
    const filled = Math.round((finished / total) * width);
    parts.push(`[${"#".repeat(filled)}${"-".repeat(width - filled)}]`);
  }
  parts.push(`${finished}/${total || "?"} done`, `${job.counts.failed} failed`);
  if (job.throughput) parts.push(`${job.throughput.records_per_second} rec/s`);
  const left = eta(job);
  if (left && job.state === "running") parts.push(`ETA ${left}`);
  parts.push(job.state);
  return parts.join("  ");
}

/** Follows the job until it ends; exits non-zero unless it completed. */
async function watch(api: ApiClient, first: BatchJobRecord, json: boolean): Promise<void> {
  const tty = process.stderr.isTTY === true && !json;
  let job = first;
  let lastPrinted = 0;
  if (!json) console.log(job.id);
  for (;;) {
    if (!json) {
      if (tty) process.stderr.write(`\r\x1b[2K${progressLine(job, true)}`);
      else if (Date.now() - lastPrinted >= 5000 || FINAL_BATCH_STATES.includes(job.state)) {
        console.error(progressLine(job, false));
        lastPrinted = Date.now();
      }
    }
    if (FINAL_BATCH_STATES.includes(job.state)) break;
    await new Promise((r) => setTimeout(r, POLL_MS));
    job = await api.request<BatchJobRecord>("GET", `/v1/batch-jobs/${encodeURIComponent(job.id)}`);
  }
  if (tty) process.stderr.write("\n");
  if (json) printJson(job);
  else if (job.output_file) console.log(`output: ${job.output_file}`);
  if (job.state !== "completed") {
    throw new CliError(`batch job ${job.id} ${job.state}${job.error ? `: ${job.error.message} (${job.error.code})` : ""}`);
  }
}

function integer(flag: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new CliError(`${flag}: expected a positive integer, got "${value}"`, 2);
  return n;
}

function number(flag: string, value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new CliError(`${flag}: expected a number, got "${value}"`, 2);
  return n;
}
