/**
 * How a job's lines read and write: the platform's own JSONL (docs/batch.md)
 * or OpenAI batch requests and responses (jobs made through /v1/batches).
 */
import type { SchemaLimits } from "../contracts/schema-limits.ts";
import type { InputLine } from "../files/jsonl.ts";
import { type ParsedEntry, parseRecord } from "./input.ts";
import { openAiFormat } from "./openai-lines.ts";
import { type Outcome, outputLine } from "./output.ts";
import type { BatchSpec } from "./store.ts";

export type LineFormat = {
  parse(line: InputLine): ParsedEntry;
  /** One output line (without its newline); must depend only on its arguments, so a redone batch writes the same part. */
  render(record: { line: number; id: string }, outcome: Outcome): string;
  /**
   * Present when the format's failed records go to a file of their own (the
   * OpenAI shape's error file): says of a written line whether it is one.
   * Parts keep every line in input order either way (a partial download or a
   * resumed run reads them as they are); the result is split when assembled.
   * Absent: one result holds every line (the platform's own format).
   */
  failed?(line: string): boolean;
};

const platformFormat: LineFormat = {
  parse: (line) => parseRecord(line),
  render: (record, outcome) => outputLine(record.id, outcome),
};

/** `schemaLimits`: what an OpenAI line's JSON schemas are held to (the platform's own lines carry none). */
export function formatFor(spec: BatchSpec, schemaLimits: SchemaLimits): LineFormat {
  return spec.openai ? openAiFormat(spec, spec.openai, schemaLimits) : platformFormat;
}
