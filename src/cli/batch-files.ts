/**
 * `platform inference batch`'s local files: whether the gateway can read and write them itself
 * (it runs on this machine and its storage roots hold them) or they travel through the API,
 * uploaded as /v1/files and downloaded atomically.
 */
import { createReadStream, existsSync, realpathSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { createInterface } from "node:readline";
import { basename, dirname, join, resolve, sep } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { fileURLToPath, pathToFileURL } from "node:url";
import { PICTURE_REFERENCE } from "../batch/picture-records.ts";
import { isStorageError } from "../storage/errors.ts";
import { writeFileAtomically } from "../storage/shared.ts";
import { fileUrl } from "../storage/uri.ts";
import type { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { uploadFile } from "./common/upload.ts";

export type UploadMode = "auto" | "always" | "never";

export function uploadMode(value: string | undefined): UploadMode {
  const mode = value ?? "auto";
  if (mode === "auto" || mode === "always" || mode === "never") return mode;
  throw new CliError(`--upload: expected auto, always or never, got "${mode}"`, 2);
}

/** The local file a CLI argument names (plain path or file://), or undefined for s3:// and the like. */
export function localPath(uri: string): string | undefined {
  if (/^file:/i.test(uri)) return fileURLToPath(uri);
  if (/^[a-z][a-z0-9+.-]+:/i.test(uri)) return undefined;
  return resolve(uri);
}

/**
 * Whether the gateway cannot use these local paths itself: it runs elsewhere
 * (not on a loopback address), or they lie outside the storage it lets this key use.
 */
export async function notShared(api: ApiClient, mode: UploadMode, paths: (string | undefined)[]): Promise<boolean> {
  if (mode !== "auto") return mode === "always";
  const host = new URL(api.baseUrl).hostname.replace(/^\[|\]$/g, "");
  if (!(host === "localhost" || host === "::1" || /^127\./.test(host))) return true;
  const storage = await api.request<{ roots: string[] }>("GET", "/v1/storage").catch(() => undefined);
  if (!storage) return false; // an older gateway: the same-machine flow as before
  const roots = storage.roots.filter((r) => r.startsWith("file:")).map((r) => real(fileURLToPath(r)));
  return paths.some(
    (p) =>
      p !== undefined &&
      !roots.some((root) => real(p) === root || real(p).startsWith(root.endsWith(sep) ? root : `${root}${sep}`)),
  );
}

/** The real path of `path`, or of its nearest existing ancestor with the rest appended. */
function real(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    const parent = dirname(path);
    return parent === path ? path : join(real(parent), basename(path));
  }
}

export async function uploadInput(api: ApiClient, path: string, quiet: boolean): Promise<string> {
  if (!existsSync(path)) throw new CliError(`--input ${path}: no such file`, 2);
  if (!quiet) process.stderr.write(`uploading ${path} (the gateway does not share this machine's files)...\n`);
  return uploadFile(api, path, "batch", `--input ${path}`);
}

/**
 * Where `platform inference batch download --to` writes, read as `--output` is: a path ending in
 * `.jsonl` names the file; any other is a directory that receives `<job id>.jsonl`. Default:
 * ./<job id>.jsonl.
 */
export function downloadTarget(id: string, to: string | undefined): string {
  if (to === undefined) return resolve(`${id}.jsonl`);
  return resolve(/\.jsonl$/i.test(to) ? to : join(to, `${id}.jsonl`));
}

/**
 * Streams the job's output into `to` the way the platform writes its own
 * results (a temp file beside it, fsynced, renamed or linked into place, the
 * directory fsynced), so a failed download leaves no half file. Without
 * `overwrite` an existing file is never replaced, even one that appeared
 * while the job ran or the bytes arrived. An image job's PNGs follow into the
 * folder beside it that its lines name (`<name>/<record id>.png`); returns a line that says where
 * they went (empty for a text job).
 */
export async function downloadOutput(api: ApiClient, id: string, to: string, overwrite: boolean): Promise<string> {
  await mkdir(dirname(to), { recursive: true });
  await download(api, id, `/v1/batch-jobs/${encodeURIComponent(id)}/output`, to, overwrite);
  const names = await imageNames(to);
  for (const name of names) {
    await mkdir(join(dirname(to), dirname(name)), { recursive: true });
    const path = `/v1/batch-jobs/${encodeURIComponent(id)}/output/${name.split("/").map(encodeURIComponent).join("/")}`;
    await download(api, id, path, join(dirname(to), name), overwrite);
  }
  const folders = [...new Set(names.map((n) => join(dirname(to), dirname(n))))];
  return names.length === 0 ? "" : `${names.length} PNGs in ${folders.join(", ")}${sep}`;
}

async function download(api: ApiClient, id: string, path: string, to: string, overwrite: boolean): Promise<void> {
  const exists = () =>
    new CliError(
      `${to}: the file exists; pass --overwrite to replace it, or fetch the result elsewhere with \`platform inference batch download ${id} --to <path>\``,
    );
  if (!overwrite && existsSync(to)) throw exists();
  const res = await send(api, "GET", path, {});
  try {
    await writeFileAtomically(to, Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), fileUrl(to), {
      replace: overwrite,
    });
  } catch (e) {
    if (isStorageError(e, "exists")) throw exists();
    throw new CliError(`${to}: cannot write (${(e as Error).message})`);
  }
}

/** The PNGs a downloaded result names (image jobs' success lines), each a safe relative name. */
async function imageNames(result: string): Promise<string[]> {
  const names: string[] = [];
  const lines = createInterface({ input: createReadStream(result), crlfDelay: Number.POSITIVE_INFINITY });
  for await (const line of lines) {
    if (!line.includes('"image"')) continue;
    let image: unknown;
    try {
      image = (JSON.parse(line) as { image?: unknown }).image;
    } catch {
      continue;
    }
    if (typeof image === "string" && PICTURE_REFERENCE.test(image)) names.push(image);
  }
  return names;
}

/** A request whose body is not JSON (uploads, downloads); errors as ApiClient reports them. */
async function send(api: ApiClient, method: string, path: string, init: { body?: FormData }): Promise<Response> {
  const res = await api.send(method, path, init);
  if (!res.ok || !res.body) {
    const err = ((await res.json().catch(() => ({}))) as { error?: { message?: string; code?: string } }).error;
    throw new CliError(`${err?.message ?? `HTTP ${res.status}`}${err?.code ? ` (${err.code})` : ""}`);
  }
  return res;
}

/** Relative paths mean this machine's working directory, which the gateway cannot know. */
export function absoluteUri(uri: string): string {
  if (/^[a-z][a-z0-9+.-]+:/i.test(uri)) return uri;
  const url = pathToFileURL(resolve(uri)).href;
  return uri.endsWith("/") && !url.endsWith("/") ? `${url}/` : url;
}
