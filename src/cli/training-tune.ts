/**
 * `platform training submit --dataset`: a fine-tuning job (docs/fine-tuning.md). A local dataset is
 * uploaded through /v1/files (purpose "fine-tune"), so a remote gateway sees it; a URI is passed as
 * it is and confined by the gateway as batch inputs are. `--watch` follows the job's events (the
 * loss as it trains) until it ends, and exits non-zero unless it succeeded.
 */
import { existsSync, statSync } from "node:fs";
import { BASE_LEARNING_RATE, type FineTuneEvent, type FineTuningJob } from "../finetuning/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson } from "./common/output.ts";
import { uploadFile } from "./common/upload.ts";

/** `training submit`'s flags, as commander hands them over. */
export type SubmitOptions = {
  name: string;
  framework: string;
  source?: string;
  version?: string;
  task?: string;
  base?: string;
  dataset?: string;
  validation?: string;
  method: string;
  epochs?: number;
  learningRate?: number;
  loraRank?: number;
  loraAlpha?: number;
  seed?: number;
  watch?: boolean;
  json?: boolean;
};

export async function submitFineTune(opts: SubmitOptions): Promise<void> {
  if (!opts.base)
    throw new CliError("--base <model>@<version> is required with --dataset: the version to fine-tune", 2);
  if (opts.method !== "lora" && opts.method !== "full")
    throw new CliError(`--method: expected lora or full, got "${opts.method}"`, 2);
  const method = opts.method;
  const { epochs, loraRank: rank, seed, loraAlpha: alpha, learningRate: rate } = opts;
  if (method === "full" && (rank !== undefined || alpha !== undefined))
    throw new CliError("--lora-rank and --lora-alpha apply to --method lora only", 2);
  const api = await ApiClient.fromCredentials();
  const training = await datasetRef(api, "--dataset", opts.dataset as string, opts.json === true);
  const validation = opts.validation
    ? await datasetRef(api, "--validation", opts.validation, opts.json === true)
    : undefined;
  const hyperparameters = {
    ...(epochs !== undefined ? { n_epochs: epochs } : {}),
    ...(rate !== undefined ? { learning_rate_multiplier: rate / BASE_LEARNING_RATE[method] } : {}),
  };
  const job = await api.request<FineTuningJob>("POST", "/v1/fine_tuning/jobs", {
    model: opts.base,
    training_file: training,
    ...(validation ? { validation_file: validation } : {}),
    suffix: opts.name,
    ...(seed !== undefined ? { seed } : {}),
    hyperparameters,
    method: {
      type: "supervised",
      training: method,
      ...(method === "lora"
        ? { lora: { ...(rank !== undefined ? { rank } : {}), ...(alpha !== undefined ? { alpha } : {}) } }
        : {}),
    },
  });
  if (opts.json && !opts.watch) return printJson(job);
  if (!opts.json) {
    // The name the result is registered under: in the organization's namespace (`<org>.<name>`).
    const name = job.user_provided_suffix ?? opts.name;
    console.log(
      `fine-tuning job ${job.id} ${job.status}: ${job.model} → ${method === "lora" ? `adapter ${name}` : `model ${name}`} (${method}, ${job.hyperparameters.n_epochs} epochs, seed ${job.seed})`,
    );
    if (!opts.watch) console.log(`follow it: platform training jobs events ${job.id} --follow`);
  }
  if (opts.watch) {
    const ended = await followEvents(api, job.id, opts.json === true);
    if (opts.json) printJson(ended);
    if (ended.status !== "succeeded")
      throw new CliError(
        `fine-tuning job ${job.id} ${ended.status}${ended.error ? `: ${ended.error.message} (${ended.error.code})` : ""}`,
      );
  }
}

/** Prints the job's events as they come (oldest first) until it ends; returns the ended job. */
export async function followEvents(api: ApiClient, id: string, quiet: boolean): Promise<FineTuningJob> {
  const path = `/v1/fine_tuning/jobs/${encodeURIComponent(id)}`;
  let newest: string | undefined; // the last event printed
  for (;;) {
    const job = await api.request<FineTuningJob>("GET", path);
    const fresh = await eventsSince(api, path, newest);
    if (!quiet) for (const e of fresh) console.log(formatEvent(e));
    newest = fresh.at(-1)?.id ?? newest;
    if (job.status === "succeeded" || job.status === "failed" || job.status === "cancelled") {
      if (!quiet)
        console.log(
          job.status === "succeeded"
            ? `succeeded: ${job.fine_tuned_model} (${job.result_version}), ${job.trained_tokens} trained tokens`
            : `${job.status}${job.error ? `: ${job.error.message}` : ""}`,
        );
      return job;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * The events after `since` (none: all of them), oldest first, paging back from the newest until it:
 * more than a page comes between two polls of a fast run, and all at once when following a job
 * that has already ended. Bounded by the job's capped event stream.
 */
async function eventsSince(api: ApiClient, path: string, since: string | undefined): Promise<FineTuneEvent[]> {
  const out: FineTuneEvent[] = [];
  for (let after = ""; ; ) {
    const page = await api.request<{ data: FineTuneEvent[]; has_more: boolean }>(
      "GET",
      `${path}/events?limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`,
    );
    for (const e of page.data) {
      if (e.id === since) return out.reverse();
      out.push(e);
    }
    const last = page.data.at(-1);
    if (!page.has_more || !last) return out.reverse();
    after = last.id;
  }
}

export function formatEvent(e: FineTuneEvent): string {
  const at = new Date(e.created_at * 1000).toISOString().slice(11, 19);
  return `${at} ${e.level === "info" ? "" : `${e.level.toUpperCase()} `}${e.message}`;
}

/** A local file is uploaded (its file id is returned); anything else is a storage URI the gateway reads. */
async function datasetRef(api: ApiClient, flag: string, given: string, quiet: boolean): Promise<string> {
  if (/^file-[0-9a-f]{24}$/.test(given)) return given;
  if (/^[a-z][a-z0-9+.-]+:\/\//i.test(given) && !/^file:/i.test(given)) return given;
  const path = /^file:/i.test(given) ? new URL(given).pathname : given;
  if (!existsSync(path)) throw new CliError(`${flag} ${given}: no such file`, 2);
  if (!statSync(path).isFile()) throw new CliError(`${flag} ${given}: not a file (give the JSONL file)`, 2);
  if (!quiet) process.stderr.write(`uploading ${given}...\n`);
  return uploadFile(api, path, "fine-tune", flag);
}
