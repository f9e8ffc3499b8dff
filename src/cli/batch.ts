/**
 * `platform inference batch`: submit a batch job (the default subcommand, so
 * `platform inference batch --model ... --input ... --output ...` works), and
 * `batch status|cancel|list`. Talks to /v1/batch-jobs on the gateway.
 */
import { existsSync } from "node:fs";
import type { Command } from "commander";
import type { BatchJob, BatchJobList, CreateBatchRequestInput } from "../batch/record.ts";
import { loadCliSettings } from "../settings/cli.ts";
import {
  absoluteUri,
  downloadOutput,
  downloadTarget,
  localPath,
  notShared,
  uploadInput,
  uploadMode,
} from "./batch-files.ts";
import { done, finishWatch, printStatus, watch } from "./batch-watch.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { realNumber, wholeNumber } from "./common/flags.ts";
import { printJson, printTable } from "./common/output.ts";

type SubmitFlags = {
  model: string;
  version: string;
  input: string;
  output: string;
  concurrency: number;
  batchSize: number;
  temperature?: number;
  overwrite?: boolean;
  upload?: string;
  watch?: boolean;
  json?: boolean;
};

/**
 * Where the server writes a local --output it cannot reach when the input is
 * not uploaded (it names storage the server reads): a prefix in the key's own
 * area. With an uploaded input no output is sent and the server keeps the result.
 */
const REMOTE_OUTPUT_PREFIX = "cli-outputs/";

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
    .requiredOption(
      "--input <uri>",
      'JSONL input object; each line {"id", "prompt", "max_tokens"}, or for an image model {"id", "prompt", "size", "seed", ...} (one PNG per line beside the result: docs/batch.md)',
    )
    .requiredOption(
      "--output <uri>",
      "a prefix or directory (receives <job id>.jsonl) or an object URI ending in .jsonl",
    )
    .option("--concurrency <n>", "records of this job in flight at once", wholeNumber(1), 8)
    .option("--batch-size <n>", "records per checkpoint", wholeNumber(1), 100)
    .option("--temperature <t>", "sampling temperature for every record (0: deterministic)", realNumber())
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
      const { concurrency, batchSize, temperature } = flags;
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
          const to = downloadTarget(job.id, download);
          const images = await downloadOutput(api, job.id, to, flags.overwrite === true);
          if (!flags.json) console.log(`output: ${to}${images ? `\nimages: ${images}` : ""}`);
        }
        return finishWatch(ended);
      }
      if (flags.json) return printJson(job);
      console.log(job.id);
      if (download)
        console.error(
          `the gateway keeps the result; fetch it when the job ends with \`platform inference batch download ${job.id} --to ${/\.jsonl$/i.test(download) ? download : `${download}/`}\``,
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
    .option(
      "--to <path>",
      "the file to write (a name ending in .jsonl), or a directory for <job id>.jsonl, as --output reads it (default ./<job id>.jsonl); an image job's PNGs go beside it",
    )
    .option("--overwrite", "replace the file if it exists (without it an existing file is refused)")
    .action(async (id: string, opts: { to?: string; overwrite?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const to = downloadTarget(id, opts.to);
      const images = await downloadOutput(api, id, to, opts.overwrite === true);
      console.log(to);
      if (images) console.log(images);
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
    .option("--limit <n>", "how many", wholeNumber(1), 20)
    .option("--json", "print JSON")
    .action(async (opts: { limit: number; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const list = await api.request<BatchJobList>("GET", `/v1/batch-jobs?limit=${opts.limit}`);
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
