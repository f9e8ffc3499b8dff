/**
 * Fetching a checkpoint directory a registration names into scratch space: its files from an
 * uploaded tar, a local directory, a store prefix (s3://) or a Hub repository, each hashed on the
 * way and the whole bounded in files and bytes (settings.sources). One file is fetch.ts's.
 */
import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { lstat, mkdir, open, readdir, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { PlatformError } from "../contracts/errors.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import { openStore, type S3Settings, StorageError } from "../storage/index.ts";
import type { ObjectStore } from "../storage/store.ts";
import { isCheckpointFile, isModuleDirectory, MAX_CHECKPOINT_FILES, uploadedEntryName } from "./checkpoint.ts";
import { downloadFile, listHubRepo, parseHubRepo } from "./download.ts";
import type { SourceRequest } from "./fetch.ts";
import { checkSourceScheme, huggingFaceUrl, sourceStorageError } from "./sources.ts";
import { componentFiles, isPipelineComponent } from "./pipeline-files.ts";
import { readTar } from "./tar.ts";

/** A fetched checkpoint's files by their path in the directory. */
export type FetchedFiles = Map<string, { size: number; sha256: string }>;

/** Fills the directory `dir` (created here) with the checkpoint files the request names or uploads. */
export async function fetchCheckpoint(
  req: SourceRequest,
  dir: string,
  policy: SourcePolicy,
  s3: S3Settings | undefined,
): Promise<FetchedFiles> {
  await mkdir(dir);
  const scratch: Scratch = { dir, files: new Map(), left: policy.maxBytes };
  const hub = req.tar || req.directory ? undefined : parseHubRepo(req.source);
  if (req.tar) {
    for await (const entry of readTar(req.tar)) {
      const name = uploadedEntryName(entry.name);
      if (name === undefined || !isCheckpointFile(name)) {
        for await (const _ of entry.body); // not part of the checkpoint (README, .gitattributes, original/): skipped
        continue;
      }
      await addFile(scratch, name, entry.body, policy);
    }
  } else if (hub) {
    await fromHub(scratch, hub, req, policy);
  } else {
    const directory = req.directory ?? openDirectory(req.source, s3);
    if ("path" in directory) await fromLocalDirectory(scratch, directory.path, req, policy);
    else {
      try {
        await fromStore(scratch, directory.store, directory.prefix, req, policy);
      } finally {
        directory.store.close();
      }
    }
  }
  return scratch.files;
}

type Scratch = { dir: string; files: FetchedFiles; left: number };

function checkpointTooLarge(policy: SourcePolicy): PlatformError {
  return new PlatformError(
    413,
    "source_too_large",
    `source: the checkpoint is larger than ${policy.maxBytes} bytes (PLATFORM_MAX_MODEL_BYTES)`,
    "source",
  );
}

function tooManyFiles(): PlatformError {
  return new PlatformError(
    400,
    "invalid_artifact",
    `source: the checkpoint has more than ${MAX_CHECKPOINT_FILES} files`,
    "source",
  );
}

/** A checked checkpoint path's place in the scratch directory, its module subdirectory (`1_Pooling/`) created. */
async function scratchPath(scratch: Scratch, name: string): Promise<string> {
  const path = join(scratch.dir, name);
  if (name.includes("/")) await mkdir(dirname(path), { recursive: true });
  return path;
}

/** Writes one checkpoint file into the scratch directory, hashing it and counting it against the import's budget. */
async function addFile(
  scratch: Scratch,
  name: string,
  chunks: AsyncIterable<Buffer | Uint8Array>,
  policy: SourcePolicy,
): Promise<void> {
  if (scratch.files.has(name))
    throw new PlatformError(400, "invalid_artifact", `source: the file ${name} appears twice`, "source");
  if (scratch.files.size >= MAX_CHECKPOINT_FILES) throw tooManyFiles();
  const path = await scratchPath(scratch, name);
  const hash = createHash("sha256");
  let size = 0;
  const file = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW);
  try {
    for await (const chunk of chunks) {
      size += chunk.length;
      if (size > scratch.left) throw checkpointTooLarge(policy);
      await file.write(chunk);
      hash.update(chunk);
    }
  } finally {
    await file.close();
  }
  scratch.left -= size;
  scratch.files.set(name, { size, sha256: hash.digest("hex") });
}

/** A directory `source` names (a path, file:// or an s3:// prefix), for callers that confined nothing (the operator's own `up`). */
function openDirectory(
  source: string,
  s3: S3Settings | undefined,
): { path: string } | { store: ObjectStore; prefix: string } {
  checkSourceScheme(source);
  if (/^s3:\/\//i.test(source)) return { store: openStore(source.replace(/\/+$/, ""), s3), prefix: "" };
  return { path: /^file:/i.test(source) ? new URL(source).pathname : source };
}

/**
 * A directory on this machine: its top-level checkpoint files and its sentence-transformers modules'
 * config.json. They must be regular files in real directories: a symbolic link is refused rather
 * than followed, so a link planted in an allowed directory cannot lead the import anywhere else
 * (the CLI, on the user's own machine, follows links and uploads the files).
 */
async function fromLocalDirectory(
  scratch: Scratch,
  path: string,
  req: SourceRequest,
  policy: SourcePolicy,
): Promise<void> {
  const entries = await readdir(path, { withFileTypes: true }).catch((e: NodeJS.ErrnoException) => {
    throw new PlatformError(
      e.code === "ENOENT" ? 404 : 400,
      "source_not_found",
      `source: "${req.source}": ${e.code === "ENOENT" ? "no such directory" : `cannot list it (${e.code ?? "error"})`}`,
      "source",
    );
  });
  const linked = (name: string) =>
    new PlatformError(
      400,
      "invalid_artifact",
      `source: ${name} is a symbolic link, which is not followed in a directory read on the server; copy the file there, or upload the directory with \`platform training submit\``,
      "source",
    );
  const files: { name: string; size: number }[] = [];
  for (const entry of entries) {
    if (isCheckpointFile(entry.name)) {
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (entry.isFile()) files.push({ name: entry.name, size: (await stat(join(path, entry.name))).size });
    } else if (isModuleDirectory(entry.name)) {
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (!entry.isDirectory()) continue;
      const name = `${entry.name}/config.json`;
      const info = await lstat(join(path, name)).catch(() => undefined);
      if (info?.isSymbolicLink()) throw linked(name);
      if (info?.isFile()) files.push({ name, size: info.size });
    } else if (isPipelineComponent(entry.name)) {
      // A diffusers pipeline's component folder (src/models/pipeline-files.ts).
      if (entry.isSymbolicLink()) throw linked(entry.name);
      if (entry.isDirectory()) files.push(...(await componentFiles(path, entry.name, linked)));
    }
    if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
  }
  const total = { done: 0, known: files.reduce((n, f) => n + f.size, 0) };
  if (total.known > policy.maxBytes) throw checkpointTooLarge(policy);
  for (const f of files) {
    const handle = await open(join(path, f.name), constants.O_RDONLY | constants.O_NOFOLLOW);
    await addFile(scratch, f.name, progressed(handle.createReadStream(), total, req), policy);
  }
}

/** The checkpoint files under `prefix` of a store (an s3:// prefix): top-level ones and modules' `<n>_<Name>/config.json`. */
async function fromStore(
  scratch: Scratch,
  store: ObjectStore,
  prefix: string,
  req: SourceRequest,
  policy: SourcePolicy,
): Promise<void> {
  const base = prefix === "" || prefix.endsWith("/") ? prefix : `${prefix}/`;
  const files: { key: string; name: string; size: number }[] = [];
  try {
    for await (const o of store.list(base)) {
      const name = o.key.slice(base.length);
      if (!isCheckpointFile(name)) continue;
      files.push({ key: o.key, name, size: o.size });
      if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
    }
    const total = { done: 0, known: files.reduce((n, f) => n + f.size, 0) };
    if (total.known > policy.maxBytes) throw checkpointTooLarge(policy);
    for (const f of files) await addFile(scratch, f.name, progressed(await store.get(f.key), total, req), policy);
  } catch (e) {
    if (e instanceof StorageError) throw sourceStorageError(e, req.source, "no such bucket or prefix");
    throw e;
  }
}

/** hf://org/repo[@revision]: the repository's checkpoint files, listed by the Hub API and each downloaded with resume and its SHA-256 checked. */
async function fromHub(
  scratch: Scratch,
  hub: { org: string; repo: string; revision: string },
  req: SourceRequest,
  policy: SourcePolicy,
): Promise<void> {
  // PLATFORM_SOURCES_TIMEOUT_MS bounds the whole repository, not each of its files.
  const deadline = Date.now() + policy.totalTimeoutMs;
  const listing = await listHubRepo(hub, policy, deadline).catch((e: unknown) => {
    if (e instanceof PlatformError && e.status === 404) {
      throw new PlatformError(
        404,
        "source_not_found",
        `source: the Hub has no repository ${hub.org}/${hub.repo} at revision "${hub.revision}" (or it is gated or private: set HF_TOKEN)`,
        "source",
      );
    }
    throw e;
  });
  const files = listing.files.filter((f) => isCheckpointFile(f.path));
  if (files.length > MAX_CHECKPOINT_FILES) throw tooManyFiles();
  const known = files.reduce((n, f) => n + (f.size ?? 0), 0);
  if (known > policy.maxBytes) throw checkpointTooLarge(policy);
  let done = 0;
  // A commit, when the listing names one, pins every file to the same snapshot even if the branch moves meanwhile.
  const revision = listing.commit && /^[0-9a-f]{40}$/.test(listing.commit) ? listing.commit : hub.revision;
  for (const f of files) {
    const url = huggingFaceUrl(`hf://${hub.org}/${hub.repo}@${revision}/${f.path}`, policy.hfEndpoint);
    const dest = await scratchPath(scratch, f.path);
    const got = await downloadFile(url, dest, policy, {
      hub: true,
      maxBytes: scratch.left,
      sha256: f.sha256,
      deadline,
      onBytes: (received) => req.onProgress?.({ received: done + received, total: known }),
    });
    if (f.size !== null && got.size !== f.size) {
      throw new PlatformError(
        502,
        "source_corrupt",
        `source: ${f.path} came as ${got.size} bytes where the Hub lists ${f.size}; try again`,
        "source",
      );
    }
    done += got.size;
    scratch.left -= got.size;
    scratch.files.set(f.path, { size: got.size, sha256: got.sha256 });
  }
}

/** The stream's chunks, reporting the directory's progress as they pass. */
async function* progressed(
  stream: Readable,
  total: { done: number; known: number },
  req: SourceRequest,
): AsyncGenerator<Buffer> {
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    total.done += chunk.length;
    req.onProgress?.({ received: total.done, total: total.known });
    yield chunk;
  }
}
