/**
 * `platform inference batch`: submit a batch job (the default subcommand, so
 * `platform inference batch --model ... --input ... --output ...` works), and
 * `batch status|cancel|list`. Talks to /v1/batch-jobs on the gateway.
 */
import { existsSync, openAsBlob, realpathSync } from "node:fs";
import { basename, dirname, join, resolve, sep } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { Command } from "commander";
import type { BatchJobList, BatchJob, CreateBatchRequestInput } from "../batch/schema.ts";
import { FINAL_BATCH_STATES, KEPT_OUTPUT } from "../batch/schema.ts";
import { isStorageError } from "../storage/errors.ts";
import { writeFileAtomically } from "../storage/shared.ts";
import { loadCliSettings } from "../settings/cli.ts";
import { fileUrl } from "../storage/uri.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { printJson, printTable } from "./output.ts";

type SubmitFlags = {
  model: string;
  version: string;
  input: string;
  output: string;
  concurrency: string;
  batchSize: string;
  temperature?: string;
  overwrite?: boolean;
  upload?: string;
  watch?: boolean;
  json?: boolean;
};

type UploadMode = "auto" | "always" | "never";

/**
 * Where the server writes a local --output it cannot reach when the input is
 * not uploaded (it names storage the server reads): a prefix in the key's own
 * area. With an uploaded input no output is sent and the server keeps the result.
 */
const REMOTE_OUTPUT_PREFIX = "cli-outputs/";

const POLL_MS = 1000;

export function registerBatch(inference: Command): void {
  const batch = inference
    .command("batch")
    .description("batch inference: JSONL in object storage (path, file:// or s3://) through a deployed model");

  batch
    .command("submit", { isDefault: true })
    .description("submit a batch job and print its id (the default: `platform inference batch --model ...`)")
    .requiredOption(
      "--model <name>",
      "registered model name (an endpoint must serve the version), or <endpoint>:<adapter> for a LoRA adapter of the endpoint's version",
    )
    .option("--version <version>", "model version or latest (with <endpoint>:<adapter>: leave it out)", "latest")
    .requiredOption("--input <uri>", 'JSONL input object; each line {"id", "prompt", "max_tokens"}')
    .requiredOption(
      "--output <uri>",
      "a prefix or directory (receives <job id>.jsonl) or an object URI ending in .jsonl",
    )
    .option("--concurrency <n>", "records of this job in flight at once", "8")
    .option("--batch-size <n>", "records per checkpoint", "100")
    .option("--temperature <t>", "sampling temperature for every record (0: deterministic)")
    .option(
      "--overwrite",
      "replace an existing output object, or local file when the result is downloaded (without it the job, or the download, is refused)",
    )
    .option(
      "--upload <mode>",
      "auto (default; env PLATFORM_CLI_UPLOAD): upload a local --input and fetch a local --output when the gateway cannot reach them; always; never",
    )
    .option("--watch", "follow the job with a progress bar until it ends")
    .option("--json", "print the job record as JSON")
    .action(async (flags: SubmitFlags) => {
      const concurrency = integer("--concurrency", flags.concurrency);
      const batchSize = integer("--batch-size", flags.batchSize);
      const temperature = flags.temperature !== undefined ? number("--temperature", flags.temperature) : undefined;
      const cli = loadCliSettings();
      const mode = uploadMode(flags.upload ?? cli.upload);
      const api = await ApiClient.fromCredentials();
      const localInput = localPath(flags.input);
      const localOutput = localPath(flags.output);
      const remote =
        (localInput !== undefined || localOutput !== undefined) &&
        (await notShared(api, mode, [localInput, localOutput]));
      // A local result is written only when the job has ended: refuse now rather than after the work.
      const download = remote && localOutput !== undefined ? localOutput : undefined;
      if (download && /\.jsonl$/i.test(download) && existsSync(download) && !flags.overwrite) {
        throw new CliError(
          `--output ${flags.output}: the file exists; pass --overwrite to replace it, or choose another name`,
          2,
        );
      }
      const uploaded =
        remote && localInput !== undefined ? await uploadInput(api, localInput, flags.json === true) : undefined;
      // An uploaded input's result is kept by the server (no storage root needed), and fetched from there.
      const output = download
        ? uploaded !== undefined
          ? {}
          : { output: REMOTE_OUTPUT_PREFIX }
        : { output: absoluteUri(flags.output) };
      const body: CreateBatchRequestInput = {
        model: flags.model,
        version: flags.version,
        ...(uploaded !== undefined ? { input_file_id: uploaded } : { input: absoluteUri(flags.input) }),
        ...output,
        concurrency,
        batch_size: batchSize,
        ...(flags.overwrite ? { overwrite: true } : {}),
        ...(temperature !== undefined ? { temperature } : {}),
      };
      const job = await api.request<BatchJob>("POST", "/v1/batch-jobs", body);
      if (flags.watch) {
        const ended = await watch(api, job, flags.json === true, download === undefined);
        if (download && ended.state === "completed") {
          const to = /\.jsonl$/i.test(download) ? download : join(download, `${job.id}.jsonl`);
          await downloadOutput(api, job.id, to, flags.overwrite === true);
          if (!flags.json) console.log(`output: ${to}`);
        }
        return finishWatch(ended);
      }
      if (flags.json) return printJson(job);
      console.log(job.id);
      if (download)
        console.error(
          `the gateway keeps the result; fetch it when the job ends with \`platform inference batch download ${job.id} --to ${download}\``,
        );
      else if (process.stdout.isTTY) console.error(`follow it with \`platform inference batch status ${job.id}\``);
    });

  batch
    .command("status <job_id>")
    .description("state, counts, throughput, output location and errors of a batch job")
    .option("--json", "print JSON")
    .option("--watch", "follow the job with a progress bar until it ends")
    .action(async (id: string, opts: { json?: boolean; watch?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJob>("GET", `/v1/batch-jobs/${encodeURIComponent(id)}`);
      if (opts.watch) return finishWatch(await watch(api, job, opts.json === true));
      if (opts.json) return printJson(job);
      printStatus(job);
    });

  batch
    .command("resume <job_id>")
    .description(
      "continue a failed job from its checkpoint once its cause is fixed (completed records are not sent again)",
    )
    .option("--watch", "follow the job until it ends")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { json?: boolean; watch?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJob>("POST", `/v1/batch-jobs/${encodeURIComponent(id)}/resume`);
      if (opts.watch) return finishWatch(await watch(api, job, opts.json === true));
      if (opts.json) return printJson(job);
      console.log(`${job.id}: ${job.state}`);
    });

  batch
    .command("download <job_id>")
    .description("save a job's result (or, for a failed or running job, the records completed so far) to a local file")
    .option("--to <path>", "the file to write (default ./<job id>.jsonl)")
    .option("--overwrite", "replace the file if it exists (without it an existing file is refused)")
    .action(async (id: string, opts: { to?: string; overwrite?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const to = resolve(opts.to ?? `${id}.jsonl`);
      await downloadOutput(api, id, to, opts.overwrite === true);
      console.log(to);
    });

  batch
    .command("cancel <job_id>")
    .description("cancel a queued or running batch job (written batches become a partial output)")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<BatchJob>("POST", `/v1/batch-jobs/${encodeURIComponent(id)}/cancel`);
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
        list.data.map((j) => [
          j.id,
          j.state,
          `${j.model}@${j.resolved_version ?? j.version}${j.adapter ? ` + ${j.adapter}` : ""}`,
          `${done(j)}/${j.counts.total}`,
          j.counts.failed,
          new Date(j.created).toISOString(),
        ]),
      );
    });
}

function uploadMode(value: string | undefined): UploadMode {
  const mode = value ?? "auto";
  if (mode === "auto" || mode === "always" || mode === "never") return mode;
  throw new CliError(`--upload: expected auto, always or never, got "${mode}"`, 2);
}

/** The local file a CLI argument names (plain path or file://), or undefined for s3:// and the like. */
function localPath(uri: string): string | undefined {
  if (/^file:/i.test(uri)) return fileURLToPath(uri);
  if (/^[a-z][a-z0-9+.-]+:/i.test(uri)) return undefined;
  return resolve(uri);
}

/**
 * Whether the gateway cannot use these local paths itself: it runs elsewhere
 * (not on a loopback address), or they lie outside the storage it lets this key use.
 */
async function notShared(api: ApiClient, mode: UploadMode, paths: (string | undefined)[]): Promise<boolean> {
  if (mode !== "auto") return mode === "always";
  const host = new URL(api.baseUrl).hostname.replace(/^\[|\]$/g, "");
  if (!(host === "localhost" || host === "::1" || /^127\./.test(host))) return true;
  const storage = await api.request<{ roots: string[] }>("GET", "/v1/storage").catch(() => undefined);
  if (!storage) return false; // an older gateway: the same-machine flow as before
  const roots = storage.roots.filter((r) => r.startsWith("file:")).map((r) => real(fileURLToPath(r)));
  return paths.some(
    (p) =>
      p !== undefined &&
      !roots.some((root) => real(p) === root || real(p).startsWith(root.endsWith(sep) ? root : `${root}${sep}`)),
  );
}

/** The real path of `path`, or of its nearest existing ancestor with the rest appended. */
function real(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    const parent = dirname(path);
    return parent === path ? path : join(real(parent), basename(path));
  }
}

async function uploadInput(api: ApiClient, path: string, quiet: boolean): Promise<string> {
  if (!existsSync(path)) throw new CliError(`--input ${path}: no such file`, 2);
  if (!quiet) process.stderr.write(`uploading ${path} (the gateway does not share this machine's files)...\n`);
  const form = new FormData();
  form.set("purpose", "batch");
  form.set("file", await openAsBlob(path), basename(path));
  const res = await send(api, "POST", "/v1/files", { body: form });
  return ((await res.json()) as { id: string }).id;
}

/**
 * Streams the job's output into `to` the way the platform writes its own
 * results (a temp file beside it, fsynced, renamed or linked into place, the
 * directory fsynced), so a failed download leaves no half file. Without
 * `overwrite` an existing file is never replaced, even one that appeared
 * while the job ran or the bytes arrived.
 */
async function downloadOutput(api: ApiClient, id: string, to: string, overwrite: boolean): Promise<void> {
  const exists = () =>
    new CliError(
      `${to}: the file exists; pass --overwrite to replace it, or fetch the result elsewhere with \`platform inference batch download ${id} --to <path>\``,
    );
  if (!overwrite && existsSync(to)) throw exists();
  const res = await send(api, "GET", `/v1/batch-jobs/${encodeURIComponent(id)}/output`, {});
  try {
    await writeFileAtomically(to, Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), fileUrl(to), {
      replace: overwrite,
    });
  } catch (e) {
    if (isStorageError(e, "exists")) throw exists();
    throw new CliError(`${to}: cannot write (${(e as Error).message})`);
  }
}

/** A request whose body is not JSON (uploads, downloads); errors as ApiClient reports them. */
async function send(api: ApiClient, method: string, path: string, init: { body?: FormData }): Promise<Response> {
  const res = await api.send(method, path, init);
  if (!res.ok || !res.body) {
    const err = ((await res.json().catch(() => ({}))) as { error?: { message?: string; code?: string } }).error;
    throw new CliError(`${err?.message ?? `HTTP ${res.status}`}${err?.code ? ` (${err.code})` : ""}`);
  }
  return res;
}

/** Relative paths mean this machine's working directory, which the gateway cannot know. */
function absoluteUri(uri: string): string {
  if (/^[a-z][a-z0-9+.-]+:/i.test(uri)) return uri;
  const url = pathToFileURL(resolve(uri)).href;
  return uri.endsWith("/") && !url.endsWith("/") ? `${url}/` : url;
}

function done(job: BatchJob): number {
  return job.counts.succeeded + job.counts.failed;
}

function printStatus(job: BatchJob): void {
  const rows: [string, string][] = [
    ["job", job.id],
    ["state", job.state],
    [
      "model",
      `${job.model}@${job.resolved_version ?? job.version}${job.resolved_version && job.version !== job.resolved_version ? ` (${job.version})` : ""}`,
    ],
    ...(job.adapter ? [["adapter", job.adapter] as [string, string]] : []),
    [
      "records",
      `${done(job)}/${job.counts.total} done: ${job.counts.succeeded} succeeded, ${job.counts.failed} failed, ${job.counts.in_flight} in flight`,
    ],
  ];
  if (job.throughput) {
    rows.push([
      "throughput",
      `${job.throughput.records_per_second} records/s, ${job.throughput.tokens_per_second} tokens/s${eta(job) ? `, ETA ${eta(job)}` : ""}`,
    ]);
  }
  const kept =
    job.output === KEPT_OUTPUT
      ? `; kept by the server: \`platform inference batch download ${job.id}\` fetches it`
      : "";
  rows.push(
    ["input", job.input],
    ["output", `${job.output_file ?? `${job.output} (written when the job completes)`}${kept}`],
  );
  rows.push(["concurrency", `${job.concurrency} records in flight, checkpoint every ${job.batch_size} records`]);
  if (job.error) rows.push(["error", `${job.error.message} (${job.error.code})`]);
  if (job.partial) rows.push(["kept", keptLine(job)]);
  rows.push(["created", new Date(job.created).toISOString()]);
  if (job.started) rows.push(["started", new Date(job.started).toISOString()]);
  if (job.finished)
    rows.push([
      "finished",
      `${new Date(job.finished).toISOString()} (${formatSeconds((job.finished - (job.started ?? job.created)) / 1000)})`,
    ]);
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
}

function keptLine(job: BatchJob): string {
  const partial = job.partial as NonNullable<BatchJob["partial"]>;
  const download = `download with \`platform inference batch download ${job.id} [--to <path>]\``;
  const resume = job.resumable ? `resume with \`platform inference batch resume ${job.id}\`, ` : "";
  return `${partial.records} records completed and kept (${partial.parts_uri}); ${resume}${download}`;
}

function eta(job: BatchJob): string | undefined {
  const rate = job.throughput?.records_per_second ?? 0;
  if (rate <= 0 || job.counts.total === 0) return undefined;
  return formatSeconds((job.counts.total - done(job)) / rate);
}

function formatSeconds(s: number): string {
  if (s < 60) return `${Math.ceil(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.ceil(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

function progressLine(job: BatchJob, bar: boolean): string {
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

/** Follows the job until it ends and returns it; finishWatch then exits non-zero unless it completed. */
async function watch(api: ApiClient, first: BatchJob, json: boolean, showOutput = true): Promise<BatchJob> {
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
    job = await api.request<BatchJob>("GET", `/v1/batch-jobs/${encodeURIComponent(job.id)}`);
  }
  if (tty) process.stderr.write("\n");
  if (json) printJson(job);
  else if (job.output_file && showOutput) console.log(`output: ${job.output_file}`);
  return job;
}

function finishWatch(job: BatchJob): void {
  if (job.state !== "completed") {
    const kept = job.partial ? `\n${keptLine(job)}` : "";
    throw new CliError(
      `batch job ${job.id} ${job.state}${job.error ? `: ${job.error.message} (${job.error.code})` : ""}${kept}`,
    );
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
