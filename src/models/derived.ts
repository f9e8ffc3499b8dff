/**
 * Files derived from a model artifact (its quantized copy, its conversion to GGUF), made once and
 * shared: each lives in the artifact store under its own key, so every replica, endpoint and
 * version with the same source reuses it, on this node or any other. Replicas starting together
 * take a Redis lease per derived key: one produces (into a temp file, published by the store's
 * atomic put), the others wait for the object to appear; a holder that dies stops renewing and the
 * next waiter takes over. Nothing here runs on the gateway: it is a replica's start-up work.
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Lease } from "../redis/lease.ts";
import type { Control } from "../redis/connection.ts";
import type { ObjectStore } from "../storage/store.ts";

/** Long enough to outlive a GC pause or a slow store call, short enough that a dead holder's waiters take over soon. */
const LEASE_MS = 30_000;
const RENEW_EVERY_MS = 10_000;
const POLL_MS = 250;

export type DerivedDeps = {
  ctl: Control;
  store: ObjectStore;
  /** Who holds the lease (the replica id): shown to nobody, but makes a stuck lease traceable in Redis. */
  holder: string;
  /** Local files: temp output, and downloads of the derived file when the store is not a local directory. */
  cacheDir: string;
};

export type DerivedFile = {
  /** The file the engine loads. */
  path: string;
  /** as-is: nothing to derive, the source serves; cached: made earlier; produced: made now, by this call; waited: made now, by another replica. */
  outcome: "as-is" | "cached" | "produced" | "waited";
  detail?: string;
};

/** What a producer did with its temp file: wrote it (`made`), or found the source already serves (`as-is`, with that path). */
export type Produced = { kind: "made"; detail?: string } | { kind: "as-is"; path: string; detail?: string };

/**
 * The local path of the derived file at store key `key`, producing it under the lease `lockKey`
 * (a Redis key) when nobody has. `produce` writes the file at the temp path it is given.
 */
export async function derivedFile(
  deps: DerivedDeps,
  key: string,
  lockKey: string,
  produce: (temp: string) => Promise<Produced>,
): Promise<DerivedFile> {
  const cached = await localCopy(deps, key);
  if (cached) return { path: cached, outcome: "cached" };
  const lease = new Lease(deps.ctl.redis, lockKey, deps.holder, LEASE_MS);
  for (;;) {
    if (await lease.tryAcquire()) {
      try {
        // Someone may have finished between our look and the lease.
        const late = await localCopy(deps, key);
        if (late) return { path: late, outcome: "waited" };
        return await make(deps, lease, key, produce);
      } finally {
        await lease.release().catch(() => undefined);
      }
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
    const done = await localCopy(deps, key);
    if (done) return { path: done, outcome: "waited" };
  }
}

async function make(
  deps: DerivedDeps,
  lease: Lease,
  key: string,
  produce: (temp: string) => Promise<Produced>,
): Promise<DerivedFile> {
  await mkdir(deps.cacheDir, { recursive: true });
  const temp = join(deps.cacheDir, `derive-${randomUUID()}.tmp`);
  const renew = setInterval(() => void lease.renew().catch(() => undefined), RENEW_EVERY_MS);
  try {
    const result = await produce(temp);
    if (result.kind === "as-is") return { path: result.path, outcome: "as-is", detail: result.detail };
    await deps.store.put(key, createReadStream(temp));
    const local = deps.store.localPath(key);
    if (local) return { path: local, outcome: "produced", detail: result.detail };
    // A remote store: the bytes just written are the local copy, no download needed.
    const path = cachePath(deps, key);
    await rename(temp, path);
    return { path, outcome: "produced", detail: result.detail };
  } finally {
    clearInterval(renew);
    await rm(temp, { force: true });
  }
}

/** The store's own file for `key`, or a downloaded copy; undefined when the store has no such object. */
async function localCopy(deps: DerivedDeps, key: string): Promise<string | undefined> {
  const head = await deps.store.head(key);
  if (!head) return undefined;
  const local = deps.store.localPath(key);
  if (local) return local;
  const path = cachePath(deps, key);
  const existing = await stat(path).catch(() => undefined);
  if (existing?.size !== head.size) {
    await mkdir(deps.cacheDir, { recursive: true });
    await deps.store.download(key, path);
  }
  return path;
}

function cachePath(deps: DerivedDeps, key: string): string {
  // quantized/<sha>/<TYPE>.gguf → <sha>.<TYPE>.gguf, beside the downloaded sources (<sha>.gguf).
  return join(deps.cacheDir, key.split("/").slice(1).join("."));
}
