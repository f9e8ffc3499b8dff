/**
 * Storage roots: the only file:// directories and s3:// buckets/prefixes a
 * client-named URI may reach (docs/security.md, "Storage"). An operator (an
 * admin of the install's own organization) reaches whole roots and the
 * admin-only roots; the install's own users `<root>/<key id>/`; another
 * organization's admins `<root>/orgs/<org>/` and its users
 * `<root>/orgs/<org>/<id>/`, so one organization's data never reaches
 * another's. File URIs are checked after `..` and symlinks are resolved, so a
 * link planted inside a root cannot lead out of it; an area is
 * `<real root>/<segments>` by name, never followed, so an area any of whose
 * segments is a link (planted by anyone who can write there) leads nowhere.
 */
import type { BigIntStats } from "node:fs";
import { lstat, realpath, stat } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, sep } from "node:path";
import { PlatformError } from "../contracts/errors.ts";
import { DEFAULT_ORG, isOperator } from "../contracts/orgs.ts";
import type { S3Settings } from "./s3-settings.ts";
import { StorageError } from "./errors.ts";
import { fileUrl, joinKey, parseStorageUri, s3Url, type StorageLocation } from "./uri.ts";

export type StorageRoot =
  | { scheme: "file" /** Absolute, as configured (not symlink-resolved). */; path: string }
  | { scheme: "s3"; bucket: string /** "" for the whole bucket. */; prefix: string };

/** Who names the URI: its id, role and organization (absent: the install's own, as before organizations). */
export type StorageViewer = { id: string; role: "admin" | "user"; org?: string };

const operates = (viewer: StorageViewer) => isOperator({ org: viewer.org ?? DEFAULT_ORG, role: viewer.role });

/**
 * The path segments of the viewer's area below each root (none for an operator: whole roots), or
 * undefined when one would not be a single safe segment (then it gets no area at all).
 */
function areaSegments(viewer: StorageViewer): string[] | undefined {
  const org = viewer.org ?? DEFAULT_ORG;
  const segments =
    org === DEFAULT_ORG
      ? viewer.role === "admin"
        ? []
        : [viewer.id]
      : viewer.role === "admin"
        ? ["orgs", org]
        : ["orgs", org, viewer.id];
  return segments.every((s) => SAFE_SEGMENT.test(s)) ? segments : undefined;
}

/** A URI a client named, after confinement. */
export type ConfinedUri = {
  /** Where the object really is (symlinks resolved): what the platform reads or writes. */
  uri: string;
  /** How messages name it: the client's own relative name, or the canonical form of the absolute URI it gave. */
  shown: string;
  /** The client gave a name relative to its own area. */
  relative: boolean;
  /**
   * For a file:// object that exists: "dev:ino" of what was judged. A later
   * open proves with it (fstat on the handle) that it holds this object, not
   * one swapped in under the same name since.
   */
  identity?: string;
};

const SCHEME = /^[a-z][a-z0-9+.-]+:/i;
const SAFE_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/**
 * Parses a comma-separated list of roots (absolute paths, file:// URLs,
 * s3://bucket[/prefix]); errors name `variable`, so an operator knows which setting is wrong.
 */
export function parseStorageRoots(value: string | undefined, variable: string): StorageRoot[] {
  const roots: StorageRoot[] = [];
  for (const item of (value ?? "").split(",").map((s) => s.trim())) {
    if (item === "") continue;
    roots.push(parseStorageRoot(item, variable));
  }
  return roots;
}

export function parseStorageRoot(item: string, variable: string): StorageRoot {
  if (!SCHEME.test(item) && !isAbsolute(item)) {
    throw new Error(
      `${variable}: "${item}" is a relative path; give absolute paths, file:///dir or s3://bucket[/prefix], separated by commas`,
    );
  }
  let location: StorageLocation;
  try {
    location = parseStorageUri(item);
  } catch (e) {
    throw new Error(`${variable}: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (location.scheme === "file") return { scheme: "file", path: location.path };
  return { scheme: "s3", bucket: location.bucket, prefix: location.key };
}

/** The root as a URI, with a trailing "/" (it is a directory or prefix). */
export function rootUri(root: StorageRoot): string {
  if (root.scheme === "file") return root.path === "/" ? "file:///" : `${fileUrl(root.path)}/`;
  return `${s3Url(root.bucket, root.prefix)}/`;
}

export class StoragePolicy {
  readonly roots: readonly StorageRoot[];
  readonly adminRoots: readonly StorageRoot[];
  /** How the s3:// URIs this policy lets through are reached (settings.storage.s3); travels with the roots to every batch step. */
  readonly s3: S3Settings;

  constructor(options: { roots?: readonly StorageRoot[]; adminRoots?: readonly StorageRoot[]; s3?: S3Settings } = {}) {
    this.roots = options.roots ?? [];
    this.adminRoots = options.adminRoots ?? [];
    this.s3 = options.s3 ?? {};
  }

  static fromSettings(settings: {
    storageRoots: readonly StorageRoot[];
    adminStorageRoots: readonly StorageRoot[];
    storage?: { s3: S3Settings };
  }): StoragePolicy {
    return new StoragePolicy({
      roots: settings.storageRoots,
      adminRoots: settings.adminStorageRoots,
      s3: settings.storage?.s3,
    });
  }

  /** The areas `viewer` may use, in order; the first file area is where relative names go. */
  areasFor(viewer: StorageViewer): StorageRoot[] {
    if (operates(viewer)) return [...this.roots, ...this.adminRoots];
    const segments = areaSegments(viewer);
    if (!segments) return [];
    return this.roots.map((root) =>
      root.scheme === "file"
        ? { scheme: "file", path: join(root.path, ...segments) }
        : { scheme: "s3", bucket: root.bucket, prefix: joinKey(root.prefix, segments.join("/")) },
    );
  }

  /** Where relative names of `viewer` resolve, if anywhere. */
  home(viewer: StorageViewer): string | undefined {
    const area = this.areasFor(viewer).find((a) => a.scheme === "file");
    return area?.scheme === "file" ? area.path : undefined;
  }

  /**
   * Resolves and checks a client-named URI; throws 403 storage_forbidden
   * (naming the allowed areas) before anything is read or written, or 400
   * invalid_uri for a URI that does not parse. `field` names it in errors.
   */
  async confine(uri: string, viewer: StorageViewer, field: string): Promise<ConfinedUri> {
    const areas = this.areasFor(viewer);
    const relative = !SCHEME.test(uri) && !isAbsolute(uri);
    const home = this.home(viewer);
    if (relative && home === undefined) {
      throw this.forbidden(
        uri,
        viewer,
        field,
        "a relative name resolves under your own area of the first file:// root, and there is none",
      );
    }
    let location: StorageLocation;
    try {
      location = parseStorageUri(uri, home);
    } catch (e) {
      if (e instanceof StorageError) throw new PlatformError(400, "invalid_uri", `${field}: ${e.message}`, field);
      throw e;
    }
    const slash = uri.endsWith("/") ? "/" : "";
    if (location.scheme === "s3") {
      const allowed = areas.some(
        (a) => a.scheme === "s3" && a.bucket === location.bucket && within(location.key, a.prefix, "/"),
      );
      if (!allowed) throw this.forbidden(uri, viewer, field);
      const canonical = `${location.url}${slash}`;
      return { uri: canonical, shown: relative ? uri : canonical, relative };
    }
    // The file system cannot name it; left to realpath it would be a TypeError, not the client's error.
    if (location.path.includes("\0"))
      throw new PlatformError(400, "invalid_uri", `${field}: "${uri}" contains a NUL character`, field);
    if (relative && !within(location.path, home as string, sep)) {
      throw this.forbidden(uri, viewer, field, "a relative name may not climb out of your area");
    }
    const real = await realLocation(location.path, () =>
      this.forbidden(uri, viewer, field, "it goes through a symbolic link whose target does not exist"),
    );
    const areasHere = await this.fileAreas(viewer);
    const linked = areasHere.find(
      (a) => a.linked && (within(location.path, a.named, sep) || within(location.path, a.real, sep)),
    );
    if (linked) {
      throw this.forbidden(
        uri,
        viewer,
        field,
        `your area ${fileUrl(linked.named)}/ is a symbolic link, which is never followed; the operator must replace it with a directory`,
      );
    }
    // Inside the real root and, but for an operator, inside <real root>/<segments> itself.
    if (!areasHere.some((a) => within(real, a.root, sep) && within(real, a.real, sep)))
      throw this.forbidden(uri, viewer, field);
    const identity = await identify(real, () =>
      this.forbidden(uri, viewer, field, "it changed while it was being checked"),
    );
    const withSlash = (p: string) => `${fileUrl(p)}${slash && p !== "/" ? "/" : ""}`;
    return {
      uri: withSlash(real),
      shown: relative ? uri : withSlash(location.path),
      relative,
      ...(identity ? { identity } : {}),
    };
  }

  /**
   * The file areas of `viewer` as real locations: an operator's are whole roots
   * (a root may be a link, and is followed); anyone else's are
   * `<real root>/<segments>`, with `linked` when any segment on the way is a symbolic link.
   */
  private async fileAreas(
    viewer: StorageViewer,
  ): Promise<{ named: string; root: string; real: string; linked: boolean }[]> {
    const realOf = (path: string) => realLocation(path, () => undefined).catch(() => path);
    if (operates(viewer)) {
      const roots = [...this.roots, ...this.adminRoots].flatMap((r) => (r.scheme === "file" ? [r.path] : []));
      return Promise.all(
        roots.map(async (path) => {
          const real = await realOf(path);
          return { named: path, root: real, real, linked: false };
        }),
      );
    }
    const segments = areaSegments(viewer);
    if (!segments) return [];
    const roots = this.roots.flatMap((r) => (r.scheme === "file" ? [r.path] : []));
    const isLink = async (path: string) => (await lstat(path).catch(() => undefined))?.isSymbolicLink() ?? false;
    return Promise.all(
      roots.map(async (path) => {
        const root = await realOf(path);
        const ways = segments.map((_, i) => `${root === sep ? "" : root}${sep}${segments.slice(0, i + 1).join(sep)}`);
        const linked = (await Promise.all(ways.map(isLink))).some(Boolean);
        return { named: join(path, ...segments), root, real: ways.at(-1) as string, linked };
      }),
    );
  }

  /** The areas as the key may use them, for messages and GET /v1/storage. */
  describe(viewer: StorageViewer): string {
    const areas = this.areasFor(viewer);
    if (areas.length === 0) {
      return (
        "this platform allows no storage to this key: no storage roots are configured (the operator sets PLATFORM_STORAGE_ROOTS" +
        `${operates(viewer) ? ", or PLATFORM_ADMIN_STORAGE_ROOTS for operators' keys" : ""}; \`platform up\` allows its data directory's batch/ and the directory it was started from)`
      );
    }
    return `this key may use ${areas.map(rootUri).join(", ")}`;
  }

  private forbidden(uri: string, viewer: StorageViewer, field: string, why?: string): PlatformError {
    const home = this.home(viewer);
    const fix =
      this.areasFor(viewer).length === 0
        ? "; upload the input with POST /v1/files (purpose=batch) and pass input_file_id instead"
        : `; put the object there${home ? `, or give a relative name (it resolves under ${rootUri({ scheme: "file", path: home })})` : ""}`;
    return new PlatformError(
      403,
      "storage_forbidden",
      `${field}: "${uri}" is outside the storage this key may use${why ? ` (${why})` : ""}: ${this.describe(viewer)}${fix}`,
      field,
    );
  }
}

/** `path` equals `root` or lies below it, segment-wise ("a/bc" is not under "a/b"). */
function within(path: string, root: string, separator: string): boolean {
  if (root === "" || path === root) return true;
  const base = root.endsWith(separator) ? root : `${root}${separator}`;
  return path.startsWith(base);
}

/**
 * The real path of `path`, or for one that does not exist yet, the real path
 * of its nearest existing ancestor with the rest appended. A name that exists
 * only as a dangling symbolic link cannot be judged: `dangling` decides.
 */
async function realLocation(path: string, dangling: () => Error | undefined, attempt = 0): Promise<string> {
  try {
    return await realpath(path);
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code !== "ENOENT" && code !== "ENOTDIR") throw e;
  }
  const parent = dirname(path);
  if (parent === path) return path;
  const entry = await lstat(path).catch(() => undefined);
  // Created between the realpath and this lstat (a writer racing the check): judge it as it is now.
  if (entry && !entry.isSymbolicLink() && attempt < 3) return realLocation(path, dangling, attempt + 1);
  if (entry) {
    const error = dangling();
    if (error) throw error;
  }
  return join(await realLocation(parent, dangling), basename(path));
}

/**
 * "dev:ino" of `real` (a path realpath gave) when it exists, undefined when
 * not. A component swapped for a link between that realpath and this lstat
 * would make it another object's identity: the path must still be real after.
 */
async function identify(real: string, changed: () => Error): Promise<string | undefined> {
  let info: BigIntStats;
  try {
    info = await lstat(real, { bigint: true });
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    throw e;
  }
  if ((await realpath(real).catch(() => undefined)) !== real) throw changed();
  return `${info.dev}:${info.ino}`;
}

/** Whether two file:// locations are the same file (hard links included), when both exist. */
export async function sameFile(a: string, b: string): Promise<boolean> {
  if (a === b) return true;
  if (!a.startsWith("file:") || !b.startsWith("file:")) return false;
  const [sa, sb] = await Promise.all([
    stat(new URL(a)).catch(() => undefined),
    stat(new URL(b)).catch(() => undefined),
  ]);
  return sa !== undefined && sb !== undefined && sa.dev === sb.dev && sa.ino === sb.ino;
}
