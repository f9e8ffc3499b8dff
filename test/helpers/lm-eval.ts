/**
 * lm-evaluation-harness as the tests run it: a multiple-choice task over a local JSON file (no hub),
 * and its hf backend on a checkpoint (optionally with a PEFT adapter), offline, reading back the
 * results file.
 */
import { spawn } from "node:child_process";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const LM_EVAL = fileURLToPath(new URL("../../scripts/reference/lm-eval.py", import.meta.url));

/**
 * Writes `<dir>/<task>.yaml`: lm-eval's multiple_choice over `data` (JSON lines with `text`,
 * `choices` and `answer` fields), each choice appended to the text with nothing between (the
 * platform's rule), scored by `metrics`. Its path.
 */
export async function writeChoiceTask(
  dir: string,
  task: string,
  data: string,
  options: { text?: string; delimiter?: string; metrics?: string[] } = {},
): Promise<string> {
  const yaml = join(dir, `${task}.yaml`);
  await writeFile(
    yaml,
    [
      `task: ${task}`,
      "dataset_path: json",
      "dataset_kwargs:",
      "  data_files:",
      `    test: ${JSON.stringify(data)}`,
      "test_split: test",
      "output_type: multiple_choice",
      `doc_to_text: "{{${options.text ?? "context"}}}"`,
      'doc_to_choice: "{{choices}}"',
      'doc_to_target: "{{answer}}"',
      ...(options.delimiter === undefined ? ['target_delimiter: ""'] : []),
      "metric_list:",
      ...(options.metrics ?? ["acc"]).map((m) => `  - metric: ${m}`),
      "",
    ].join("\n"),
  );
  return yaml;
}

/** Everything local: no hub look-ups, and datasets' cache under `home`. */
export function offlineEnv(home: string): NodeJS.ProcessEnv {
  return {
    HF_HUB_OFFLINE: "1",
    HF_DATASETS_OFFLINE: "1",
    HF_HOME: join(home, "hf-home"),
    TOKENIZERS_PARALLELISM: "false",
  };
}

export type HfRun = {
  /** The task's metrics, as lm-eval names them ("acc,none", "acc_stderr,none"). */
  metrics: Record<string, number>;
  /** With `logSamples`: the per-document samples file. */
  samples?: string;
};

/**
 * lm-eval's hf backend on `checkpoint` (float32, CPU), with `adapter` as its PEFT adapter when
 * given, on `task` from `taskDir`; outputs under `output`. Asynchronous, so a gateway in this
 * process keeps serving meanwhile.
 */
export async function runLmEvalHf(
  python: string,
  run: { checkpoint: string; adapter?: string; task: string; taskDir: string; output: string; logSamples?: boolean },
): Promise<HfRun> {
  const args = [
    LM_EVAL,
    "--model",
    "hf",
    "--model_args",
    `pretrained=${run.checkpoint},dtype=float32${run.adapter ? `,peft=${run.adapter}` : ""}`,
    "--device",
    "cpu",
    "--tasks",
    run.task,
    "--include_path",
    run.taskDir,
    ...(run.logSamples ? ["--log_samples"] : []),
    "--output_path",
    run.output,
  ];
  const child = spawn(python, args, {
    env: { ...process.env, ...offlineEnv(run.output) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`lm-eval exited ${code}:\n${log.slice(-4000)}`);
  const files = (await readdir(run.output, { recursive: true })).map((f) => join(run.output, f));
  const results = files.find((f) => /results_[^/]*\.json$/.test(f));
  if (!results) throw new Error(`lm-eval wrote no results file:\n${log.slice(-4000)}`);
  const all = JSON.parse(await readFile(results, "utf8")) as { results: Record<string, Record<string, number>> };
  return {
    metrics: all.results[run.task] ?? {},
    samples: files.find((f) => new RegExp(`samples_${run.task}_[^/]*\\.jsonl$`).test(f)),
  };
}
