/**
 * Unpacking image layers (scaler/container-images/unpack.ts) from tar archives written here block by block,
 * so a test can hold what no honest builder writes: layers applied in order, whiteouts and opaque
 * directories acting on lower layers only, gzip and zstd, owners and modes, and every way out of
 * the rootfs we know of (absolute names, `..`, symlinks left by a lower or the same layer, hard
 * links, whiteouts through a symlink), each kept inside or refused, with the host untouched.
 */
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as zlib from "node:zlib";
import { Header } from "tar";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type PulledImage, repositoryKey } from "../../scaler/container-images/pull.ts";
import { applyLayer, resolveInRoot, unpackImage } from "../../scaler/container-images/unpack.ts";

type Entry = {
  path: string;
  type?: "File" | "Directory" | "SymbolicLink" | "Link";
  body?: string;
  linkpath?: string;
  mode?: number;
  uid?: number;
  gid?: number;
};

/** A tar archive holding exactly `entries`, names as given (no normalizing, unlike `tar.c`). */
function tarOf(entries: Entry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = Buffer.from(e.body ?? "");
    const header = Buffer.alloc(512);
    new Header({
      path: e.path,
      type: e.type ?? "File",
      size: e.type === undefined || e.type === "File" ? body.length : 0,
      mode: e.mode ?? (e.type === "Directory" ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      mtime: new Date(1_700_000_000_000),
      linkpath: e.linkpath,
    }).encode(header, 0);
    blocks.push(header);
    if (body.length > 0) blocks.push(body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

let work: string;
let root: string;
let outside: string;
let layers = 0;

/** Writes `entries` as a layer blob and applies it to `root`. */
async function layer(entries: Entry[], compress?: "gzip" | "zstd"): Promise<void> {
  const path = join(work, `layer-${layers++}`);
  const tar = tarOf(entries);
  writeFileSync(
    path,
    compress === "gzip" ? zlib.gzipSync(tar) : compress === "zstd" ? (zlib as any).zstdCompressSync(tar) : tar,
  );
  const mediaType = `application/vnd.oci.image.layer.v1.tar${compress ? `+${compress}` : ""}`;
  await applyLayer(root, { path, mediaType, digest: `layer-${layers}` });
}

const read = (path: string) => readFileSync(join(root, path), "utf8");
const has = (path: string) => lstatSync(join(root, path), { throwIfNoEntry: false }) !== undefined;

beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), "platform-unpack-"));
  root = join(work, "rootfs");
  outside = join(work, "outside");
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(join(outside, "victim"), "host");
  layers = 0;
});
afterEach(async () => {
  await rm(work, { recursive: true, force: true });
});

/** The host side of the test: `outside` holds its one file, as it did. */
const outsideUntouched = () => {
  expect(readdirSync(outside)).toEqual(["victim"]);
  expect(readFileSync(join(outside, "victim"), "utf8")).toBe("host");
  expect(statSync(join(outside, "victim")).nlink).toBe(1);
};

describe("layers in order", () => {
  it("a later layer adds to and replaces what lower ones hold", async () => {
    await layer([
      { path: "app/", type: "Directory" },
      { path: "app/a", body: "1" },
      { path: "app/b", body: "b" },
    ]);
    await layer(
      [
        { path: "app/a", body: "2" },
        { path: "app/c", body: "c" },
      ],
      "gzip",
    );
    expect([read("app/a"), read("app/b"), read("app/c")]).toEqual(["2", "b", "c"]);
  });

  it("creates parents an archive leaves implicit; a file replaces a directory and a directory a file", async () => {
    await layer([
      { path: "deep/er/file", body: "x" },
      { path: "was-dir/inner", body: "y" },
      { path: "was-file", body: "z" },
    ]);
    await layer([
      { path: "was-dir", body: "now a file" },
      { path: "was-file/", type: "Directory" },
    ]);
    expect(read("deep/er/file")).toBe("x");
    expect(read("was-dir")).toBe("now a file");
    expect(lstatSync(join(root, "was-file")).isDirectory()).toBe(true);
  });

  it("keeps owners, modes (setuid included) and times; symlinks and hard links as links", async () => {
    await layer([
      { path: "bin/tool", body: "#!", mode: 0o4755, uid: 1000, gid: 1001 },
      { path: "home/app/", type: "Directory", mode: 0o700, uid: 1000, gid: 1000 },
      { path: "bin/alias", type: "SymbolicLink", linkpath: "tool" },
      { path: "bin/hard", type: "Link", linkpath: "bin/tool" },
    ]);
    const tool = statSync(join(root, "bin/tool"));
    expect([tool.mode & 0o7777, tool.uid, tool.gid, tool.nlink]).toEqual([0o4755, 1000, 1001, 2]);
    expect(tool.mtimeMs).toBe(1_700_000_000_000);
    const home = statSync(join(root, "home/app"));
    expect([home.mode & 0o7777, home.uid]).toEqual([0o700, 1000]);
    expect(readlinkSync(join(root, "bin/alias"))).toBe("tool");
  });

  it("reads zstd layers (Node 22.15 and newer)", async () => {
    if (typeof (zlib as any).zstdCompressSync !== "function") return;
    await layer([{ path: "z", body: "zstd" }], "zstd");
    expect(read("z")).toBe("zstd");
  });

  it("refuses a media type it cannot read, naming it", async () => {
    const path = join(work, "blob");
    writeFileSync(path, tarOf([{ path: "x" }]));
    await expect(
      applyLayer(root, { path, mediaType: "application/vnd.oci.image.layer.v1.tar+encrypted" }),
    ).rejects.toThrow(/unsupported layer media type "application\/vnd.oci.image.layer.v1.tar\+encrypted"/);
  });
});

describe("whiteouts", () => {
  it(".wh.<name> removes a lower layer's file or whole directory, and nothing else", async () => {
    await layer([
      { path: "app/old.txt", body: "old" },
      { path: "app/keep", body: "k" },
      { path: "cache/a/b", body: "" },
    ]);
    await layer([{ path: "app/.wh.old.txt" }, { path: ".wh.cache" }]);
    expect([has("app/old.txt"), has("app/.wh.old.txt"), has("cache"), read("app/keep")]).toEqual([
      false,
      false,
      false,
      "k",
    ]);
  });

  it("an opaque directory drops lower layers' content and keeps its own layer's, wherever the marker comes", async () => {
    await layer([
      { path: "d/lower", body: "" },
      { path: "d/sub/lower", body: "" },
      { path: "e/lower", body: "" },
    ]);
    await layer([
      { path: "d/", type: "Directory" },
      { path: "d/sub/mine", body: "m" },
      { path: "d/.wh..wh..opq" },
      { path: "d/mine", body: "m" },
      { path: "e/.wh..wh..opq" },
    ]);
    expect(readdirSync(join(root, "d")).sort()).toEqual(["mine", "sub"]);
    expect(readdirSync(join(root, "d/sub"))).toEqual(["mine"]);
    expect(readdirSync(join(root, "e"))).toEqual([]);
  });

  it("a whiteout naming . or .. is refused", async () => {
    await layer([{ path: "a/b/file", body: "" }]);
    await expect(layer([{ path: "a/b/.wh.." }])).rejects.toThrow(/whiteout "a\/b\/.wh.." names no file: refused/);
    expect(has("a/b/file")).toBe(true);
  });
});

describe("confinement: nothing is written outside the rootfs", () => {
  it("an absolute name is taken from the root, as tar and docker do", async () => {
    await layer([
      { path: `${outside}/victim`, body: "pwned" },
      { path: "/etc/passwd", body: "root" },
    ]);
    outsideUntouched();
    expect(read(`${outside.slice(1)}/victim`)).toBe("pwned");
    expect(read("etc/passwd")).toBe("root");
  });

  it("a name with .. is refused", async () => {
    await expect(layer([{ path: "../outside/victim", body: "pwned" }])).rejects.toThrow(/names "\.\.": refused/);
    await expect(layer([{ path: "a/../../outside/new", body: "pwned" }])).rejects.toThrow(/refused/);
    outsideUntouched();
  });

  it("writing through a lower layer's absolute symlink (a -> /etc, then a/passwd) lands inside", async () => {
    await layer([{ path: "a", type: "SymbolicLink", linkpath: outside }]);
    await layer([
      { path: "a/victim", body: "pwned" },
      { path: "a/new", body: "pwned" },
    ]);
    outsideUntouched();
    expect(read(`${outside.slice(1)}/victim`)).toBe("pwned");
    expect(readlinkSync(join(root, "a"))).toBe(outside); // the link itself is the image's own business
  });

  it("a relative symlink climbing past the root stops at it, from a lower layer or the same one", async () => {
    const climb = "../".repeat(20);
    await layer([{ path: "up", type: "SymbolicLink", linkpath: `${climb}${outside.slice(1)}` }]);
    await layer([
      { path: "up/victim", body: "pwned" },
      { path: "same", type: "SymbolicLink", linkpath: climb },
      { path: "same/escaped", body: "pwned" },
    ]);
    outsideUntouched();
    expect(read(`${outside.slice(1)}/victim`)).toBe("pwned");
    expect(read("escaped")).toBe("pwned");
  });

  it("a file or directory over a lower layer's symlink replaces the link, never its target", async () => {
    await layer([
      { path: "f", type: "SymbolicLink", linkpath: join(outside, "victim") },
      { path: "d", type: "SymbolicLink", linkpath: outside },
    ]);
    await layer([
      { path: "f", body: "pwned" },
      { path: "d/", type: "Directory" },
      { path: "d/x", body: "x" },
    ]);
    outsideUntouched();
    expect([lstatSync(join(root, "f")).isFile(), lstatSync(join(root, "d")).isDirectory(), read("d/x")]).toEqual([
      true,
      true,
      "x",
    ]);
  });

  it("a hard link to a host file is refused: by .., or through a symlinked directory", async () => {
    await expect(layer([{ path: "h", type: "Link", linkpath: "../outside/victim" }])).rejects.toThrow(/refused/);
    await layer([{ path: "a", type: "SymbolicLink", linkpath: outside }]);
    await expect(layer([{ path: "h", type: "Link", linkpath: "a/victim" }])).rejects.toThrow(
      /hard link "h" to "a\/victim", which is not a file in the image/,
    );
    await expect(layer([{ path: "h", type: "Link", linkpath: `${outside}/victim` }])).rejects.toThrow(/not a file/);
    outsideUntouched();
  });

  it("whiteouts and opaque markers through a symlink act inside the root", async () => {
    await layer([{ path: "a", type: "SymbolicLink", linkpath: outside }]);
    await layer([{ path: "a/.wh.victim" }, { path: "a/.wh..wh..opq" }]);
    await layer([{ path: "b", type: "SymbolicLink", linkpath: "../outside" }]);
    await layer([{ path: "b/.wh.victim" }, { path: "b/.wh..wh..opq" }]);
    outsideUntouched();
  });
});

describe("resolveInRoot", () => {
  it("resolves symlinks as a chroot would", async () => {
    await layer([
      { path: "usr/lib/x", body: "" },
      { path: "lib", type: "SymbolicLink", linkpath: "usr/lib" },
      { path: "abs", type: "SymbolicLink", linkpath: "/usr/lib" },
      { path: "loop", type: "SymbolicLink", linkpath: "loop" },
    ]);
    expect(resolveInRoot(root, "lib/x")).toBe(join(root, "usr/lib/x"));
    expect(resolveInRoot(root, "/abs/../../../x")).toBe(join(root, "x"));
    expect(resolveInRoot(root, "lib", false)).toBe(join(root, "lib"));
    expect(resolveInRoot(root, "lib", true)).toBe(join(root, "usr/lib"));
    expect(() => resolveInRoot(root, "loop/x")).toThrow(/too many symbolic links/);
  });
});

describe("unpackImage", () => {
  const image = (paths: string[]): PulledImage => ({
    repository: "127.0.0.1:5000/acme/items",
    digest: `sha256:${"ab".repeat(32)}`,
    manifestDigest: `sha256:${"ab".repeat(32)}`,
    dir: work,
    config: {},
    layers: paths.map((path) => ({ path, digest: path, size: 0, mediaType: "application/vnd.oci.image.layer.v1.tar" })),
  });

  it("renames a complete rootfs into place (0755, for a non-root user), reuses it, and leaves nothing of a failed one", async () => {
    const cache = join(work, "cache");
    writeFileSync(join(work, "good"), tarOf([{ path: "app/server.js", body: "ok" }]));
    writeFileSync(join(work, "bad"), tarOf([{ path: "../escape", body: "" }]));
    await expect(unpackImage(image([join(work, "good"), join(work, "bad")]), cache)).rejects.toThrow(
      /unpacking 127.0.0.1:5000\/acme\/items@sha256:abab.*: layer .*bad: entry "..\/escape" names ".."/,
    );
    const rootfsDir = join(cache, "rootfs", repositoryKey("127.0.0.1:5000/acme/items"));
    expect(readdirSync(rootfsDir)).toEqual([]);
    const [a, b] = await Promise.all([
      unpackImage(image([join(work, "good")]), cache),
      unpackImage(image([join(work, "good")]), cache),
    ]);
    expect(a).toBe(join(rootfsDir, "ab".repeat(32)));
    expect(b).toBe(a);
    expect(statSync(a).mode & 0o777).toBe(0o755);
    expect(readFileSync(join(a, "app/server.js"), "utf8")).toBe("ok");
    expect(readdirSync(rootfsDir)).toEqual(["ab".repeat(32)]);
    // Found in place the next time: a layer that is gone is never read.
    expect(await unpackImage(image([join(work, "missing")]), cache)).toBe(a);
    expect(existsSync(join(work, "missing"))).toBe(false);
  });
});
