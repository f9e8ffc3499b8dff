/**
 * Where a job's results go, and the output lines themselves.
 *
 * An output URI ending in `.jsonl` names the result object; any other URI is a
 * prefix (a directory, or s3://bucket/prefix/) that receives `<job id>.jsonl`.
 * Either way the parts live beside the result, under `<job id>.parts/`, until
 * the result has been assembled.
 */
import type { BatchOutputLine } from "../contracts/batch.ts";
import type { FinishReason } from "../contracts/job.ts";
import { isStorageError, type ObjectStore, openObject, openStore } from "../storage/index.ts";

export type OutputLocation = {
  store: ObjectStore;
  resultKey: string;
  partKey: (index: number) => string;
  partsPrefix: string;
};

export function outputLocation(outputUri: string, jobId: string): OutputLocation {
  const named = /\.jsonl$/i.test(outputUri);
  const { store, key } = named ? openObject(outputUri) : { store: openStore(outputUri), key: `${jobId}.jsonl` };
  const partsPrefix = `${jobId}.parts/`;
  return { store, resultKey: key, partsPrefix, partKey: (i) => `${partsPrefix}part-${String(i).padStart(6, "0")}.jsonl` };
}

/** Proves the output is writable before any record is sent, so a typo fails the job at once. */
export async function probeWritable(out: OutputLocation): Promise<void> {
  const key = `${out.partsPrefix}.probe`;
  await out.store.put(key, "");
  await out.store.delete(key);
}

/**
 * Outcome of one record, as kept until its batch is written. `tokens` is the
 * total; the details are there for output formats that show them.
 */
export type Outcome =
  | { ok: true; text: string; tokens: number; prompt_tokens?: number; completion_tokens?: number; finish_reason?: FinishReason }
  | { ok: false; code: string; message: string; status?: number; param?: string | null };

export function outputLine(id: string, outcome: Outcome): string {
  const line: BatchOutputLine = outcome.ok
    ? { id, output: outcome.text, tokens_used: outcome.tokens, status: "success" }
    : { id, status: "error", error: { code: outcome.code, message: outcome.message } };
  return JSON.stringify(line);
}

/** Storage calls are retried a few times: a part write that fails for good fails the job. */
export async function withStorageRetries<T>(what: () => Promise<T>, attempts = 4): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await what();
    } catch (e) {
      const transient = isStorageError(e, "unavailable");
      if (!transient || i >= attempts) throw e;
      await new Promise((r) => setTimeout(r, 250 * 2 ** i));
    }
  }
}
