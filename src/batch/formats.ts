/**
 * How a job's lines read and write: the platform's own JSONL (docs/batch.md)
 * or OpenAI batch requests and responses (jobs made through /v1/batches).
 */
import type { SchemaLimits } from "../contracts/schema-limits.ts";
import { parseRecord } from "./input.ts";
import { openAiFormat } from "./openai-lines.ts";
import type { LineFormat } from "./lines.ts";
import { outputLine } from "./output.ts";
import type { BatchSpec } from "./store.ts";

const platformFormat: LineFormat = {
  parse: (line) => parseRecord(line),
  render: (record, outcome) => outputLine(record.id, outcome),
};

/** `schemaLimits`: what an OpenAI line's JSON schemas are held to (the platform's own lines carry none). */
export function formatFor(spec: BatchSpec, schemaLimits: SchemaLimits): LineFormat {
  return spec.openai ? openAiFormat(spec, spec.openai, schemaLimits) : platformFormat;
}
