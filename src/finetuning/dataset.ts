/**
 * Checking a fine-tuning dataset before anything trains: JSONL whose lines are OpenAI chat
 * examples (`{"messages": [{role, content}, ...]}`, at least one assistant turn) or
 * prompt/completion pairs (one format per file). Every bad line is named with its field
 * (`line 12: messages[1].role: expected one of system, user, assistant`), the first
 * MAX_REPORTED of them; the file's size and line count are bounded; its SHA-256 is recorded so
 * the trainer can tell the bytes it trains on are the bytes that were checked.
 */
import { createHash } from "node:crypto";
import type { Readable } from "node:stream";
import { isBlank, readLines } from "../files/jsonl.ts";
import { PlatformError } from "../contracts/errors.ts";

export type DatasetLimits = { maxBytes: number; maxLines: number; maxLineBytes: number };

export type DatasetSummary = { sha256: string; bytes: number; lines: number; format: "chat" | "prompt_completion" };

const ROLES = ["system", "user", "assistant"];
const MAX_REPORTED = 20;

/** The problem with one parsed line (a message naming the field), or its format. */
export function checkLine(value: unknown): { format: "chat" | "prompt_completion" } | { problem: string } {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return { problem: 'expected a JSON object: {"messages": [...]} or {"prompt": ..., "completion": ...}' };
  const line = value as Record<string, unknown>;
  if ("messages" in line) {
    const messages = line.messages;
    if (!Array.isArray(messages) || messages.length === 0)
      return { problem: "messages: expected a non-empty array of {role, content}" };
    let assistant = false;
    for (const [i, m] of messages.entries()) {
      if (typeof m !== "object" || m === null || Array.isArray(m))
        return { problem: `messages[${i}]: expected an object {role, content}` };
      const { role, content } = m as Record<string, unknown>;
      if (typeof role !== "string" || !ROLES.includes(role))
        return { problem: `messages[${i}].role: expected one of ${ROLES.join(", ")}` };
      if (typeof content !== "string") return { problem: `messages[${i}].content: expected a string` };
      if (role === "assistant") {
        assistant = true;
        if (content.length === 0) return { problem: `messages[${i}].content: an assistant turn may not be empty` };
      }
    }
    if (!assistant) return { problem: "messages: expected at least one assistant message (the text to learn)" };
    return { format: "chat" };
  }
  if ("prompt" in line || "completion" in line) {
    if (typeof line.prompt !== "string") return { problem: "prompt: expected a string" };
    if (typeof line.completion !== "string" || line.completion.length === 0)
      return { problem: "completion: expected a non-empty string" };
    return { format: "prompt_completion" };
  }
  return { problem: 'expected "messages" (chat) or "prompt" and "completion"' };
}

/**
 * Reads and checks the whole file; a 400 naming every bad line (up to MAX_REPORTED) and `field`.
 * `name`: how messages call the file (its id or the URI the client gave).
 */
export async function validateDataset(
  source: Readable,
  field: string,
  name: string,
  limits: DatasetLimits,
): Promise<DatasetSummary> {
  const hash = createHash("sha256");
  let bytes = 0;
  const counted = (async function* () {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > limits.maxBytes) {
        source.destroy();
        throw new PlatformError(
          413,
          "file_too_large",
          `${field}: ${name} is larger than ${limits.maxBytes} bytes (PLATFORM_FINETUNE_MAX_DATASET_BYTES); use a smaller dataset`,
          field,
        );
      }
      hash.update(chunk);
      yield chunk;
    }
  })();
  const problems: string[] = [];
  let bad = 0;
  let lines = 0;
  let format: DatasetSummary["format"] | undefined;
  for await (const line of readLines(counted, undefined, limits.maxLineBytes)) {
    if (isBlank(line)) continue;
    lines += 1;
    if (lines > limits.maxLines) {
      source.destroy();
      throw new PlatformError(
        413,
        "file_too_large",
        `${field}: ${name} has more than ${limits.maxLines} examples (PLATFORM_FINETUNE_MAX_DATASET_LINES)`,
        field,
      );
    }
    const report = (problem: string) => {
      bad += 1;
      if (problems.length < MAX_REPORTED) problems.push(`line ${line.lineNumber}: ${problem}`);
    };
    if (line.text === null) {
      report(`longer than ${limits.maxLineBytes} bytes`);
      continue;
    }
    let value: unknown;
    try {
      value = JSON.parse(line.text);
    } catch {
      report("not valid JSON");
      continue;
    }
    const checked = checkLine(value);
    if ("problem" in checked) report(checked.problem);
    else if (format === undefined) format = checked.format;
    else if (format !== checked.format)
      report(
        `a ${checked.format === "chat" ? "chat" : "prompt/completion"} line in a ${format === "chat" ? "chat" : "prompt/completion"} dataset; use one format per file`,
      );
  }
  if (bad > 0) {
    const more = bad > problems.length ? `; and ${bad - problems.length} more bad lines` : "";
    throw new PlatformError(
      400,
      "invalid_training_file",
      `${field}: ${name} has ${bad} invalid line${bad === 1 ? "" : "s"}: ${problems.join("; ")}${more}`,
      field,
    );
  }
  if (lines === 0 || format === undefined)
    throw new PlatformError(400, "invalid_training_file", `${field}: ${name} has no examples`, field);
  return { sha256: hash.digest("hex"), bytes, lines, format };
}
