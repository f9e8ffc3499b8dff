/**
 * A local lm-evaluation-harness task turned into the platform's dataset lines, written to a temp
 * file (`training evaluate --task <yaml>` then uploads it). What is read (docs/evaluation.md):
 * `output_type` multiple_choice (→ accuracy) or generate_until (→ exact_match); `dataset_path: json`
 * with `dataset_kwargs.data_files` (or a .json/.jsonl path) on this machine; the split named by
 * `test_split`, else `validation_split`; `description`; `doc_to_text`, `doc_to_choice`,
 * `doc_to_target` as a field name or `{{ field }}` templates; `target_delimiter` (default " ").
 * Anything that would change the numbers and is not honoured (few-shot, other `until`s, filters,
 * exact_match options) is refused, naming the key: never silently ignored.
 */
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { parse } from "yaml";
import { PlatformError } from "../contracts/errors.ts";

type Doc = Record<string, unknown>;

export async function taskDataset(yamlPath: string): Promise<{ path: string; metric: "accuracy" | "exact_match" }> {
  // Bad input (400), naming the file: the CLI puts its flag before it.
  const fail = (message: string) => new PlatformError(400, "invalid_task", `${yamlPath}: ${message}`);
  let task: Record<string, unknown>;
  try {
    task = parse(readFileSync(yamlPath, "utf8")) as Record<string, unknown>;
  } catch (e) {
    throw fail(`cannot read the task YAML (${(e as Error).message.split("\n")[0]})`);
  }
  if (typeof task !== "object" || task === null) throw fail("expected a YAML mapping (an lm-eval task)");
  const type = task.output_type;
  if (type !== "multiple_choice" && type !== "generate_until")
    throw fail(
      `output_type: ${String(type)} is not supported; use multiple_choice (accuracy) or generate_until (exact_match)`,
    );
  for (const key of ["num_fewshot", "fewshot_config", "filter_list", "process_docs", "doc_to_decontamination_query"])
    if (task[key] !== undefined && task[key] !== 0) throw fail(`${key}: not supported by the platform's evaluations`);
  const docs = readDocs(task, dirname(resolve(yamlPath)), fail);
  const description = typeof task.description === "string" ? task.description : "";
  const delimiter = typeof task.target_delimiter === "string" ? task.target_delimiter : " ";
  const lines: string[] = [];
  docs.forEach((doc, i) => {
    const where = `document ${i + 1}`;
    const context =
      description + asText(render(task.doc_to_text, doc, "doc_to_text", fail), `${where}: doc_to_text`, fail);
    const target = render(task.doc_to_target, doc, "doc_to_target", fail);
    if (type === "multiple_choice") {
      const raw = Array.isArray(task.doc_to_choice)
        ? task.doc_to_choice
        : render(task.doc_to_choice, doc, "doc_to_choice", fail);
      if (!Array.isArray(raw) || !raw.every((c) => typeof c === "string"))
        throw fail(`${where}: doc_to_choice: expected a list of strings`);
      const answer = typeof target === "number" ? target : raw.indexOf(String(target));
      if (!Number.isInteger(answer) || answer < 0 || answer >= raw.length)
        throw fail(`${where}: doc_to_target: expected a choice's index or text`);
      lines.push(JSON.stringify({ context, choices: raw.map((c) => delimiter + c), answer }));
    } else {
      const kwargs = (task.generation_kwargs ?? {}) as Record<string, unknown>;
      const until = kwargs.until;
      if (until !== undefined && JSON.stringify(until) !== JSON.stringify(["\n\n"]))
        throw fail('generation_kwargs.until: only lm-eval\'s default ["\\n\\n"] is supported');
      lines.push(JSON.stringify({ prompt: context, answer: asText(target, `${where}: doc_to_target`, fail) }));
    }
  });
  if (lines.length === 0) throw fail("the task's split has no documents");
  const path = join(mkdtempSync(join(tmpdir(), "platform-task-")), "dataset.jsonl");
  writeFileSync(path, `${lines.join("\n")}\n`);
  return { path, metric: type === "multiple_choice" ? "accuracy" : "exact_match" };
}

function readDocs(task: Record<string, unknown>, base: string, fail: (m: string) => PlatformError): Doc[] {
  const split = (task.test_split ?? task.validation_split) as string | undefined;
  if (typeof split !== "string") throw fail("test_split (or validation_split): name the split to evaluate");
  let file: unknown;
  const path = task.dataset_path;
  if (path === "json") {
    const files = (task.dataset_kwargs as { data_files?: unknown } | undefined)?.data_files;
    file = typeof files === "string" ? files : (files as Record<string, unknown> | undefined)?.[split];
    if (Array.isArray(file)) file = file.length === 1 ? file[0] : undefined;
  } else if (typeof path === "string" && /\.jsonl?$/.test(path)) file = path;
  if (typeof file !== "string")
    throw fail(
      `dataset_path: the platform reads a local JSON dataset (dataset_path: json, dataset_kwargs.data_files.${split}: <file>); hub datasets are not read`,
    );
  const full = isAbsolute(file) ? file : join(base, file);
  let text: string;
  try {
    text = readFileSync(full, "utf8");
  } catch {
    throw fail(`${file}: cannot read the dataset`);
  }
  try {
    const whole = JSON.parse(text) as unknown;
    if (Array.isArray(whole)) return whole as Doc[];
  } catch {
    // JSON lines
  }
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l, i) => {
      try {
        return JSON.parse(l) as Doc;
      } catch {
        throw fail(`${file}: line ${i + 1} is not valid JSON`);
      }
    });
}

/** A field name, a `{{ field }}` template (fields, `.key` and `[index]` only), a number or a list. */
function render(spec: unknown, doc: Doc, key: string, fail: (m: string) => PlatformError): unknown {
  if (typeof spec === "number" || Array.isArray(spec)) return spec;
  if (typeof spec !== "string") throw fail(`${key}: expected a field name or a "{{ field }}" template`);
  if (spec in doc) return doc[spec];
  const whole = /^\s*\{\{\s*([^{}]+?)\s*\}\}\s*$/.exec(spec);
  if (whole) return lookup(whole[1] as string, doc, key, fail);
  if (!spec.includes("{{")) return spec;
  if (/\{%/.test(spec)) throw fail(`${key}: Jinja statements ({% %}) are not supported; use {{ field }} templates`);
  return spec.replace(/\{\{\s*([^{}]+?)\s*\}\}/g, (_, expr: string) => String(lookup(expr, doc, key, fail)));
}

function lookup(expr: string, doc: Doc, key: string, fail: (m: string) => PlatformError): unknown {
  if (!/^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*|\[\d+\])*$/.test(expr))
    throw fail(`${key}: "{{ ${expr} }}" is not supported; use a field, field.key or field[0]`);
  let value: unknown = doc;
  for (const part of expr.match(/[A-Za-z_]\w*|\[\d+\]/g) ?? []) {
    const k = part.startsWith("[") ? Number(part.slice(1, -1)) : part;
    value = (value as Record<string | number, unknown> | undefined)?.[k];
  }
  if (value === undefined) throw fail(`${key}: the documents have no "${expr}"`);
  return value;
}

function asText(value: unknown, where: string, fail: (m: string) => PlatformError): string {
  if (typeof value === "string") return value;
  if (typeof value === "number") return String(value);
  throw fail(`${where}: expected text`);
}
