/**
 * Where a job's client-named input and output really are, and the checks that trust them: a
 * key's URIs are confined to its storage areas (policy.ts `confine`); a trusted caller inside the
 * platform (no key) names locations directly, absolute only. An output is never the input, and
 * replaces an existing object only when the request allows it.
 */
import { isAbsolute } from "node:path";
import { PlatformError } from "../contracts/errors.ts";
import { StorageError } from "./errors.ts";
import { openObject } from "./index.ts";
import { sameFile, type StoragePolicy, type StorageViewer } from "./policy.ts";
import type { S3Settings } from "./s3-settings.ts";
import { parseStorageUri, type StorageLocation } from "./uri.ts";

/** A job's input or output: its real location, as the client gave it, as messages show it, and whether it was confined. */
export type Located = { uri: string; given: string; shown: string; confined: boolean };

/** `uri` (the request's `field`) confined to `viewer`'s areas, or trusted as it is when there is no viewer. */
export async function locate(
  policy: StoragePolicy,
  uri: string,
  viewer: StorageViewer | undefined,
  field: "input" | "output",
): Promise<Located> {
  if (!viewer) return trusted(uri, field);
  return { ...(await policy.confine(uri, viewer, field)), given: uri, confined: true };
}

/**
 * Trusted callers (no viewer) name locations directly. The coordinator may
 * run on another machine, so a relative path would name a different file
 * there: only absolute ones are accepted.
 */
function trusted(uri: string, field: "input" | "output"): Located {
  let location: StorageLocation;
  try {
    location = parseStorageUri(uri);
  } catch (e) {
    if (e instanceof StorageError) throw new PlatformError(400, "invalid_uri", e.message, field);
    throw e;
  }
  if (!/^[a-z][a-z0-9+.-]+:/i.test(uri) && !isAbsolute(uri)) {
    throw new PlatformError(
      400,
      "invalid_uri",
      `${field}: "${uri}" is a relative path; send an absolute path, a file:// URL or s3://bucket/key`,
      field,
    );
  }
  const canonical = `${location.url}${uri.endsWith("/") && !location.url.endsWith("/") ? "/" : ""}`;
  return { uri: canonical, given: uri, shown: canonical, confined: false };
}

/** Output equal to input is refused; an existing output object too, unless the request may overwrite it. */
export async function checkOutput(input: Located, output: Located, overwrite: boolean, s3: S3Settings): Promise<void> {
  if (!/\.jsonl$/i.test(output.uri)) return; // a prefix receives <job id>.jsonl, a name no object has yet
  if (await sameFile(input.uri, output.uri)) {
    throw new PlatformError(
      400,
      "output_is_input",
      `output: "${output.given}" is the input itself; writing it would destroy the input. Choose another output`,
      "output",
    );
  }
  let exists = false;
  try {
    const { store, key } = openObject(output.uri, s3);
    try {
      exists = (await store.head(key)) !== null;
    } finally {
      store.close();
    }
  } catch {
    // Cannot tell now (storage down, a directory in the way): the coordinator checks again before writing.
  }
  if (exists && !overwrite) {
    throw new PlatformError(
      409,
      "output_exists",
      `output: "${output.given}" already exists; send "overwrite": true (CLI: --overwrite) to replace it, or choose another output`,
      "output",
    );
  }
}
