/**
 * What a batch job checks before it sends any record: the model version is
 * registered and deployed, the input exists, the output is writable. Each
 * failure is a BatchFailure whose code and message end up in the job record.
 */
import type { BatchCheckpoint } from "../contracts/batch.ts";
import { listEndpoints } from "../control/endpoints.ts";
import type { Control } from "../control/redis.ts";
import { PlatformError } from "../errors.ts";
import { resolveModelVersion } from "../registry/versions.ts";
import { isStorageError, type ObjectStore, openObject } from "../storage/index.ts";
import { isBlank, readLines } from "./input.ts";
import { type OutputLocation, outputLocation, probeWritable } from "./output.ts";
import type { BatchSpec } from "./records.ts";

/** The job itself cannot proceed; `code` says why (input_not_found, model_not_found, ...). */
export class BatchFailure extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

/** The concrete version to send records to ("latest" is resolved once and kept, so it cannot move under a running job). */
export async function resolveVersion(ctl: Control, spec: BatchSpec): Promise<string> {
  try {
    return (await resolveModelVersion(ctl, spec.model, spec.version)).version;
  } catch (e) {
    if (e instanceof PlatformError && e.status === 404) throw new BatchFailure("model_not_found", e.message);
    throw e;
  }
}

/** Records sent to a version no endpoint serves would wait forever: fail instead. */
export async function checkDeployed(ctl: Control, spec: BatchSpec, version: string): Promise<void> {
  const serving = (await listEndpoints(ctl)).filter((e) => e.config.model.name === spec.model);
  if (serving.some((e) => e.version === version)) return;
  const others = [...new Set(serving.map((e) => e.version))];
  const latest = spec.version === "latest" ? " (the latest version)" : "";
  const hint = others.length > 0 ? `; endpoints serve ${others.join(", ")}: pass --version ${others[0]}, or deploy ${version}` : "";
  throw new BatchFailure(
    "model_not_deployed",
    `no endpoint serves ${spec.model}@${version}${latest}${hint} (\`platform inference deploy --model ${spec.model} --version ${version}\`)`,
  );
}

export type Input = { store: ObjectStore; key: string; size: number };

export async function openInput(uri: string): Promise<Input> {
  try {
    const { store, key } = openObject(uri);
    const head = await store.head(key);
    if (!head) throw new BatchFailure("input_not_found", `${uri}: no such object`);
    return { store, key, size: head.size };
  } catch (e) {
    if (isStorageError(e)) throw new BatchFailure(e.code === "not_found" || e.code === "no_such_bucket" ? "input_not_found" : "input_unreadable", e.message);
    throw e;
  }
}

export async function openOutput(uri: string, jobId: string): Promise<OutputLocation> {
  try {
    const out = outputLocation(uri, jobId);
    await probeWritable(out);
    return out;
  } catch (e) {
    if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
    throw e;
  }
}

/** Records (non-blank lines) in the input; undefined if `stopped` turned true on the way. */
export async function countRecords(input: Input, stopped: () => boolean): Promise<number | undefined> {
  let count = 0;
  for await (const line of readLines(readInput(input, 0))) {
    if (stopped()) return undefined;
    if (!isBlank(line)) count++;
  }
  return count;
}

/**
 * The input's bytes from `start`, re-opened where it broke off if the
 * connection fails: a long job reads slowly, and one dropped connection must
 * not cost it a restart.
 */
export async function* readInput(input: Input, start: number, retries = 5): AsyncGenerator<Buffer> {
  let offset = start;
  let failures = 0;
  for (;;) {
    try {
      const stream = await input.store.get(input.key, { start: offset });
      try {
        for await (const chunk of stream) {
          const data = chunk as Buffer;
          offset += data.length;
          failures = 0;
          yield data;
        }
        return;
      } finally {
        stream.destroy();
      }
    } catch (e) {
      if (isStorageError(e) && e.code !== "unavailable") throw new BatchFailure("input_unreadable", e.message);
      if (++failures > retries) {
        throw new BatchFailure("input_unreadable", `${input.store.uri(input.key)}: reading failed ${failures} times in a row at byte ${offset} (${(e as Error).message})`);
      }
      await new Promise((r) => setTimeout(r, 250 * 2 ** failures));
    }
  }
}

export function firstCheckpoint(input: Input): BatchCheckpoint {
  return { next_line: 1, next_byte: 0, parts: 0, succeeded: 0, failed: 0, input_size: input.size };
}
