/**
 * A model version's artifact as local files for an engine: the store's own file or directory when
 * the store is a local one, else a copy in the node's cache (<dataDir>/cache/models). A single
 * file keeps its extension (<sha256>.gguf), so what reads it can tell its kind; a checkpoint
 * directory becomes <cache>/<manifest digest>/, every file checked against the manifest, written
 * into a temp directory and renamed into place, so a crash never leaves half a directory and a
 * second replica on the node reuses the first one's.
 */
import { createHash, randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { dirname, extname, join } from "node:path";
import type { ArtifactFile, RegisteredVersion } from "./record.ts";
import type { ObjectStore } from "../storage/store.ts";
import { checkEntryName } from "./checkpoint.ts";

/** The path an engine loads `model` from: a file, or for a checkpoint ("hf") a directory (named by its digest, records.ts `Sha256`). */
export async function localArtifact(store: ObjectStore, cacheDir: string, model: RegisteredVersion): Promise<string> {
  // An adapter is a directory too (adapter_config.json, adapter_model.safetensors).
  if (model.kind === "hf" || model.kind === "adapter") return localCheckpoint(store, cacheDir, model);
  const local = store.localPath(model.artifact);
  if (local) return local;
  await mkdir(cacheDir, { recursive: true });
  const ext = extname(model.artifact);
  const path = join(cacheDir, `${model.sha256}${/^\.[\w-]{1,16}$/.test(ext) ? ext : ""}`);
  const existing = await stat(path).catch(() => undefined);
  if (existing?.size !== model.size_bytes) await store.download(model.artifact, path);
  return path;
}

async function localCheckpoint(store: ObjectStore, cacheDir: string, model: RegisteredVersion): Promise<string> {
  const manifest = model.manifest;
  if (!manifest || manifest.length === 0)
    throw new Error(`model ${model.name}@${model.version}: a checkpoint record without a manifest; register it again`);
  for (const f of manifest) checkEntryName(f.path);
  const local = store.localPath(model.artifact);
  if (local) return local;
  const dir = join(cacheDir, model.sha256);
  if (await complete(dir, manifest)) return dir;
  await mkdir(cacheDir, { recursive: true });
  const temp = join(cacheDir, `.${model.sha256}.${randomUUID()}.tmp`);
  await mkdir(temp);
  try {
    for (const f of manifest) {
      // A sentence-transformers module's config.json lies in its own subdirectory (1_Pooling/).
      if (f.path.includes("/")) await mkdir(dirname(join(temp, f.path)), { recursive: true });
      await fetchChecked(store, `${model.artifact}/${f.path}`, join(temp, f.path), f, model);
    }
    try {
      await rename(temp, dir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOTEMPTY" && code !== "EEXIST") throw e;
      // Another replica on this node got there first, or a stale directory is in the way.
      if (await complete(dir, manifest)) return dir;
      await rm(dir, { recursive: true, force: true });
      await rename(temp, dir);
    }
    return dir;
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
}

/** Whether `dir` holds every manifest file at its size (directories only appear whole, by rename; sizes catch a tampered cache cheaply). */
async function complete(dir: string, manifest: readonly ArtifactFile[]): Promise<boolean> {
  for (const f of manifest) {
    const info = await stat(join(dir, f.path)).catch(() => undefined);
    if (!info?.isFile() || info.size !== f.size) return false;
  }
  return true;
}

async function fetchChecked(
  store: ObjectStore,
  key: string,
  dest: string,
  f: ArtifactFile,
  model: RegisteredVersion,
): Promise<void> {
  const hash = createHash("sha256");
  let size = 0;
  const file = await open(dest, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW);
  try {
    for await (const chunk of (await store.get(key)) as AsyncIterable<Buffer>) {
      await file.write(chunk);
      hash.update(chunk);
      size += chunk.length;
    }
  } finally {
    await file.close();
  }
  const sha256 = hash.digest("hex");
  if (size !== f.size || sha256 !== f.sha256) {
    throw new Error(
      `model ${model.name}@${model.version}: ${f.path} in the artifact store does not match the version's manifest (${size} bytes, sha256 ${sha256.slice(0, 12)}…; expected ${f.size} bytes, ${f.sha256.slice(0, 12)}…)`,
    );
  }
}
