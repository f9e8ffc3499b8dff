/** The local-directory store: the default for a single machine. */
import type { Dirent } from "node:fs";
import { open, readdir, stat, unlink } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { fromFsError } from "./errors.ts";
import { compareKeys, discard, isTempName, rangeStart, readParts, writeFileAtomically } from "./shared.ts";
import type { Body, ObjectInfo, ObjectStore } from "./store.ts";
import { checkKey, checkPrefix, fileUrl } from "./uri.ts";

export class FileStore implements ObjectStore {
  readonly url: string;
  /** Absolute path of the root directory (created on first write). */
  readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
    this.url = fileUrl(this.root);
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
    } catch (error) {
      discard(body);
      throw error;
    }
    return { size: await writeFileAtomically(path, body, fileUrl(path)) };
  }

  async get(key: string, range?: { start: number }): Promise<Readable> {
    const start = rangeStart(range);
    const path = this.pathOf(key);
    let handle: FileHandle | undefined;
    try {
      handle = await open(path, "r");
      // Opening a directory succeeds on Linux; only reading it fails.
      if ((await handle.stat()).isDirectory()) throw Object.assign(new Error("is a directory"), { code: "EISDIR" });
    } catch (error) {
      await handle?.close();
      throw fromFsError(error, fileUrl(path), "read");
    }
    return handle.createReadStream({ start, autoClose: true });
  }

  async head(key: string): Promise<{ size: number } | null> {
    const path = this.pathOf(key);
    try {
      const info = await stat(path);
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
      await unlink(path);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === "ENOENT" || code === "ENOTDIR" || code === "EISDIR") return;
      throw fromFsError(error, fileUrl(path), "write");
    }
  }

  async concat(partKeys: readonly string[], destKey: string, options: { overwrite?: boolean } = {}): Promise<{ size: number }> {
    for (const key of partKeys) checkKey(key, this.url);
    const dest = this.pathOf(destKey);
    return { size: await writeFileAtomically(dest, readParts(this, partKeys), fileUrl(dest), { replace: options.overwrite ?? true }) };
  }

  async download(key: string, destPath: string): Promise<void> {
    const dest = resolve(destPath);
    const source = await this.get(key);
    await writeFileAtomically(dest, source, fileUrl(dest));
  }

  close(): void {}

  private pathOf(key: string): string {
    // checkKey rejects "..", "." and absolute keys, so the join cannot leave the root.
    return join(this.root, checkKey(key, this.url));
  }
}
