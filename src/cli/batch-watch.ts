/**
 * How `platform inference batch` shows a job: its status, and a job followed until it ends
 * (`--watch`) on the one progress display.
 */
import type { BatchJob } from "../batch/record.ts";
import { FINAL_BATCH_STATES, KEPT_OUTPUT } from "../batch/record.ts";
import type { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson } from "./common/output.ts";
import { bar, Progress } from "./common/progress.ts";

const POLL_MS = 1000;

export function done(job: BatchJob): number {
  return job.counts.succeeded + job.counts.failed;
}

export function printStatus(job: BatchJob): void {
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

export function keptLine(job: BatchJob): string {
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

function progressLine(job: BatchJob, withBar: boolean): string {
  const total = job.counts.total;
  const finished = done(job);
  const parts: string[] = [];
  if (withBar && total > 0) parts.push(bar(finished / total, 30));
  parts.push(`${finished}/${total || "?"} done`, `${job.counts.failed} failed`);
  if (job.throughput) parts.push(`${job.throughput.records_per_second} rec/s`);
  const left = eta(job);
  if (left && job.state === "running") parts.push(`ETA ${left}`);
  parts.push(job.state);
  return parts.join("  ");
}

/** Follows the job until it ends and returns it; finishWatch then exits non-zero unless it completed. */
export async function watch(api: ApiClient, first: BatchJob, json: boolean, showOutput = true): Promise<BatchJob> {
  const progress = new Progress();
  let job = first;
  if (!json) console.log(job.id);
  for (;;) {
    const final = FINAL_BATCH_STATES.includes(job.state);
    // The last state stays: on a terminal the bar as it ended.
    if (!json) {
      const line = progressLine(job, progress.tty);
      if (final) progress.line(line);
      else progress.status(line);
    }
    if (final) break;
    await new Promise((r) => setTimeout(r, POLL_MS));
    job = await api.request<BatchJob>("GET", `/v1/batch-jobs/${encodeURIComponent(job.id)}`);
  }
  if (json) printJson(job);
  else if (job.output_file && showOutput) console.log(`output: ${job.output_file}`);
  return job;
}

export function finishWatch(job: BatchJob): void {
  if (job.state !== "completed") {
    const kept = job.partial ? `\n${keptLine(job)}` : "";
    throw new CliError(
      `batch job ${job.id} ${job.state}${job.error ? `: ${job.error.message} (${job.error.code})` : ""}${kept}`,
    );
  }
}
