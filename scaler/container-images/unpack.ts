/**
 * An image's layers unpacked, bottom first, into one root filesystem (issue 24), as a container
 * engine would: OCI whiteouts (`.wh.<name>` removes a lower layer's `<name>`, `.wh..wh..opq` empties
 * a directory of lower layers' content) and, above all, confinement: nothing a layer holds may
 * write outside the rootfs.
 *
 * node-tar's `Unpack` is not used: it guards paths within one archive (it strips absolute paths,
 * refuses `..`, and refuses to create through a symlink it sees), but it writes entries
 * concurrently, knows nothing of whiteouts (which must act on earlier layers only), and a hard
 * link's target is resolved by the kernel, through any symlink a lower layer left. So node-tar
 * parses (gzip, zstd and plain tar, PAX and GNU long names) and this module writes, one entry
 * after the other, with synchronous calls: every path is resolved component by component inside
 * the rootfs as a chroot would (a symlink, absolute or relative, never leaves the root: `a -> /etc`
 * then `a/passwd` writes the rootfs's own `/etc/passwd`, as docker's FollowSymlinkInScope does), so
 * a merged-usr `lib -> usr/lib` keeps working and an escape lands inside. Entries naming `..`, and
 * whiteouts of `.` or `..`, are refused outright.
 *
 * Not carried over: device nodes and FIFOs (`/dev` is mounted when the image runs, run.ts),
 * extended attributes (file capabilities), directory times.
 */
import { once } from "node:events";
import {
  closeSync,
  createReadStream,
  existsSync,
  fchmodSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  chmodSync,
  chownSync,
  constants,
  writeSync,
} from "node:fs";
import { chmod, mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { dirname, join, posix, resolve } from "node:path";
import { Parser, type ReadEntry } from "tar";
import * as zlib from "node:zlib";
import { type PulledImage, repositoryKey } from "./pull.ts";

export type LayerBlob = { path: string; mediaType: string; digest?: string };

const LAYER_TYPES = new Set(
  [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
  ].flatMap((t) => [t, `${t}+gzip`, `${t}+zstd`, `${t}.gzip`]),
);
LAYER_TYPES.add("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip");

const WHITEOUT = ".wh.";
const OPAQUE = ".wh..wh..opq";

/**
 * The host path of `path` inside `root`, every symlink on the way resolved inside the root (an
 * absolute target starts again at the root, `..` stops at it), as a chroot would; the last
 * component is left unresolved unless `followLast`. Components that do not exist yet are kept as
 * named.
 */
export function resolveInRoot(root: string, path: string, followLast = false): string {
  let queue = path.split("/").filter((p) => p !== "" && p !== ".");
  const resolved: string[] = [];
  let hops = 0;
  while (queue.length > 0) {
    const part = queue.shift() as string;
    if (part === "..") {
      resolved.pop();
      continue;
    }
    if (queue.length === 0 && !followLast) {
      resolved.push(part);
      break;
    }
    const here = join(root, ...resolved, part);
    const st = lstatSync(here, { throwIfNoEntry: false });
    if (st?.isSymbolicLink()) {
      if (++hops > 40) throw new Error(`too many symbolic links resolving ${path} in the image`);
      const target = readlinkSync(here);
      if (target.startsWith("/")) resolved.length = 0;
      queue = [...target.split("/").filter((p) => p !== "" && p !== "."), ...queue];
      continue;
    }
    resolved.push(part);
  }
  return join(root, ...resolved);
}

/** An entry's name as a path relative to the root: a leading `/` or `.//` dropped; `..` refused. */
function entryName(name: string, layer: string): string {
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw new Error(`${layer}: entry ${JSON.stringify(name)} names "..": refused`);
  return parts.join("/");
}

/**
 * Applies one layer on top of what `root` holds. Synchronous writes, one entry after another, so
 * each entry sees every earlier one (a symlink the same layer made just before included).
 */
export async function applyLayer(rootDir: string, layer: LayerBlob): Promise<void> {
  const root = resolve(rootDir);
  const label = `layer ${layer.digest ?? layer.path}`;
  if (layer.mediaType.endsWith("+encrypted") || !LAYER_TYPES.has(layer.mediaType))
    throw new Error(`${label}: unsupported layer media type ${JSON.stringify(layer.mediaType)}`);
  if (
    layer.mediaType.endsWith("zstd") &&
    typeof (zlib as { zstdDecompressSync?: unknown }).zstdDecompressSync !== "function"
  )
    throw new Error(`${label}: a zstd layer needs Node 22.15 or newer (this is ${process.version})`);
  // What this layer wrote: an opaque directory keeps these and drops only lower layers' content.
  const written = new Set<string>();
  const wrote = (path: string) => {
    for (let p = path; p.length > root.length && !written.has(p); p = dirname(p)) written.add(p);
  };
  let failure: Error | undefined;
  // The file being written, closed here if the layer stops before its end.
  let open: number | undefined;
  const fail = (error: unknown) => {
    failure ??= error instanceof Error ? error : new Error(String(error));
  };

  const handle = (entry: ReadEntry): number | undefined => {
    const name = entryName(entry.path, label);
    if (name === "") return undefined; // the root itself: it stays as the image's first layer made it
    const base = posix.basename(name);
    const parent = resolveInRoot(root, posix.dirname(name), true);
    if (base.startsWith(WHITEOUT)) {
      if (base === OPAQUE) {
        if (lstatSync(parent, { throwIfNoEntry: false })?.isDirectory()) dropUnwritten(parent, written);
        return undefined;
      }
      const hidden = base.slice(WHITEOUT.length);
      if (hidden.startsWith(WHITEOUT)) return undefined; // other aufs metadata (`.wh..wh..plnk`)
      if (hidden === "" || hidden === "." || hidden === "..")
        throw new Error(`${label}: whiteout ${JSON.stringify(entry.path)} names no file: refused`);
      const target = join(parent, hidden);
      if (!written.has(target)) rmSync(target, { recursive: true, force: true });
      return undefined;
    }
    mkdirSync(parent, { recursive: true });
    const dest = join(parent, base);
    if (!dest.startsWith(`${root}/`)) throw new Error(`${label}: entry ${JSON.stringify(entry.path)} leaves the root`);
    const existing = lstatSync(dest, { throwIfNoEntry: false });
    const mode = (entry.mode ?? 0o644) & 0o7777;
    const [uid, gid] = [entry.uid ?? 0, entry.gid ?? 0];
    const mtime = entry.mtime ?? new Date(0);
    switch (entry.type) {
      case "Directory": {
        if (existing && !existing.isDirectory()) rmSync(dest, { recursive: true, force: true });
        if (!existing?.isDirectory()) mkdirSync(dest);
        chownSync(dest, uid, gid);
        chmodSync(dest, mode);
        wrote(dest);
        return undefined;
      }
      case "File":
      case "OldFile":
      case "ContiguousFile": {
        if (existing) rmSync(dest, { recursive: true, force: true });
        const fd = openSync(
          dest,
          constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
          0o600,
        );
        wrote(dest);
        open = fd;
        entry.on("end", () => {
          open = undefined;
          try {
            fchownSync(fd, uid, gid);
            fchmodSync(fd, mode); // after chown, which clears setuid bits
            futimesSync(fd, mtime, mtime);
          } catch (error) {
            fail(error);
          } finally {
            closeSync(fd);
          }
        });
        return fd;
      }
      case "SymbolicLink": {
        if (existing) rmSync(dest, { recursive: true, force: true });
        symlinkSync(entry.linkpath ?? "", dest);
        lchownSync(dest, uid, gid);
        lutimesSync(dest, mtime, mtime);
        wrote(dest);
        return undefined;
      }
      case "Link": {
        const linkName = entryName(entry.linkpath ?? "", label);
        // The link's own name is not followed (a hard link to a symlink is to the symlink), but
        // every directory on the way is resolved inside the root like any other path.
        const source = resolveInRoot(root, linkName, false);
        const st = lstatSync(source, { throwIfNoEntry: false });
        if (!st || st.isDirectory())
          throw new Error(
            `${label}: hard link ${JSON.stringify(entry.path)} to ${JSON.stringify(entry.linkpath)}, which is not a file in the image`,
          );
        if (existing) rmSync(dest, { recursive: true, force: true });
        linkSync(source, dest);
        wrote(dest);
        return undefined;
      }
      default:
        // Devices, FIFOs and whatever else: not carried over (see the top of this file).
        return undefined;
    }
  };

  const parser = new Parser({
    strict: true,
    onReadEntry: (entry: ReadEntry) => {
      if (failure) return entry.resume();
      let fd: number | undefined;
      try {
        fd = handle(entry);
      } catch (error) {
        fail(error);
      }
      if (fd === undefined) return entry.resume();
      const out = fd;
      entry.on("data", (chunk: Buffer) => {
        if (failure) return;
        try {
          for (let off = 0; off < chunk.length; ) off += writeSync(out, chunk, off);
        } catch (error) {
          fail(error);
        }
      });
    },
  });
  const ended = new Promise<void>((resolve, reject) => {
    parser.once("end", resolve);
    parser.once("error", reject);
  });
  ended.catch(() => undefined);
  try {
    for await (const chunk of createReadStream(layer.path)) {
      if (failure) break;
      if (!parser.write(chunk as Buffer)) await once(parser, "drain");
    }
    if (!failure) {
      parser.end();
      await ended;
    }
  } catch (error) {
    fail(error);
  }
  if (open !== undefined) closeSync(open);
  if (failure) throw failure.message.startsWith(label) ? failure : new Error(`${label}: ${failure.message}`);
}

/** Removes what `dir` holds that this layer did not write (an opaque directory). */
function dropUnwritten(dir: string, written: Set<string>): void {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (!written.has(path)) rmSync(path, { recursive: true, force: true });
    else if (lstatSync(path).isDirectory()) dropUnwritten(path, written);
  }
}

const unpacking = new Map<string, Promise<string>>();

/**
 * The image's rootfs, `<cacheDir>/rootfs/<repository key>/<digest hex>` (pull.ts, repositoryKey): unpacked into a temp folder renamed into
 * place once every layer is in, so a crash never leaves a half rootfs that looks complete; found
 * there the next time. Concurrent calls for one image share one unpack.
 */
export function unpackImage(image: PulledImage, cacheDir: string): Promise<string> {
  const rootfs = join(cacheDir, "rootfs", repositoryKey(image.repository), image.digest.replace(/^sha256:/, ""));
  let job = unpacking.get(rootfs);
  if (!job) {
    job = unpackOnce(image, rootfs).finally(() => unpacking.delete(rootfs));
    unpacking.set(rootfs, job);
  }
  return job;
}

async function unpackOnce(image: PulledImage, rootfs: string): Promise<string> {
  if (existsSync(rootfs)) return rootfs;
  await mkdir(dirname(rootfs), { recursive: true });
  const temp = await mkdtemp(join(dirname(rootfs), ".unpack-"));
  try {
    await chmod(temp, 0o755); // mkdtemp's 0700 would keep the image's non-root user out of its own root
    for (const layer of image.layers) await applyLayer(temp, layer);
    await rename(temp, rootfs).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
      await rm(temp, { recursive: true, force: true }); // another process unpacked it meanwhile
    });
    return rootfs;
  } catch (error) {
    await rm(temp, { recursive: true, force: true });
    throw new Error(`unpacking ${image.repository}@${image.digest}: ${(error as Error).message}`);
  }
}
