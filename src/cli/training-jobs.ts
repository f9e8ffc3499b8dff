/** `platform training jobs list|show|cancel|events`: fine-tuning jobs (docs/fine-tuning.md). */
import type { Command } from "commander";
import type { FineTuneEvent, FineTuningJob } from "../finetuning/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";
import { printJson, printTable } from "./common/output.ts";
import { followEvents, formatEvent } from "./training-tune.ts";

const path = (id: string) => `/v1/fine_tuning/jobs/${encodeURIComponent(id)}`;

export function registerTrainingJobs(training: Command): void {
  const jobs = training.command("jobs").description("fine-tuning jobs: list, show, cancel, follow their events");

  jobs
    .command("list")
    .description("your organization's fine-tuning jobs, newest first")
    .option("--limit <n>", "how many", wholeNumber(1, 100), 20)
    .option("--json", "print JSON")
    .action(async (opts: { limit: number; json?: boolean }) => {
      const { limit } = opts;
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: FineTuningJob[] }>("GET", `/v1/fine_tuning/jobs?limit=${limit}`);
      if (opts.json) return printJson(data);
      if (data.length === 0)
        return console.log(
          "no fine-tuning jobs yet: `platform training submit --name <new> --base <model@version> --dataset <file>`",
        );
      printTable(
        ["ID", "BASE", "METHOD", "STATUS", "RESULT", "TOKENS", "CREATED"],
        data.map((j) => [
          j.id,
          j.model,
          j.method.training,
          // A GPU job with no GPU trainer running waits: say so where the status shows.
          j.waiting_for === "gpu_trainer" ? "queued (waits for a GPU trainer)" : j.status,
          j.fine_tuned_model ?? "-",
          j.trained_tokens ?? "-",
          new Date(j.created_at * 1000).toISOString().replace("T", " ").slice(0, 19),
        ]),
      );
    });

  jobs
    .command("show <id>")
    .description("one job, as JSON")
    .action(async (id: string) => {
      const api = await ApiClient.fromCredentials();
      printJson(await api.request<FineTuningJob>("GET", path(id)));
    });

  jobs
    .command("cancel <id>")
    .description("cancel a queued or running job (its trainer stops at once)")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const job = await api.request<FineTuningJob>("POST", `${path(id)}/cancel`);
      if (opts.json) return printJson(job);
      console.log(`fine-tuning job ${job.id} ${job.status}`);
    });

  jobs
    .command("events <id>")
    .description("a job's events, oldest first (loss per step, validation loss per epoch, checkpoints)")
    .option("--follow", "keep printing until the job ends; exit non-zero unless it succeeded")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { follow?: boolean; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      if (opts.follow) {
        const ended = await followEvents(api, id, opts.json === true);
        if (opts.json) printJson(ended);
        if (ended.status !== "succeeded") throw new CliError(`fine-tuning job ${id} ${ended.status}`);
        return;
      }
      // Newest first, a page at a time (the stream keeps the newest events of a long run).
      const data: FineTuneEvent[] = [];
      for (let after = ""; ; ) {
        const page = await api.request<{ data: FineTuneEvent[]; has_more: boolean }>(
          "GET",
          `${path(id)}/events?limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`,
        );
        data.push(...page.data);
        const last = page.data.at(-1);
        if (!page.has_more || !last) break;
        after = last.id;
      }
      data.reverse();
      if (opts.json) return printJson(data);
      for (const e of data) console.log(formatEvent(e));
    });
}
