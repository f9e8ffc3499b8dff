/** The local-directory store: the default for a single machine. */
import type { Dirent } from "node:fs";
import { constants, existsSync } from "node:fs";
import { lstat, mkdir, open, readdir, rmdir, stat, unlink } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import type { Readable } from "node:stream";
import { fromFsError, StorageError } from "./errors.ts";
import { compareKeys, discard, isTempName, rangeStart, readParts, writeFileAtomically } from "./shared.ts";
import type { Body, ObjectInfo, ObjectStore } from "./store.ts";
import { checkObjectKey, checkPrefix, fileUrl } from "./uri.ts";

export type FileStoreOptions = {
  /**
   * Symbolic links below the root are refused, never followed: a directory
   * on the way to an object, or the object itself, that is a link fails the
   * call (access_denied). For directories a client can also write in (a batch
   * job's output), where a planted link would lead the platform's reads,
   * writes and deletes elsewhere. The root itself is the caller's to check.
   */
  noLinks?: boolean;
};

/** A directory held open by hold(): its name, and the handle its keys go through. */
type Held = { prefix: string; handle: FileHandle; identity: string };

// Linux names every open descriptor here; a path through it reaches the very
// directory that was opened, whatever has been renamed or linked since.
const FD_DIR = "/proc/self/fd";
let fdPaths: boolean | undefined;
function openDirectoriesHavePaths(): boolean {
  fdPaths ??= existsSync(FD_DIR);
  return fdPaths;
}

export class FileStore implements ObjectStore {
  readonly url: string;
  /** Absolute path of the root directory (created on first write). */
  readonly root: string;
  private readonly noLinks: boolean;
  private readonly held = new Map<string, Held>();

  constructor(root: string, options: FileStoreOptions = {}) {
    this.root = resolve(root);
    this.url = fileUrl(this.root);
    this.noLinks = options.noLinks ?? false;
  }

  uri(key: string): string {
    return fileUrl(this.pathOf(key));
  }

  localPath(key: string): string {
    return this.pathOf(key);
  }

  async put(key: string, body: Body): Promise<{ size: number }> {
    let path: string;
    try {
      path = this.pathOf(key);
      await this.refuseLinks(key);
    } catch (error) {
      discard(body);
      throw error;
    }
    return { size: await writeFileAtomically(this.ioPath(key), body, fileUrl(path)) };
  }

  async get(key: string, range?: { start: number }): Promise<Readable> {
    const start = rangeStart(range);
    const path = this.pathOf(key);
    await this.refuseLinks(key);
    let handle: FileHandle | undefined;
    try {
      handle = await open(this.ioPath(key), this.noLinks ? constants.O_RDONLY | constants.O_NOFOLLOW : "r");
      // Opening a directory succeeds on Linux; only reading it fails.
      if ((await handle.stat()).isDirectory()) throw Object.assign(new Error("is a directory"), { code: "EISDIR" });
    } catch (error) {
      await handle?.close();
      throw this.linkRefused(error, path) ?? fromFsError(error, fileUrl(path), "read");
    }
    return handle.createReadStream({ start, autoClose: true });
  }

  async head(key: string): Promise<{ size: number } | null> {
    const path = this.pathOf(key);
    try {
      await this.refuseLinks(key);
      // A link is not an object here: it is not followed.
      const info = this.noLinks ? await lstat(this.ioPath(key)) : await stat(this.ioPath(key));
      return info.isFile() ? { size: info.size } : null;
    } catch (error) {
      const mapped = fromFsError(error, fileUrl(path), "read");
      if (mapped.code === "not_found") return null;
      throw mapped;
    }
  }

  async *list(prefix = ""): AsyncGenerator<ObjectInfo> {
    checkPrefix(prefix, this.url);
    // Start from the deepest directory the prefix fully names; filter the rest by name.
    const dirKey = prefix.slice(0, prefix.lastIndexOf("/") + 1);
    yield* this.walk(dirKey, prefix);
  }

  private async *walk(dirKey: string, prefix: string): AsyncGenerator<ObjectInfo> {
    const dir = join(this.root, dirKey);
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (error) {
      const mapped = fromFsError(error, fileUrl(dir), "read");
      if (mapped.code === "not_found") return;
      throw mapped;
    }
    const children: { key: string; isDir: boolean }[] = [];
    for (const entry of entries) {
      if (isTempName(entry.name)) continue;
      let isDir = entry.isDirectory();
      let isFile = entry.isFile();
      if (entry.isSymbolicLink()) {
        if (this.noLinks) continue;
        const target = await stat(join(dir, entry.name)).catch(() => undefined);
        isDir = target?.isDirectory() ?? false;
        isFile = target?.isFile() ?? false;
      }
      if (!isDir && !isFile) continue;
      // A directory's keys all start with "name/": sorting on that gives S3's key order.
      const key = `${dirKey}${entry.name}${isDir ? "/" : ""}`;
      if (isDir ? key.startsWith(prefix) || prefix.startsWith(key) : key.startsWith(prefix)) {
        children.push({ key, isDir });
      }
    }
    children.sort((a, b) => compareKeys(a.key, b.key));
    for (const child of children) {
      if (child.isDir) {
        yield* this.walk(child.key, prefix);
        continue;
      }
      const info = await stat(join(this.root, child.key)).catch(() => undefined);
      // Deleted since the directory was read: S3 listings are not snapshots either.
      if (info !== undefined) yield { key: child.key, size: info.size };
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.pathOf(key);
    try {
      await this.refuseLinks(key);
      // unlink() removes a link itself, never what it points to.
      await unlink(this.ioPath(key));
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === "ENOENT" || code === "ENOTDIR" || code === "EISDIR") return;
      throw fromFsError(error, fileUrl(path), "write");
    }
  }

  async concat(
    partKeys: readonly string[],
    destKey: string,
    options: { overwrite?: boolean } = {},
  ): Promise<{ size: number }> {
    for (const key of partKeys) checkObjectKey(key, this.url);
    const dest = this.pathOf(destKey);
    await this.refuseLinks(destKey);
    return {
      size: await writeFileAtomically(this.ioPath(destKey), readParts(this, partKeys), fileUrl(dest), {
        replace: options.overwrite ?? true,
      }),
    };
  }

  async download(key: string, destPath: string): Promise<void> {
    const dest = resolve(destPath);
    const source = await this.get(key);
    await writeFileAtomically(dest, source, fileUrl(dest));
  }

  /**
   * Holds the directory `prefix` names open (creating it when `create`), and
   * from then on reaches its keys through the open handle where the system
   * allows (Linux): renaming the directory or putting a link in its place
   * cannot send a write, read or delete anywhere else. A link at the name is
   * refused (access_denied). False when it does not exist and `create` is off.
   */
  async hold(prefix: string, create: boolean): Promise<boolean> {
    const key = this.directoryKey(prefix);
    if (this.held.has(key)) return true;
    const path = this.pathOf(key);
    let handle: FileHandle;
    try {
      if (create) {
        await mkdir(dirname(path), { recursive: true });
        await mkdir(path).catch((e: unknown) => {
          if ((e as { code?: unknown }).code !== "EEXIST") throw e;
        });
      }
      handle = await open(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (!create && code === "ENOENT") return false;
      // O_NOFOLLOW|O_DIRECTORY answers ENOTDIR for a link: say which it is.
      if ((await lstat(path).catch(() => undefined))?.isSymbolicLink()) throw this.refusedLink(path, path);
      throw fromFsError(error, fileUrl(path), "write");
    }
    const info = await handle.stat({ bigint: true });
    this.held.set(key, { prefix: key, handle, identity: `${info.dev}:${info.ino}` });
    return true;
  }

  /**
   * What the name `prefix` is now: "absent", "link", "directory", "other";
   * for a held directory "directory" only while the name still leads to the
   * very directory held, "moved" when it leads elsewhere or nowhere.
   */
  async directoryState(prefix: string): Promise<"absent" | "link" | "directory" | "other" | "moved"> {
    const key = this.directoryKey(prefix);
    const info = await lstat(this.pathOf(key), { bigint: true }).catch((e: unknown) => {
      if ((e as { code?: unknown }).code === "ENOENT") return undefined;
      throw fromFsError(e, fileUrl(this.pathOf(key)), "read");
    });
    if (info?.isSymbolicLink()) return "link";
    const held = this.held.get(key);
    if (held) return info?.isDirectory() && `${info.dev}:${info.ino}` === held.identity ? "directory" : "moved";
    if (info === undefined) return "absent";
    return info.isDirectory() ? "directory" : "other";
  }

  /**
   * Empties a held directory of what is left in it (files and links, which
   * are removed themselves, never followed; subdirectories stay), then
   * removes it if its name still leads to it. Nothing is ever deleted
   * recursively, so nothing outside can be.
   */
  async clear(prefix: string): Promise<void> {
    const key = this.directoryKey(prefix);
    if (!(await this.hold(key, false))) return;
    const held = this.held.get(key) as Held;
    const dir = this.heldPath(held);
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (error) {
      throw fromFsError(error, fileUrl(this.pathOf(key)), "write");
    }
    for (const entry of entries) {
      if (!entry.isDirectory()) await unlink(join(dir, entry.name)).catch(() => undefined);
    }
    if ((await this.directoryState(key)) === "directory") await rmdir(this.pathOf(key)).catch(() => undefined);
    this.held.delete(key);
    await held.handle.close().catch(() => undefined);
  }

  close(): void {
    for (const held of this.held.values()) void held.handle.close().catch(() => undefined);
    this.held.clear();
  }

  /** Where `key` is, by name: what messages show and localPath() gives. */
  private pathOf(key: string): string {
    // checkObjectKey rejects "..", "." and absolute keys, so the join cannot leave the root.
    return join(this.root, checkObjectKey(key, this.url));
  }

  /** Where `key` is opened: through a held directory's handle when it lies in one. */
  private ioPath(key: string): string {
    const path = this.pathOf(key);
    const held = this.heldFor(key);
    return held ? join(this.heldPath(held), key.slice(held.prefix.length + 1)) : path;
  }

  /** The held directory itself, as opened. */
  private heldPath(held: Held): string {
    return openDirectoriesHavePaths() ? `${FD_DIR}/${held.handle.fd}` : this.pathOf(held.prefix);
  }

  private heldFor(key: string): Held | undefined {
    for (const held of this.held.values()) if (key.startsWith(`${held.prefix}/`)) return held;
    return undefined;
  }

  /** "a/b/" or "a/b" as "a/b", checked. */
  private directoryKey(prefix: string): string {
    const key = prefix.endsWith("/") ? prefix.slice(0, -1) : prefix;
    checkObjectKey(key, this.url);
    return key;
  }

  /**
   * noLinks: every directory between the root and `key` that is not reached
   * through a held handle must not be a link. A name that does not exist yet
   * is created by mkdir as a real directory.
   */
  private async refuseLinks(key: string): Promise<void> {
    if (!this.noLinks) return;
    const held = this.heldFor(key);
    const from = held ? held.prefix.length + 1 : 0;
    const segments = key.slice(from).split("/").slice(0, -1);
    let dir = held ? this.heldPath(held) : this.root;
    let named = held ? this.pathOf(held.prefix) : this.root;
    for (const segment of segments) {
      dir = join(dir, segment);
      named = join(named, segment);
      const info = await lstat(dir).catch(() => undefined);
      if (info === undefined) return;
      if (info.isSymbolicLink()) throw this.refusedLink(named, this.pathOf(key));
    }
  }

  private refusedLink(link: string, object: string): StorageError {
    const where = relative(this.root, link);
    return new StorageError(
      "access_denied",
      fileUrl(object),
      `${fileUrl(object)}: refused: ${where === "" || where.startsWith(`..${sep}`) ? fileUrl(link) : `"${where}"`} is a symbolic link, which is not followed here`,
    );
  }

  /** An open that met a link where links are refused (O_NOFOLLOW: ELOOP). */
  private linkRefused(error: unknown, path: string): StorageError | undefined {
    if (!this.noLinks || (error as { code?: unknown }).code !== "ELOOP") return undefined;
    return this.refusedLink(path, path);
  }
}
