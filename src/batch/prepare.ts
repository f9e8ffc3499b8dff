/**
 * What a batch job checks before it sends any record: the model version is
 * registered and deployed, the input exists, the output is writable. Each
 * failure is a BatchFailure whose code and message end up in the job record.
 *
 * A local input is opened once and every range is read from that one handle:
 * a name checked by the storage policy and opened later could be swapped in
 * between (for a link to another tenant's file), a held handle cannot.
 */
import { constants } from "node:fs";
import { type FileHandle, open, readlink, stat } from "node:fs/promises";
import type { BatchCheckpoint } from "./record.ts";
import { type RegisteredVersion, taskOf } from "../models/record.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import { queueName } from "../contracts/naming.ts";
import { serving } from "../endpoints/rollout.ts";
import { listEndpoints } from "../endpoints/store.ts";
import type { Control } from "../redis/connection.ts";
import { PlatformError } from "../contracts/errors.ts";
import { DEFAULT_ORG } from "../contracts/orgs.ts";
import { resolveModelVersion } from "../models/versions.ts";
import { fromFsError } from "../storage/errors.ts";
import { isStorageError, type ObjectStore, openObject, parseStorageUri, type S3Settings } from "../storage/index.ts";
import { isBlank, readLines } from "../files/jsonl.ts";
import { type OutputLocation, outputLocation, probeWritable } from "./output.ts";
import type { BatchSpec } from "./store.ts";

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
  let record: RegisteredVersion;
  try {
    // Another organization's model is the same model_not_found as a name never registered (src/models/owners.ts).
    const viewer = spec.scope && { org: spec.scope.org ?? DEFAULT_ORG, role: spec.scope.role };
    record = await resolveModelVersion(ctl, spec.model, spec.version, viewer);
  } catch (e) {
    if (e instanceof PlatformError && e.status === 404) throw new BatchFailure("model_not_found", e.message);
    throw e;
  }
  // Batch records are generations: an embedding model would fail every one of them.
  if (taskOf(record) === "embed") {
    throw new BatchFailure(
      "model_not_generative",
      `${spec.model}@${record.version} is an embedding model (registered with task embed): batch jobs generate text; use a generative model, or register it with --task generate`,
    );
  }
  return record.version;
}

/** Records sent to a version no endpoint serves would wait forever: fail instead. */
export async function checkDeployed(ctl: Control, spec: BatchSpec, version: string): Promise<void> {
  const serving = (await listEndpoints(ctl)).filter((e) => e.config.model.name === spec.model);
  if (serving.some((e) => e.version === version)) return;
  const others = [...new Set(serving.map((e) => e.version))];
  const latest = spec.version === "latest" ? " (the latest version)" : "";
  const hint =
    others.length > 0
      ? `; endpoints serve ${others.join(", ")}: pass --version ${others[0]}, or deploy ${version}`
      : "";
  throw new BatchFailure(
    "model_not_deployed",
    `no endpoint serves ${spec.model}@${version}${latest}${hint} (\`platform inference deploy --model ${spec.model} --version ${version}\`)`,
  );
}

/**
 * The queue a batch of `model`@`version` goes to when its request named no endpoint: the version's
 * default queue when an endpoint with default engine settings serves it (or none serves it yet),
 * else the first serving endpoint's (engines.ts `endpointQueueName`).
 */
export async function queueServing(ctl: Control, model: string, version: string): Promise<string> {
  const queues = (await listEndpoints(ctl))
    .map(serving)
    .filter((e) => e.config.model.name === model && e.version === version)
    .map(endpointQueueName);
  const byDefault = queueName(model, version);
  return queues.includes(byDefault) ? byDefault : (queues[0] ?? byDefault);
}

export type Input = {
  store: ObjectStore;
  key: string;
  size: number;
  /** A local input, held open: what every read uses, and its path, to tell whether the name still leads to it. */
  held?: { handle: FileHandle; path: string; identity: string };
};

/**
 * `identity` ("dev:ino", from the storage policy's check of `uri`): the object
 * opened must be that one, else the job fails with input_changed; the name is
 * then also opened without following a link at its end (it is a real path).
 * `name`: the input as the client knows it, for that failure's message.
 */
export async function openInput(uri: string, identity?: string, name = uri, s3: S3Settings = {}): Promise<Input> {
  try {
    const { store, key } = openObject(uri, s3);
    const location = parseStorageUri(uri);
    if (location.scheme === "file") return { store, key, ...(await holdInput(uri, location.path, identity, name)) };
    const head = await store.head(key);
    if (!head) throw new BatchFailure("input_not_found", `${uri}: no such object`);
    return { store, key, size: head.size };
  } catch (e) {
    if (isStorageError(e))
      throw new BatchFailure(
        e.code === "not_found" || e.code === "no_such_bucket" ? "input_not_found" : "input_unreadable",
        e.message,
      );
    throw e;
  }
}

async function holdInput(
  uri: string,
  path: string,
  identity: string | undefined,
  name: string,
): Promise<Pick<Input, "size" | "held">> {
  const changed = (why: string) =>
    new BatchFailure("input_changed", `${name} changed after it was checked (${why}); submit a new job`);
  let handle: FileHandle;
  try {
    // O_NONBLOCK: a FIFO put there must not hang the job; it is refused below as not a file.
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK | (identity ? constants.O_NOFOLLOW : 0));
  } catch (e) {
    if ((e as { code?: unknown }).code === "ELOOP") throw changed("it is now a symbolic link");
    throw fromFsError(e, uri, "read");
  }
  try {
    const info = await handle.stat({ bigint: true });
    if (!info.isFile()) throw new BatchFailure("input_not_found", `${uri}: no such object`);
    const held = `${info.dev}:${info.ino}`;
    if (identity !== undefined && held !== identity) throw changed("it is no longer the object that was checked");
    // Linux says where the opened object really is: still the path that was checked.
    const where = identity ? await readlink(`/proc/self/fd/${handle.fd}`).catch(() => undefined) : undefined;
    if (where !== undefined && where !== path) throw changed("it was moved");
    return { size: Number(info.size), held: { handle, path, identity: held } };
  } catch (e) {
    await handle.close();
    throw e;
  }
}

/** Releases the input's handle, if it holds one. */
export async function closeInput(input: Input): Promise<void> {
  await input.held?.handle.close().catch(() => undefined);
}

/**
 * Fails with input_changed when the input's name now leads to another object
 * (swapped, or replaced by a link) or the object held changed size. Reads
 * never leave the object held, so this is about honesty, not confinement: a
 * job does not complete as if it had read what its input now names. `name`
 * is the input as the client gave it. Removing the input changes nothing read.
 */
export async function checkInput(input: Input, name: string): Promise<void> {
  const held = input.held;
  if (!held) return;
  const [now, info] = await Promise.all([
    stat(held.path, { bigint: true }).catch(() => undefined),
    held.handle.stat({ bigint: true }),
  ]);
  if (now !== undefined && `${now.dev}:${now.ino}` !== held.identity) {
    throw new BatchFailure(
      "input_changed",
      `${name} changed while the job ran (it names another object now); submit a new job`,
    );
  }
  if (Number(info.size) !== input.size) {
    throw new BatchFailure(
      "input_changed",
      `${name} changed while the job ran (${input.size} bytes at the start, ${info.size} now); submit a new job`,
    );
  }
}

/**
 * `check` judges the parts directory (throwing a BatchFailure): before it is
 * created and held, and again once held, so the directory held is the one judged.
 */
export async function openOutput(
  uri: string,
  jobId: string,
  check: (out: OutputLocation) => Promise<void> = async () => undefined,
  s3: S3Settings = {},
): Promise<OutputLocation> {
  let out: OutputLocation | undefined;
  try {
    out = outputLocation(uri, jobId, s3);
    await check(out);
    await out.holdParts();
    await check(out);
    await probeWritable(out);
    return out;
  } catch (e) {
    out?.store.close();
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
 * The input's bytes from `start`: a held input's from its handle, up to the
 * size it had when opened; otherwise re-opened where it broke off if the
 * connection fails: a long job reads slowly, and one dropped connection must
 * not cost it a restart. Its own loop rather than p-retry's (withStorageRetries): a read that
 * made progress starts its count of failures over, and a generator yields between attempts.
 */
export async function* readInput(input: Input, start: number, retries = 5): AsyncGenerator<Buffer> {
  if (input.held) {
    yield* readHeld(input, start);
    return;
  }
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
        // The cause's text may name internal addresses: only its code is shown, the rest logged.
        console.error(`[batch] reading ${input.store.uri(input.key)} failed at byte ${offset}:`, e);
        throw new BatchFailure(
          "input_unreadable",
          `${input.store.uri(input.key)}: reading failed ${failures} times in a row at byte ${offset} (${(e as NodeJS.ErrnoException).code ?? "error"})`,
        );
      }
      await new Promise((r) => setTimeout(r, 250 * 2 ** failures));
    }
  }
}

const CHUNK = 64 * 1024;

async function* readHeld(input: Input, start: number): AsyncGenerator<Buffer> {
  const { handle } = input.held as NonNullable<Input["held"]>;
  for (let offset = start; offset < input.size; ) {
    // A fresh buffer each time: readers may keep a chunk past the next read.
    const buffer = Buffer.allocUnsafe(Math.min(CHUNK, input.size - offset));
    let bytesRead: number;
    try {
      ({ bytesRead } = await handle.read(buffer, 0, buffer.length, offset));
    } catch (e) {
      throw new BatchFailure("input_unreadable", fromFsError(e, input.store.uri(input.key), "read").message);
    }
    if (bytesRead === 0) return; // shorter than when opened: checkInput says so
    offset += bytesRead;
    yield buffer.subarray(0, bytesRead);
  }
}

export function firstCheckpoint(input: Input): BatchCheckpoint {
  return { next_line: 1, next_byte: 0, parts: 0, succeeded: 0, failed: 0, input_size: input.size };
}
