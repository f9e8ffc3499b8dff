/**
 * Files (/v1/files, OpenAI's shape): batch inputs and fine-tuning datasets uploaded by clients
 * and the output and error files of batch jobs, kept in the artifact store under `files/`,
 * described by records in Redis.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { z } from "zod";
import type { Control } from "../redis/connection.ts";
import { PlatformError } from "../contracts/errors.ts";
import { canSee, DEFAULT_ORG, type Principal } from "../contracts/orgs.ts";
import type { Body, ObjectStore } from "../storage/index.ts";

export const FileObject = z.object({
  id: z.string(),
  object: z.literal("file"),
  bytes: z.number().int().nonnegative(),
  created_at: z.number().int(),
  filename: z.string(),
  purpose: z.string(),
  status: z.literal("processed"),
  /** Epoch seconds after which the file is gone (an upload's `expires_after`); null: until deleted. */
  expires_at: z.number().int().nullable().default(null),
});
export type FileObject = z.infer<typeof FileObject>;

/** `org`: the owner's organization; absent on files older than organizations: the install's own. Records older than expiry have no `expires_at`. */
const StoredFile = FileObject.extend({ key: z.string(), owner: z.string().nullable(), org: z.string().optional() });
type StoredFile = z.infer<typeof StoredFile>;

export const FILES_PREFIX = "files";

/** An upload's bytes in the store, not yet a file. */
export type Received = { id: string; key: string; size: number };

/** An organization's file quota (PLATFORM_ORG_FILE_BYTES, PLATFORM_ORG_FILES). */
export type FileQuota = { bytes: number; files: number };

/** What an organization's files take, the expired ones left out (and removed). */
export type FileUsage = { bytes: number; files: number };

export function quotaExceeded(org: string, usage: FileUsage, quota: FileQuota, adding?: number): PlatformError {
  const gib = (n: number) => `${(n / 1024 ** 3).toFixed(2)} GiB`;
  const what =
    adding === undefined
      ? `organization ${org} already keeps ${usage.files} files of ${gib(usage.bytes)}`
      : `this upload of at least ${adding} bytes would take organization ${org} past its ${gib(quota.bytes)} (it keeps ${usage.files} files of ${gib(usage.bytes)})`;
  return new PlatformError(
    413,
    "file_quota_exceeded",
    `${what}; its file quota is ${quota.files} files and ${quota.bytes} bytes (PLATFORM_ORG_FILES, PLATFORM_ORG_FILE_BYTES). Delete files it no longer needs (DELETE /v1/files/{id}), upload with expires_after, or ask the operator for more`,
  );
}

/** The files an OpenAI-shape batch shows once it has ended: null where there is none (nothing answered, nothing failed). */
export const BatchResultFiles = z.object({
  output_file_id: z.string().nullable(),
  error_file_id: z.string().nullable(),
});
export type BatchResultFiles = z.infer<typeof BatchResultFiles>;

/** A result object of a batch job, by its key under `files/` (the job's output location) and size. */
export type ResultObject = { key: string; bytes: number };

/**
 * Records a finished batch job's output and error files (keys relative to
 * `files/`, where /v1/batches jobs write). Ids are derived from the job id, so
 * a coordinator that finishes the job again records the same files; a file
 * already recorded is left as it is (HSETNX).
 */
export async function registerResultFiles(
  ctl: Control,
  job: { id: string; owner: string | null; org?: string | undefined; finished: number },
  results: { output: ResultObject | null; errors: ResultObject | null },
): Promise<BatchResultFiles> {
  const hex = job.id.replace(/^batch_/, "");
  // The output file keeps the id batches had before error files existed; the error file's is another
  // file-<24 hex> (hashed, so it cannot be told from the job id or collide with an upload's random one).
  const ids = {
    output: `file-${hex}`,
    errors: `file-${createHash("sha256").update(`${job.id}:errors`).digest("hex").slice(0, 24)}`,
  };
  const record = async (id: string, result: ResultObject, suffix: string) => {
    const file: StoredFile = {
      id,
      object: "file",
      bytes: result.bytes,
      created_at: Math.floor(job.finished / 1000),
      filename: `${job.id}_${suffix}.jsonl`,
      purpose: "batch_output",
      status: "processed",
      expires_at: null,
      key: `${FILES_PREFIX}/${result.key}`,
      owner: job.owner,
      ...(job.org ? { org: job.org } : {}),
    };
    await ctl.redis.hsetnx(ctl.keys.files, id, JSON.stringify(file));
    return id;
  };
  return {
    output_file_id: results.output ? await record(ids.output, results.output, "output") : null,
    error_file_id: results.errors ? await record(ids.errors, results.errors, "error") : null,
  };
}

/** Who asks: a file is seen by its owner, the organization's admins and operators (contracts/orgs.ts). */
type Viewer = Principal;

export class Files {
  private readonly ctl: Control;
  readonly store: ObjectStore;

  constructor(ctl: Control, store: ObjectStore) {
    this.ctl = ctl;
    this.store = store;
  }

  /** Where batch jobs made from files write their results (a prefix in the same store). */
  get outputPrefix(): string {
    return `${this.store.uri(FILES_PREFIX)}/`;
  }

  /** An upload's bytes stored under a fresh id, before its record: `record` makes it a file, `discard` drops it. */
  async receive(body: Body): Promise<Received> {
    const id = `file-${randomBytes(12).toString("hex")}`;
    const key = `${FILES_PREFIX}/${id}.jsonl`;
    const { size } = await this.store.put(key, body);
    return { id, key, size };
  }

  async discard(received: Received): Promise<void> {
    await this.store.delete(received.key);
  }

  /**
   * `expiresAfter`: seconds from now after which the file is removed (null: kept until deleted);
   * `quota`: checked again here, since other uploads of the organization may have landed meanwhile
   * (the caller discards what it received when this refuses).
   */
  async record(
    received: Received,
    filename: string,
    purpose: string,
    viewer: Viewer | undefined,
    options: { expiresAfter: number | null; quota?: FileQuota } = { expiresAfter: null },
  ): Promise<FileObject> {
    if (options.quota && viewer) {
      const usage = await this.usage(viewer.org);
      if (usage.files + 1 > options.quota.files || usage.bytes + received.size > options.quota.bytes)
        throw quotaExceeded(viewer.org, usage, options.quota, received.size);
    }
    const now = Math.floor(Date.now() / 1000);
    const file: StoredFile = {
      id: received.id,
      object: "file",
      bytes: received.size,
      created_at: now,
      filename,
      purpose,
      status: "processed",
      expires_at: options.expiresAfter === null ? null : now + options.expiresAfter,
      key: received.key,
      owner: viewer?.id ?? null,
      ...(viewer ? { org: viewer.org } : {}),
    };
    await this.ctl.redis.hset(this.ctl.keys.files, received.id, JSON.stringify(file));
    return publicFile(file);
  }

  /**
   * Batches that ended before error files existed keep every line in one
   * result: it is recorded as their output file when first shown (once;
   * later calls return the same file). Newer batches are recorded by their
   * coordinator (registerResultFiles).
   */
  async registerOutput(
    jobId: string,
    key: string,
    owner: { id: string | null; org: string },
    finished: number,
  ): Promise<string> {
    const id = `file-${jobId.replace(/^batch_/, "")}`;
    if (await this.ctl.redis.hexists(this.ctl.keys.files, id)) return id;
    const head = await this.store.head(key);
    const file: StoredFile = {
      id,
      object: "file",
      bytes: head?.size ?? 0,
      created_at: Math.floor(finished / 1000),
      filename: `${jobId}_output.jsonl`,
      purpose: "batch_output",
      status: "processed",
      expires_at: null,
      key,
      owner: owner.id,
      org: owner.org,
    };
    await this.ctl.redis.hsetnx(this.ctl.keys.files, id, JSON.stringify(file));
    return id;
  }

  /** An organization's files (its batch results included), the expired ones removed on the way. */
  async usage(org: string): Promise<FileUsage> {
    const usage = { bytes: 0, files: 0 };
    for (const f of await this.all()) {
      if ((f.org ?? DEFAULT_ORG) !== org) continue;
      usage.bytes += f.bytes;
      usage.files += 1;
    }
    return usage;
  }

  /** Every live file; those past their `expires_at` are removed (bytes, then record) and left out. */
  private async all(): Promise<StoredFile[]> {
    const now = Math.floor(Date.now() / 1000);
    const files = (await this.ctl.redis.hvals(this.ctl.keys.files)).map((raw) => StoredFile.parse(JSON.parse(raw)));
    const expired = files.filter((f) => expiredAt(f, now));
    for (const f of expired) await this.remove(f);
    return files.filter((f) => !expiredAt(f, now));
  }

  private async remove(file: StoredFile): Promise<void> {
    await this.store.delete(file.key);
    await this.ctl.redis.hdel(this.ctl.keys.files, file.id);
  }

  async get(id: string, viewer?: Viewer): Promise<FileObject> {
    return publicFile(await this.stored(id, viewer));
  }

  /** The full URI of a file's bytes, for a batch job to read. */
  async uri(id: string, viewer?: Viewer): Promise<string> {
    return this.store.uri((await this.stored(id, viewer)).key);
  }

  async list(viewer?: Viewer): Promise<FileObject[]> {
    return (await this.all())
      .filter((f) => visible(f, viewer))
      .sort((a, b) => b.created_at - a.created_at)
      .map(publicFile);
  }

  async content(id: string, viewer?: Viewer): Promise<Readable> {
    return this.store.get((await this.stored(id, viewer)).key);
  }

  async delete(id: string, viewer?: Viewer): Promise<void> {
    await this.remove(await this.stored(id, viewer));
  }

  private async stored(id: string, viewer: Viewer | undefined): Promise<StoredFile> {
    const raw = await this.ctl.redis.hget(this.ctl.keys.files, id);
    const file = raw ? StoredFile.parse(JSON.parse(raw)) : undefined;
    if (file && expiredAt(file, Math.floor(Date.now() / 1000))) await this.remove(file);
    else if (file && visible(file, viewer)) return file;
    // An expired file reads as one that never was: it is gone.
    throw new PlatformError(404, "file_not_found", `no file "${id}"`, "file_id");
  }
}

function expiredAt(file: StoredFile, now: number): boolean {
  return typeof file.expires_at === "number" && file.expires_at <= now;
}

function visible(file: StoredFile, viewer: Viewer | undefined): boolean {
  return viewer === undefined || canSee(viewer, { id: file.owner, org: file.org ?? DEFAULT_ORG });
}

function publicFile(file: StoredFile): FileObject {
  const { key: _key, owner: _owner, org: _org, ...rest } = file;
  return { ...rest, expires_at: rest.expires_at ?? null };
}
