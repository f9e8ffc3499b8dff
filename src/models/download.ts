/**
 * Downloading a remote file to a local one, hashing it as it is written, and picking up where it
 * stopped (HTTP Range) when the connection breaks off mid-body: a multi-gigabyte shard is not
 * fetched again from its first byte because of one dropped connection. Also the Hub's repository
 * listing, for hf://org/repo sources that name no file. Every request goes through sources.ts
 * (scheme, address and redirect checks; size and time bounds).
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import pRetry from "p-retry";
import { z } from "zod";
import { PlatformError } from "../contracts/errors.ts";
import type { SourcePolicy } from "../settings/sources.ts";
import { isBrokenOff, openRemote } from "./sources.ts";

/** Resumes after a broken connection, then the download fails with the last error. */
export const MAX_RESUMES = 5;
/** Waits before each resume: 0.2 s doubling, at most 1 s. */
const RESUME_BACKOFF = { retries: MAX_RESUMES, minTimeout: 200, factor: 2, maxTimeout: 1_000 };

export type DownloadOptions = {
  hub?: boolean;
  /** At most this many bytes (the import's remaining budget). */
  maxBytes?: number;
  /** Bytes of this file so far, as they arrive (restarts from 0 when a server ignores a Range request). */
  onBytes?: (received: number, total: number | null) => void;
  /** The Hub's SHA-256 for the file, checked once it is complete. */
  sha256?: string;
  /** When the whole download (resumes included) must be done, epoch ms; default PLATFORM_SOURCES_TIMEOUT_MS from now. */
  deadline?: number;
};

/** Downloads `url` into `dest` (created or truncated); its size and SHA-256. */
export async function downloadFile(
  url: string,
  dest: string,
  policy: SourcePolicy,
  options: DownloadOptions = {},
): Promise<{ size: number; sha256: string; resumes: number }> {
  const deadline = options.deadline ?? Date.now() + policy.totalTimeoutMs;
  const file = await open(dest, "w");
  try {
    let hash = createHash("sha256");
    let size = 0;
    let resumes = 0;
    let etag: string | undefined;
    await pRetry(
      async (attempt) => {
        resumes = attempt - 1;
        const res = await openRemote(url, policy, {
          hub: options.hub,
          start: size,
          maxBytes: options.maxBytes,
          deadline,
          onProgress: (p) => options.onBytes?.(p.received, p.total),
        });
        if (size > 0 && res.status !== 206) {
          // The server sent the whole file again: start over rather than append a second copy.
          await file.truncate(0);
          hash = createHash("sha256");
          size = 0;
        }
        etag = linkedSha256(res.headers) ?? etag;
        // Written before it is hashed, chunk by chunk: after a failure, the file holds exactly the hashed bytes.
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          await file.write(chunk, 0, chunk.length, size);
          hash.update(chunk);
          size += chunk.length;
        }
      },
      { ...RESUME_BACKOFF, shouldRetry: ({ error }) => isBrokenOff(error) },
    );
    const sha256 = hash.digest("hex");
    const expected = options.sha256 ?? etag;
    if (expected !== undefined && expected !== sha256) {
      throw new PlatformError(
        502,
        "source_corrupt",
        `source: the downloaded bytes do not match the SHA-256 the server gave (${expected.slice(0, 12)}…); try again`,
        "source",
      );
    }
    return { size, sha256, resumes };
  } finally {
    await file.close();
  }
}

/** The Hub names an LFS file's SHA-256 in X-Linked-Etag (ETag on a direct answer); a git blob's SHA-1 is not one. */
function linkedSha256(headers: Record<string, string | string[] | undefined>): string | undefined {
  for (const name of ["x-linked-etag", "etag"]) {
    const value = headers[name];
    const tag = (Array.isArray(value) ? value[0] : value)?.replace(/^W\//, "").replace(/"/g, "");
    if (tag !== undefined && /^[0-9a-f]{64}$/.test(tag)) return tag;
  }
  return undefined;
}

const HubSibling = z.object({
  rfilename: z.string(),
  size: z.number().int().nonnegative().optional(),
  lfs: z
    .object({ sha256: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative().optional() })
    .optional(),
});
const HubModel = z.object({ sha: z.string().optional(), siblings: z.array(HubSibling) });
export type HubFile = { path: string; size: number | null; sha256?: string };

/** A Hub listing of a large repository is tens of KB; this bounds what a hostile endpoint can make us hold. */
const MAX_LISTING_BYTES = 16 * 1024 * 1024;

/** hf://org/repo[@revision] (no file) as its parts; undefined for anything else. */
export function parseHubRepo(source: string): { org: string; repo: string; revision: string } | undefined {
  const m = /^hf:\/\/([^/@]+)\/([^/@]+)(?:@([^/]+))?\/?$/i.exec(source);
  if (!m) return undefined;
  const parts = { org: m[1]!, repo: m[2]!, revision: m[3] ?? "main" };
  if (Object.values(parts).some((p) => p === "." || p === "..")) return undefined;
  return parts;
}

/** The repository's files at `revision` (GET {HF_ENDPOINT}/api/models/{org}/{repo}/revision/{revision}?blobs=true). */
export async function listHubRepo(
  repo: { org: string; repo: string; revision: string },
  policy: SourcePolicy,
  deadline?: number,
): Promise<{ commit?: string; files: HubFile[] }> {
  const e = encodeURIComponent;
  const url = `${policy.hfEndpoint.replace(/\/+$/, "")}/api/models/${e(repo.org)}/${e(repo.repo)}/revision/${e(repo.revision)}?blobs=true`;
  const res = await openRemote(url, policy, { hub: true, maxBytes: MAX_LISTING_BYTES, deadline });
  const chunks: Buffer[] = [];
  for await (const chunk of res.body as AsyncIterable<Buffer>) chunks.push(chunk);
  let parsed: ReturnType<typeof HubModel.safeParse> | undefined;
  try {
    parsed = HubModel.safeParse(JSON.parse(Buffer.concat(chunks).toString("utf8")));
  } catch {
    parsed = undefined;
  }
  if (!parsed?.success)
    throw new PlatformError(
      502,
      "source_unreachable",
      `source: the Hub's listing of ${repo.org}/${repo.repo} is not what the Hub API answers (no "siblings" list)`,
      "source",
    );
  return {
    commit: parsed.data.sha,
    files: parsed.data.siblings.map((s) => ({
      path: s.rfilename,
      size: s.lfs?.size ?? s.size ?? null,
      ...(s.lfs ? { sha256: s.lfs.sha256 } : {}),
    })),
  };
}
