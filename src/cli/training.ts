/** `platform training submit|list`: the model catalog. */
import { createReadStream, existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { Transform } from "node:stream";
import type { Command } from "commander";
import { ModelTask, type RegisteredVersion, taskOf } from "../models/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { positiveNumber, wholeNumber } from "./common/flags.ts";
import { formatBytes } from "../contracts/bytes.ts";
import { formatCount, printJson, printTable } from "./common/output.ts";
import { progressReporter } from "./common/progress.ts";
import { SOURCE_SCHEMES } from "../models/sources.ts";
import { checkpointFiles, tarSize, type UploadFile } from "../client/checkpoint-upload.ts";
import { PlatformError } from "../contracts/errors.ts";
import { writeTar } from "../models/tar.ts";
import { registerEvaluate } from "./training-evaluate.ts";
import { evaluations } from "./abtest.ts";
import type { StoredResult } from "../evaluation/record.ts";
import { registerTrainingJobs } from "./training-jobs.ts";
import type { SubmitOptions } from "./training-tune.ts";

export function registerTraining(program: Command): void {
  const training = program.command("training").description("register models and list the model catalog");

  training
    .command("submit")
    .description(
      "register a new version of a model from a source location, register a LoRA adapter of a base version (--source holding adapter_config.json, with --base), or fine-tune a base version on a dataset (--dataset, with --base)",
    )
    .requiredOption("--name <name>", "model name (for a fine-tune or an adapter: the new adapter's or model's name)")
    .option(
      "--framework <framework>",
      "serving framework: llamacpp, vllm or diffusers (a diffusers pipeline directory gets diffusers)",
      "llamacpp",
    )
    .option(
      "--source <source>",
      "a GGUF file, a Hugging Face-style directory, a diffusers pipeline directory or a PEFT adapter directory: local path, file://, https://, hf://org/repo[@rev][/file.gguf], s3://bucket/key or s3://bucket/prefix/",
    )
    .option("--version <version>", "explicit version (default: the next v1, v2, ...)")
    .option(
      "--task <task>",
      "what it serves: embed (/v1/embeddings), generate (chat, completions) or image (/v1/images/generations); default: image for diffusers pipelines, embed for encoder models (BERT family), generate otherwise",
    )
    .option("--base <model@version>", "the base model version an adapter adapts, or a fine-tune starts from")
    .option("--dataset <uri>", "fine-tune on this JSONL training file (chat messages or prompt/completion lines)")
    .option("--validation <uri>", "fine-tune: a JSONL validation file, scored after each epoch")
    .option("--method <method>", "fine-tune: lora (an adapter of the base) or full (a new model)", "lora")
    .option("--epochs <n>", "fine-tune: passes over the dataset", wholeNumber(1))
    .option("--learning-rate <x>", "fine-tune: the optimizer's learning rate", positiveNumber)
    .option("--lora-rank <r>", "fine-tune: the LoRA rank", wholeNumber(1))
    .option("--lora-alpha <a>", "fine-tune: the LoRA alpha", positiveNumber)
    .option("--seed <s>", "fine-tune: the random seed (same seed, same data: same adapter)", wholeNumber(0))
    .option("--watch", "fine-tune: follow the job's events until it ends")
    .option("--json", "print the record as JSON")
    .action(async (opts: SubmitOptions) => {
      if (opts.dataset !== undefined) return (await import("./training-tune.ts")).submitFineTune(opts);
      if (opts.source === undefined)
        throw new CliError(
          "training submit needs --source <file, directory or URI> to register a model or an adapter, or --dataset <uri> with --base <model@version> to fine-tune one",
          2,
        );
      return register({ ...opts, source: opts.source });
    });

  registerEvaluate(training);
  registerTrainingJobs(training);

  training
    .command("list")
    .description("list registered models and their versions, with their latest evaluation results")
    .option("--json", "print JSON (each version with its `evaluations`)")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models");
      // Results are the caller's organization's (an operator sees all); a gateway without evaluations shows none.
      const evaluated = await api
        .request<{ data: { target: string; results: StoredResult[] }[] }>("GET", "/admin/v1/evaluations/results")
        .then((r) => new Map(r.data.map((t) => [t.target, t.results])))
        .catch(() => new Map<string, StoredResult[]>());
      const resultsOf = (m: RegisteredVersion) => evaluated.get(`${m.name}@${m.version}`) ?? [];
      if (opts.json) return printJson(data.map((m) => ({ ...m, evaluations: resultsOf(m) })));
      if (data.length === 0)
        return console.log("no models registered yet: `platform training submit --name <name> --source <path>`");
      printTable(
        [
          "NAME",
          "VERSION",
          "FRAMEWORK",
          "TASK",
          "ARCH",
          "PARAMS",
          "CONTEXT",
          "QUANT",
          "BASE",
          "SIZE",
          "CREATED",
          "EVALUATIONS",
        ],
        data.map((m) => [
          m.name,
          m.version,
          m.framework,
          taskOf(m),
          // An adapter: its kind and rank where a model has its architecture, and the version it adapts.
          m.adapter ? `LoRA r${m.adapter.rank}` : (m.gguf?.architecture ?? m.checkpoint?.architecture ?? "-"),
          formatCount(m.adapter?.parameters ?? m.gguf?.parameters ?? m.checkpoint?.parameters ?? null),
          m.gguf?.context_length ?? m.checkpoint?.context_length ?? "-",
          m.gguf?.quantization ?? m.checkpoint?.quantization ?? m.checkpoint?.dtype ?? "-",
          m.adapter ? `${m.adapter.base.name}@${m.adapter.base.version}` : "-",
          formatBytes(m.size_bytes),
          new Date(m.created).toISOString().replace("T", " ").slice(0, 19),
          evaluations(resultsOf(m), true),
        ]),
      );
    });
}

/** Registers a version (or an adapter, with --base) from `--source`: uploaded when local, fetched by the gateway otherwise. */
async function register(opts: SubmitOptions & { source: string }): Promise<void> {
  const task = taskFlag(opts.task);
  if (opts.base !== undefined && !/^[^@\s]+@[^@\s]+$/.test(opts.base))
    throw new CliError(`--base ${opts.base}: expected <model>@<version>, e.g. --base tiny@v1`, 2);
  const api = await ApiClient.fromCredentials();
  const local = localFile(opts.source);
  let record: RegisteredVersion;
  if (local) {
    // Uploading makes a local file work against a remote gateway too; a directory goes as a tar stream of its checkpoint files.
    const files = statSync(local).isDirectory() ? sourceFiles(local) : undefined;
    if (opts.base === undefined && files?.some((f) => f.name === "adapter_config.json"))
      throw new CliError(
        `--source ${opts.source} is a LoRA adapter (it holds adapter_config.json): name the version it adapts with --base <model>@<version>`,
        2,
      );
    const size = files ? tarSize(files) : statSync(local).size;
    const progress = progressReporter("uploading");
    let sent = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        sent += chunk.length;
        progress.update(Math.min(sent, size), size);
        done(null, chunk);
      },
    });
    const query = new URLSearchParams({
      framework: opts.framework,
      source: opts.source,
      ...(opts.version ? { version: opts.version } : {}),
      ...(task ? { task } : {}),
      ...(opts.base ? { base: opts.base } : {}),
    });
    try {
      const path = `/admin/v1/models/${encodeURIComponent(opts.name)}/upload?${query}`;
      record = files
        ? await api.request("POST", path, undefined, tarOf(local, files, counter), "application/x-tar")
        : await api.request("POST", path, undefined, createReadStream(local).pipe(counter));
    } finally {
      progress.done();
    }
  } else {
    // The server downloads a remote source; it streams its progress back.
    const progress = progressReporter("downloading");
    const body = {
      name: opts.name,
      framework: opts.framework,
      source: opts.source,
      version: opts.version,
      task,
      base: opts.base,
    };
    try {
      record = await api.requestWithProgress("POST", "/admin/v1/models?progress=ndjson", body, (p) =>
        progress.update(p.received, p.total),
      );
    } finally {
      progress.done();
    }
  }
  if (opts.json) return printJson(record);
  console.log(
    `registered ${record.name}@${record.version} (${formatBytes(record.size_bytes)}, sha256 ${record.sha256.slice(0, 12)}…, task ${taskOf(record)})`,
  );
  if (record.gguf) {
    const g = record.gguf;
    console.log(
      `  ${g.architecture ?? "?"} · ${formatCount(g.parameters)} parameters · context ${g.context_length ?? "?"} · ${g.quantization ?? "?"}${g.tokenizer ? ` · ${g.tokenizer} tokenizer` : ""}${g.chat_template ? " · chat template" : ""}`,
    );
  }
  if (record.adapter) {
    const a = record.adapter;
    console.log(
      `  LoRA adapter of ${a.base.name}@${a.base.version} · rank ${a.rank} · alpha ${a.alpha} · ${a.target_modules.join(", ")} · ${formatCount(a.parameters)} parameters`,
    );
  }
  if (record.checkpoint) {
    const k = record.checkpoint;
    console.log(
      `  ${k.architecture ?? "?"} · ${formatCount(k.parameters)} parameters · context ${k.context_length ?? "?"} · ${k.quantization ?? k.dtype ?? "?"} · ${k.tokenizer ?? "?"}${k.chat_template ? " · chat template" : ""} · ${record.manifest?.length ?? 0} files`,
    );
  }
}

/** The directory's files as a tar stream through `counter`; a file that cannot be read (gone, changed size) fails the upload, naming it. */
function tarOf(dir: string, files: { name: string }[], counter: Transform): Transform {
  const pack = writeTar(
    dir,
    files.map((f) => f.name),
  );
  pack.on("error", (e: unknown) =>
    counter.destroy(new CliError(`--source ${dir}: ${e instanceof Error ? e.message : String(e)}`, 1)),
  );
  return pack.pipe(counter);
}

/** A source that names a file on this machine (plain path or file://), resolved; else undefined. */
function localFile(source: string): string | undefined {
  if (/^(https?|hf|s3):\/\//i.test(source)) return undefined;
  const scheme = /^([a-z][a-z0-9+.-]+):/i.exec(source)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== "file")
    throw new CliError(`--source ${source}: the "${scheme}:" scheme is not supported; use ${SOURCE_SCHEMES}`, 2);
  const path = source.startsWith("file://") ? new URL(source).pathname : resolve(source);
  if (!existsSync(path)) throw new CliError(`--source ${source}: no such file`, 2);
  return path;
}

/** `--source`'s checkpoint directory files (src/models/checkpoint-upload.ts); bad input exits 2. */
function sourceFiles(dir: string): UploadFile[] {
  try {
    return checkpointFiles(dir);
  } catch (e) {
    throw e instanceof PlatformError ? new CliError(`--source ${e.message}`, 2) : e;
  }
}

/** `--task` (of `training submit` and `up`) as a task; anything else is bad input (exit 2). */
export function taskFlag(value: string | undefined): ModelTask | undefined {
  if (value === undefined) return undefined;
  const task = ModelTask.safeParse(value).data;
  if (task === undefined) throw new CliError(`--task ${value}: use embed, generate or image`, 2);
  return task;
}
