/**
 * The quantized copy of a model artifact, made once and shared: it lives in the artifact store
 * under quantized/<source sha256>/<TYPE>.gguf, so every replica, endpoint and version with the same
 * source bytes and type reuses it, on this node or any other. Replicas starting together take a
 * Redis lease per (sha256, type): one quantizes (into a temp file, published by the store's atomic
 * put), the others wait for the object to appear; a holder that dies stops renewing and the next
 * waiter takes over. Nothing here runs on the gateway: it is the replica's start-up work.
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { ScalerLease } from "../../../scaler/lease.ts";
import type { Control } from "../../control/redis.ts";
import type { ObjectStore } from "../../storage/store.ts";
import { readGgufInfo } from "../gguf/read.ts";
import { quantizeGguf } from "./file.ts";
import { planQuantization, type Quantization, TARGETS } from "./plan.ts";

/** Long enough to outlive a GC pause or a slow store call, short enough that a dead holder's waiters take over soon. */
const LEASE_MS = 30_000;
const RENEW_EVERY_MS = 10_000;
const POLL_MS = 250;

export type QuantizedDeps = {
  ctl: Control;
  store: ObjectStore;
  /** Who holds the lease (the replica id): shown to nobody, but makes a stuck lease traceable in Redis. */
  holder: string;
  /** Local files: temp output, and downloads of the cached copy when the store is not a local directory. */
  cacheDir: string;
};

export type QuantizedModel = {
  /** The file the engine loads. */
  path: string;
  /** as-is: the source already is that type; cached: made earlier; produced: made now, by this call; waited: made now, by another replica. */
  outcome: "as-is" | "cached" | "produced" | "waited";
  /** The store key of the quantized copy (absent for as-is). */
  key?: string;
  detail?: string;
};

export function quantizedKey(sha256: string, quantization: Quantization): string {
  // The sha256 comes from a stored record: a malformed one must not become a path.
  if (!/^[0-9a-f]{64}$/.test(sha256)) throw new Error(`artifact sha256 "${sha256.slice(0, 80)}" is not a hex SHA-256`);
  return `quantized/${sha256}/${TARGETS[quantization].name}.gguf`;
}

/** The local path of the quantized form of `source` (a local GGUF whose bytes hash to `sha256`), producing it if nobody has. */
export async function quantizedModel(deps: QuantizedDeps, source: { path: string; sha256: string }, quantization: Quantization): Promise<QuantizedModel> {
  const key = quantizedKey(source.sha256, quantization);
  const cached = await localCopy(deps, key);
  if (cached) return { path: cached, outcome: "cached", key };

  // Reading the header is cheap and settles "already that type" and "cannot be quantized" before any lease.
  const plan = planQuantization(await readGgufInfo(source.path), quantization);
  if (plan.kind === "as-is") return { path: source.path, outcome: "as-is", detail: plan.reason };

  const lease = new ScalerLease(deps.ctl.redis, deps.ctl.keys.quantizeLock(`${source.sha256}:${TARGETS[quantization].name}`), deps.holder, LEASE_MS);
  for (;;) {
    if (await lease.tryAcquire()) {
      try {
        // Someone may have finished between our look and the lease.
        const late = await localCopy(deps, key);
        if (late) return { path: late, outcome: "waited", key };
        return { ...(await produce(deps, lease, source.path, key, quantization)), key };
      } finally {
        await lease.release().catch(() => undefined);
      }
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
    const done = await localCopy(deps, key);
    if (done) return { path: done, outcome: "waited", key };
  }
}

async function produce(deps: QuantizedDeps, lease: ScalerLease, sourcePath: string, key: string, quantization: Quantization): Promise<Omit<QuantizedModel, "key">> {
  await mkdir(deps.cacheDir, { recursive: true });
  const temp = join(deps.cacheDir, `quantize-${randomUUID()}.tmp`);
  const renew = setInterval(() => void lease.renew().catch(() => undefined), RENEW_EVERY_MS);
  try {
    const result = await quantizeGguf(sourcePath, temp, quantization);
    if (result.kind === "as-is") return { path: sourcePath, outcome: "as-is", detail: result.reason };
    await deps.store.put(key, createReadStream(temp));
    const detail = `${result.tensorsQuantized} of ${result.tensors} tensors to ${TARGETS[quantization].name}, ${result.inputBytes} → ${result.outputBytes} bytes`;
    const local = deps.store.localPath(key);
    if (local) return { path: local, outcome: "produced", detail };
    // A remote store: the bytes just written are the local copy, no download needed.
    const path = cachePath(deps, key);
    await rename(temp, path);
    return { path, outcome: "produced", detail };
  } finally {
    clearInterval(renew);
    await rm(temp, { force: true });
  }
}

/** The store's own file for `key`, or a downloaded copy; undefined when the store has no such object. */
async function localCopy(deps: QuantizedDeps, key: string): Promise<string | undefined> {
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

function cachePath(deps: QuantizedDeps, key: string): string {
  // quantized/<sha>/<TYPE>.gguf → <sha>.<TYPE>.gguf, beside the downloaded sources (<sha>.gguf).
  return join(deps.cacheDir, key.replace(/^quantized\//, "").replace("/", "."));
}
