/**
 * An evaluation dataset: JSONL whose lines are items of one metric's shape (record.ts LINE_SHAPES).
 * The whole file is read (it is bounded) and every bad line is named before anything is scored, so
 * a run never half-finishes on line 9,000 for a typo.
 */
import { createHash } from "node:crypto";
import { isBlank, readLines } from "../files/jsonl.ts";
import { LINE_SHAPES, type Metric } from "./record.ts";

/** A dataset is read whole: at most this many bytes and items. */
export const MAX_DATASET_BYTES = 16 * 1024 * 1024;
export const MAX_ITEMS = 10_000;
const MAX_CHOICES = 64;
/** Errors named in one answer; the rest are counted. */
const MAX_NAMED = 10;

export type Item =
  | { kind: "perplexity"; line: number; text: string }
  | { kind: "accuracy"; line: number; context: string; choices: string[]; answer: number }
  | { kind: "exact_match"; line: number; prompt: string; answer: string };

export type ParsedDataset = { metric: Metric; items: Item[]; sha256: string };

export class DatasetError extends Error {}

/** The items, or a DatasetError naming the bad lines (`line 3: choices: expected ...`). */
export async function parseDataset(bytes: Buffer, requested: Metric | undefined): Promise<ParsedDataset> {
  if (bytes.length > MAX_DATASET_BYTES)
    throw new DatasetError(`the dataset is larger than ${MAX_DATASET_BYTES} bytes; split it into smaller evaluations`);
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  let metric = requested;
  const items: Item[] = [];
  const errors: string[] = [];
  let errorCount = 0;
  const fail = (line: number, message: string) => {
    errorCount++;
    if (errors.length < MAX_NAMED) errors.push(`line ${line}: ${message}`);
  };
  for await (const line of readLines([bytes])) {
    if (isBlank(line)) continue;
    const n = line.lineNumber;
    let value: unknown;
    try {
      value = JSON.parse(line.text as string);
    } catch {
      fail(n, "not valid JSON");
      continue;
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      fail(n, `expected a JSON object such as ${LINE_SHAPES[metric ?? "perplexity"]}`);
      continue;
    }
    const o = value as Record<string, unknown>;
    metric ??= "choices" in o ? "accuracy" : "text" in o ? "perplexity" : "prompt" in o ? "exact_match" : undefined;
    if (metric === undefined) {
      fail(
        n,
        `expected "text" (perplexity), "context" and "choices" (accuracy) or "prompt" and "answer" (exact_match)`,
      );
      continue;
    }
    const item = parseItem(metric, n, o);
    if (typeof item === "string") fail(n, item);
    else if (items.length >= MAX_ITEMS) {
      throw new DatasetError(`the dataset has more than ${MAX_ITEMS} items; split it into smaller evaluations`);
    } else items.push(item);
  }
  if (errorCount > 0) {
    const more = errorCount > errors.length ? `; and ${errorCount - errors.length} more bad lines` : "";
    throw new DatasetError(`${errors.join("; ")}${more}`);
  }
  if (items.length === 0 || metric === undefined)
    throw new DatasetError(`the dataset has no items; each line is a JSON object such as ${LINE_SHAPES.perplexity}`);
  return { metric, items, sha256 };
}

function parseItem(metric: Metric, line: number, o: Record<string, unknown>): Item | string {
  const text = (field: string, what = "a string"): string | { error: string } => {
    const v = o[field];
    if (typeof v !== "string")
      return { error: `${field}: expected ${what} (a ${metric} line is ${LINE_SHAPES[metric]})` };
    return v;
  };
  switch (metric) {
    case "perplexity": {
      const t = text("text", "a non-empty string");
      if (typeof t !== "string") return t.error;
      if (t.length === 0) return "text: expected a non-empty string";
      return { kind: "perplexity", line, text: t };
    }
    case "accuracy": {
      const context = text("context", "a string that is not only spaces");
      if (typeof context !== "string") return context.error;
      // lm-eval moves a context's trailing spaces into the continuation; an empty context has no tokens to condition on.
      if (context.trim() === "") return "context: expected a string that is not only spaces";
      const choices = o.choices;
      if (
        !Array.isArray(choices) ||
        choices.length < 2 ||
        choices.length > MAX_CHOICES ||
        !choices.every((c) => typeof c === "string" && c.length > 0)
      )
        return `choices: expected an array of 2 to ${MAX_CHOICES} non-empty strings`;
      const answer = o.answer;
      if (typeof answer !== "number" || !Number.isInteger(answer) || answer < 0 || answer >= choices.length)
        return `answer: expected the index of the right choice, 0 to ${choices.length - 1}`;
      return { kind: "accuracy", line, context, choices: choices as string[], answer };
    }
    case "exact_match": {
      const prompt = text("prompt", "a non-empty string");
      if (typeof prompt !== "string") return prompt.error;
      if (prompt.length === 0) return "prompt: expected a non-empty string";
      const answer = text("answer");
      if (typeof answer !== "string") return answer.error;
      return { kind: "exact_match", line, prompt, answer };
    }
  }
}
