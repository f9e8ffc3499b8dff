// One behavioural suite run against both stores: a temp directory and a real
// S3-compatible server (s3rver, in-process on a free port).
import { spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openObject, openStore, parseStorageUri, StorageError } from "../../src/storage/index.ts";
import { loadSettings } from "../../src/settings/index.ts";
import type { ObjectStore, S3Settings, StorageErrorCode } from "../../src/storage/index.ts";

// s3rver ships no types; this is the part of its API the suite uses.
type S3rverInstance = { run(): Promise<{ port: number }>; close(): Promise<void> };
type S3rverOptions = {
  address: string;
  port: number;
  silent: boolean;
  directory: string;
  configureBuckets: { name: string; configs: string[] }[];
};
const S3rver = createRequire(import.meta.url)("s3rver") as new (options: S3rverOptions) => S3rverInstance;

const BUCKET = "test-bucket";
const MiB = 1024 * 1024;

let scratch: string;
let server: S3rverInstance;
let s3: S3Settings;
const opened: ObjectStore[] = [];

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "platform-storage-"));
  server = new S3rver({
    address: "127.0.0.1",
    port: 0,
    silent: true,
    directory: join(scratch, "s3rver"),
    configureBuckets: [{ name: BUCKET, configs: [] }],
  });
  const { port } = await server.run();
  s3 = {
    region: "us-east-1",
    endpoint: `http://127.0.0.1:${port}`,
    forcePathStyle: true,
    accessKeyId: "S3RVER",
    secretAccessKey: "S3RVER",
  };
});

afterAll(async () => {
  for (const store of opened) store.close();
  await server?.close();
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
});

function track<T extends ObjectStore>(store: T): T {
  opened.push(store);
  return store;
}

type Backend = { name: "file" | "s3"; fresh(): ObjectStore };

const backends: Backend[] = [
  { name: "file", fresh: () => track(openStore(join(scratch, "files", randomUUID()))) },
  { name: "s3", fresh: () => track(openStore(`s3://${BUCKET}/${randomUUID()}`, s3)) },
];

async function text(stream: Readable): Promise<string> {
  return (await bytes(stream)).toString("utf8");
}

async function bytes(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function sha256(stream: AsyncIterable<Uint8Array>): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of stream) hash.update(chunk);
  return hash.digest("hex");
}

async function listAll(store: ObjectStore, prefix?: string): Promise<{ key: string; size: number }[]> {
  const out: { key: string; size: number }[] = [];
  for await (const item of store.list(prefix)) out.push(item);
  return out;
}

async function storageFailure(promise: Promise<unknown>): Promise<StorageError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StorageError);
  return error as StorageError;
}

async function expectStorageError(promise: Promise<unknown>, code: StorageErrorCode, messageIncludes: string) {
  const error = await storageFailure(promise);
  expect(error.code).toBe(code);
  expect(error.message).toContain(messageIncludes);
  return error;
}

/** A stream whose chunks arrive one by one, so nothing can assume it is a Buffer. */
function chunked(...parts: (string | Buffer)[]): Readable {
  return Readable.from(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : p)));
}

describe.each(backends)("$name store", (backend) => {
  it("puts strings, buffers and streams, and reads them back with their sizes", async () => {
    const store = backend.fresh();
    expect(await store.put("a.txt", "héllo")).toEqual({ size: 6 });
    expect(await store.put("dir/b.bin", Buffer.from([0, 1, 2, 255]))).toEqual({ size: 4 });
    expect(await store.put("dir/sub/c.jsonl", chunked('{"a":1}\n', '{"b":', "2}\n"))).toEqual({ size: 16 });

    expect(await text(await store.get("a.txt"))).toBe("héllo");
    expect([...(await bytes(await store.get("dir/b.bin")))]).toEqual([0, 1, 2, 255]);
    expect(await text(await store.get("dir/sub/c.jsonl"))).toBe('{"a":1}\n{"b":2}\n');
    expect(await store.head("dir/sub/c.jsonl")).toEqual({ size: 16 });
  });

  it("replaces an existing object and stores empty ones", async () => {
    const store = backend.fresh();
    await store.put("x", "first version, longer");
    await store.put("x", "second");
    expect(await text(await store.get("x"))).toBe("second");
    expect(await store.head("x")).toEqual({ size: 6 });

    expect(await store.put("empty", "")).toEqual({ size: 0 });
    expect(await store.head("empty")).toEqual({ size: 0 });
    expect(await text(await store.get("empty"))).toBe("");
  });

  it("reports a missing object as not_found (get) or null (head)", async () => {
    const store = backend.fresh();
    expect(await store.head("nope.jsonl")).toBeNull();
    const error = await expectStorageError(store.get("in/nope.jsonl"), "not_found", store.uri("in/nope.jsonl"));
    expect(error.uri).toBe(store.uri("in/nope.jsonl"));
    expect(error.status).toBe(404);
  });

  it("reads from a byte offset, and nothing at or past the end", async () => {
    const store = backend.fresh();
    await store.put("r.txt", "0123456789");
    expect(await text(await store.get("r.txt", { start: 0 }))).toBe("0123456789");
    expect(await text(await store.get("r.txt", { start: 7 }))).toBe("789");
    expect(await text(await store.get("r.txt", { start: 10 }))).toBe("");
    expect(await text(await store.get("r.txt", { start: 50 }))).toBe("");
    await expectStorageError(store.get("missing.txt", { start: 3 }), "not_found", store.uri("missing.txt"));
    await expect(store.get("r.txt", { start: -1 })).rejects.toThrow(RangeError);
  });

  it("lists by prefix, recursively, in key order", async () => {
    const store = backend.fresh();
    for (const key of ["a0", "a/b", "logs/2024-01/x", "logs/2024-02/y", "logs/2025-01/z", "top"]) {
      await store.put(key, key);
    }
    expect((await listAll(store)).map((o) => o.key)).toEqual([
      "a/b",
      "a0",
      "logs/2024-01/x",
      "logs/2024-02/y",
      "logs/2025-01/z",
      "top",
    ]);
    expect(await listAll(store, "logs/")).toEqual([
      { key: "logs/2024-01/x", size: 14 },
      { key: "logs/2024-02/y", size: 14 },
      { key: "logs/2025-01/z", size: 14 },
    ]);
    expect((await listAll(store, "logs/2024-")).map((o) => o.key)).toEqual(["logs/2024-01/x", "logs/2024-02/y"]);
    expect((await listAll(store, "a")).map((o) => o.key)).toEqual(["a/b", "a0"]);
    expect(await listAll(store, "nothing/here/")).toEqual([]);
  });

  it("lists nothing under a root that was never written", async () => {
    expect(await listAll(backend.fresh())).toEqual([]);
  });

  it("deletes objects, and deleting a missing one is not an error", async () => {
    const store = backend.fresh();
    await store.put("d/one", "1");
    await store.put("d/two", "2");
    await store.delete("d/one");
    await store.delete("d/one");
    await store.delete("never/existed");
    expect(await store.head("d/one")).toBeNull();
    expect((await listAll(store)).map((o) => o.key)).toEqual(["d/two"]);
  });

  it("concatenates parts in order and leaves the parts in place", async () => {
    const store = backend.fresh();
    await store.put("out/parts/00002", "second\n");
    await store.put("out/parts/00001", "first\n");
    await store.put("out/parts/00003", "");
    await store.put("out/parts/00004", "third\n");
    const parts = ["out/parts/00001", "out/parts/00002", "out/parts/00003", "out/parts/00004"];
    expect(await store.concat(parts, "out/results.jsonl")).toEqual({ size: 19 });
    expect(await text(await store.get("out/results.jsonl"))).toBe("first\nsecond\nthird\n");
    expect(await store.head("out/parts/00001")).toEqual({ size: 6 });

    expect(await store.concat([], "out/none.jsonl")).toEqual({ size: 0 });
    expect(await store.head("out/none.jsonl")).toEqual({ size: 0 });
  });

  it("concatenates parts larger than a multipart upload part", async () => {
    const store = backend.fresh();
    const partSize = 6 * MiB + 123;
    const hash = createHash("sha256");
    const keys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const data = Buffer.alloc(partSize, String.fromCharCode(0x61 + i));
      data.write(`part ${i} starts here`, 0);
      hash.update(data);
      keys.push(`big/part-${i}`);
      await store.put(`big/part-${i}`, data);
    }
    expect(await store.concat(keys, "big/all")).toEqual({ size: 3 * partSize });
    expect(await store.head("big/all")).toEqual({ size: 3 * partSize });
    expect(await sha256(await store.get("big/all"))).toBe(hash.digest("hex"));
    expect(await text(await store.get("big/all", { start: 2 * partSize }))).toMatch(/^part 2 starts here/);
  });

  it("fails a concat with a missing part without creating the destination", async () => {
    const store = backend.fresh();
    await store.put("p/1", "one\n");
    await expectStorageError(store.concat(["p/1", "p/2"], "p/all"), "not_found", store.uri("p/2"));
    expect(await store.head("p/all")).toBeNull();
  });

  it("keeps the previous object when a put's source stream fails", async () => {
    const store = backend.fresh();
    await store.put("keep.txt", "old");
    const failing = Readable.from(
      (async function* () {
        yield Buffer.from("partial data");
        throw new Error("upstream went away");
      })(),
    );
    await expect(store.put("keep.txt", failing)).rejects.toThrow("upstream went away");
    expect(await text(await store.get("keep.txt"))).toBe("old");
    const empty = Readable.from({
      [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new Error("no data")) }),
    });
    await expect(store.put("fresh.txt", empty)).rejects.toThrow("no data");
    expect(await store.head("fresh.txt")).toBeNull();
  });

  it("downloads to a local file atomically, creating its directory", async () => {
    const store = backend.fresh();
    await store.put("models/m.gguf", "GGUF model bytes");
    const destDir = join(scratch, "downloads", randomUUID(), "nested");
    const dest = join(destDir, "m.gguf");
    await store.download("models/m.gguf", dest);
    expect(await readFile(dest, "utf8")).toBe("GGUF model bytes");
    await store.put("models/m.gguf", "new bytes");
    await store.download("models/m.gguf", dest);
    expect(await readFile(dest, "utf8")).toBe("new bytes");
    expect(await readdir(destDir)).toEqual(["m.gguf"]);

    await expectStorageError(
      store.download("models/none.gguf", join(destDir, "none.gguf")),
      "not_found",
      store.uri("models/none.gguf"),
    );
    expect(await readdir(destDir)).toEqual(["m.gguf"]);
  });

  it("fails a download into an unwritable destination naming it", async () => {
    const store = backend.fresh();
    await store.put("k", "v");
    const blocker = join(scratch, `blocker-${randomUUID()}`);
    await writeFile(blocker, "a file where a directory should be");
    const dest = join(blocker, "sub", "k");
    await expectStorageError(store.download("k", dest), "unwritable", pathToFileURL(dest).href);
  });

  it("rejects keys that would escape the root or are malformed", async () => {
    const store = backend.fresh();
    for (const key of ["../x", "a/../../x", "a/..", "/abs", "a//b", "a/./b", "", "a/", "a\\b", "bad\u0000key"]) {
      await expectStorageError(store.put(key, "x"), "invalid_uri", "invalid object key");
    }
    await expectStorageError(store.get("../x"), "invalid_uri", '".." segments would escape the store root');
    await expectStorageError(store.head(".."), "invalid_uri", "invalid object key");
    await expectStorageError(store.delete("x/../../y"), "invalid_uri", "invalid object key");
    await expectStorageError(store.concat(["ok", "../bad"], "dest"), "invalid_uri", "invalid object key");
    await expectStorageError(listAll(store, "../"), "invalid_uri", "invalid object key");
    await expectStorageError(store.download("../k", join(scratch, "never")), "invalid_uri", "invalid object key");
    expect(await listAll(store)).toEqual([]);
  });

  it("names objects by full URI under its root", async () => {
    const store = backend.fresh();
    expect(store.uri("in/prompts.jsonl")).toBe(`${store.url}/in/prompts.jsonl`);
    expect(store.url).toMatch(backend.name === "file" ? /^file:\/\/\// : /^s3:\/\/test-bucket\//);
  });

  it("streams a stored object back byte for byte", async () => {
    const store = backend.fresh();
    await store.put("in.jsonl", '{"id":1}\r\n\r\n{"id":2}');
    const chunks: Buffer[] = [];
    for await (const chunk of await store.get("in.jsonl")) chunks.push(Buffer.from(chunk));
    expect(Buffer.concat(chunks).toString("utf8")).toBe('{"id":1}\r\n\r\n{"id":2}');
  });
});

describe("file store", () => {
  it("exposes the real path of an object", async () => {
    const root = join(scratch, "files", randomUUID());
    const store = openStore(root);
    await store.put("models/tiny.gguf", "bytes");
    const path = store.localPath("models/tiny.gguf");
    expect(path).toBe(join(root, "models", "tiny.gguf"));
    expect(await readFile(path!, "utf8")).toBe("bytes");
    expect(() => store.localPath("../etc/passwd")).toThrow(StorageError);
  });

  it("lists in S3's UTF-8 byte order, not directory-walk order", async () => {
    // s3rver walks its own directories, so only the file store is held to this here.
    const store = openStore(join(scratch, "files", randomUUID()));
    // "-" (0x2d) < "/" (0x2f) < "0" (0x30); U+FF5E sorts before U+1F600 in UTF-8 but not in UTF-16.
    for (const key of ["a0", "a/b", "a-c", "\u{1F600}", "\uFF5E"]) await store.put(key, "x");
    expect((await listAll(store)).map((o) => o.key)).toEqual(["a-c", "a/b", "a0", "\uFF5E", "\u{1F600}"]);
  });

  it("closes the file when a reader stops early", async () => {
    const store = openStore(join(scratch, "files", randomUUID()));
    await store.put("many.jsonl", '{"n":1}\n'.repeat(100_000));
    const stream = await store.get("many.jsonl");
    for await (const chunk of stream) {
      expect(Buffer.from(chunk).toString("utf8")).toMatch(/^\{"n":1\}\n/);
      break;
    }
    expect(stream.destroyed).toBe(true);
  });

  it("leaves no temp files behind and hides ones still being written", async () => {
    const root = join(scratch, "files", randomUUID());
    const store = openStore(`file://${root}`);
    await store.put("d/a", "1");
    await store.concat(["d/a", "d/a"], "d/b");
    expect((await readdir(join(root, "d"))).sort()).toEqual(["a", "b"]);
    await writeFile(join(root, "d", `.c.tmp-${randomUUID()}`), "in flight");
    expect((await listAll(store)).map((o) => o.key)).toEqual(["d/a", "d/b"]);
  });

  it("fails a write into an unwritable location with an error naming the URI", async () => {
    const blocker = join(scratch, `blocker-${randomUUID()}`);
    await writeFile(blocker, "a file, not a directory");
    const store = openStore(join(blocker, "artifacts"));
    const error = await expectStorageError(
      store.put("m/x.gguf", "x"),
      "unwritable",
      `${pathToFileURL(blocker).href}/artifacts/m/x.gguf: cannot write`,
    );
    expect(error.message).toContain("ENOTDIR");
    await expectStorageError(store.concat([], "y"), "unwritable", "cannot write");
  });

  it("fails a write into a read-only directory (as an unprivileged user when the suite runs as root)", async () => {
    if (process.getuid?.() !== 0) {
      const dir = join(scratch, `readonly-${randomUUID()}`);
      await mkdir(dir);
      await chmod(dir, 0o555);
      await expectStorageError(openStore(dir).put("x", "x"), "unwritable", "EACCES");
      return;
    }
    // Root writes anywhere (CI runs as root): the same write, from a child process running as "nobody".
    const base = await mkdtemp(join(tmpdir(), "platform-readonly-"));
    await chmod(base, 0o755);
    const dir = join(base, "readonly");
    await mkdir(dir, { mode: 0o555 });
    const storage = new URL("../../src/storage/index.ts", import.meta.url).href;
    const script = `import { openStore } from ${JSON.stringify(storage)};
try { await openStore(${JSON.stringify(dir)}).put("x", "x"); console.log(JSON.stringify({ written: true })); }
catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      uid: 65534,
      gid: 65534,
      encoding: "utf8",
      cwd: "/",
    });
    await rm(base, { recursive: true, force: true });
    expect(child.status, child.stderr).toBe(0);
    const result = JSON.parse(child.stdout.trim().split("\n").at(-1) as string) as { code?: string; message?: string };
    expect(result.code).toBe("unwritable");
    expect(result.message).toContain("EACCES");
  });

  it("reads a directory key as missing", async () => {
    const store = openStore(join(scratch, "files", randomUUID()));
    await store.put("dir/x", "x");
    expect(await store.head("dir")).toBeNull();
    await expectStorageError(store.get("dir"), "not_found", "no such object");
    await expectStorageError(store.get("dir/x/y"), "not_found", "no such object");
  });
});

describe("s3 store", () => {
  it("reports a missing bucket on every operation", async () => {
    const store = track(openStore("s3://missing-bucket/data", s3));
    const expected = 's3://missing-bucket/data/x.jsonl: no such bucket "missing-bucket"';
    await expectStorageError(store.get("x.jsonl"), "no_such_bucket", expected);
    await expectStorageError(store.head("x.jsonl"), "no_such_bucket", expected);
    await expectStorageError(store.put("x.jsonl", "{}"), "no_such_bucket", expected);
    await expectStorageError(store.put("x.jsonl", chunked("{}", "\n")), "no_such_bucket", expected);
    await expectStorageError(store.delete("x.jsonl"), "no_such_bucket", expected);
    await expectStorageError(listAll(store), "no_such_bucket", 'no such bucket "missing-bucket"');
  });

  it("reports rejected credentials as access_denied", async () => {
    const store = track(openStore(`s3://${BUCKET}`, { ...s3, accessKeyId: "WRONG", secretAccessKey: "WRONG" }));
    await expectStorageError(store.get("x"), "access_denied", `s3://${BUCKET}/x: access denied`);
    await expectStorageError(store.head("x"), "access_denied", "access denied");
  });

  it("reports an unreachable endpoint as unavailable", async () => {
    const store = track(openStore(`s3://${BUCKET}`, { ...s3, endpoint: "http://127.0.0.1:1", maxAttempts: 1 }));
    // The endpoint is an internal address: logged, never put in the error a client may see.
    const error = await expectStorageError(store.get("x"), "unavailable", "storage unavailable (ECONNREFUSED)");
    expect(error.message).not.toContain("127.0.0.1:1");
  });

  it("has no local path", () => {
    expect(track(openStore(`s3://${BUCKET}/p`, s3)).localPath("k")).toBeUndefined();
  });

  it("opens a single object by its full URI", async () => {
    const prefix = randomUUID();
    const writer = track(openStore(`s3://${BUCKET}/${prefix}`, s3));
    await writer.put("in/prompts.jsonl", '{"prompt":"hi"}\n');
    const { store, key } = openObject(`s3://${BUCKET}/${prefix}/in/prompts.jsonl`, s3);
    track(store);
    expect(store.url).toBe(`s3://${BUCKET}/${prefix}/in`);
    expect(key).toBe("prompts.jsonl");
    expect(await text(await store.get(key))).toBe('{"prompt":"hi"}\n');

    const top = openObject(`s3://${BUCKET}/top.jsonl`, s3);
    track(top.store);
    expect([top.store.url, top.key]).toEqual([`s3://${BUCKET}`, "top.jsonl"]);
  });
});

describe("storage URIs", () => {
  it("resolves plain paths against the working directory", () => {
    expect(parseStorageUri("data/artifacts", "/srv/platform")).toEqual({
      scheme: "file",
      path: "/srv/platform/data/artifacts",
      url: "file:///srv/platform/data/artifacts",
    });
    expect(parseStorageUri("/abs/dir/")).toMatchObject({ scheme: "file", path: "/abs/dir" });
    expect(parseStorageUri("./x")).toMatchObject({ path: resolve("x") });
  });

  it("accepts file:// URLs with an absolute path", () => {
    expect(parseStorageUri("file:///var/lib/platform/a%20b")).toEqual({
      scheme: "file",
      path: "/var/lib/platform/a b",
      url: "file:///var/lib/platform/a%20b",
    });
    expect(parseStorageUri("file://localhost/tmp/x")).toMatchObject({ path: "/tmp/x" });
  });

  it("accepts s3:// URIs with or without a prefix", () => {
    expect(parseStorageUri("s3://bucket/key/prefix/")).toEqual({
      scheme: "s3",
      bucket: "bucket",
      key: "key/prefix",
      url: "s3://bucket/key/prefix",
    });
    expect(parseStorageUri("s3://my.bucket-1")).toEqual({
      scheme: "s3",
      bucket: "my.bucket-1",
      key: "",
      url: "s3://my.bucket-1",
    });
  });

  it("rejects anything else with a message that says what is expected", () => {
    const cases: [string, string][] = [
      ["ftp://x", 'unsupported storage URI "ftp://x": expected a path, file:// or s3://'],
      ["https://bucket.s3.amazonaws.com/x", 'unsupported storage URI "https://bucket.s3.amazonaws.com/x"'],
      ["", "expected a path, file:// or s3://"],
      ["file://relative/path", "a file:// URL needs an absolute path, e.g. file:///relative/path"],
      ["file:///tmp/x?y=1", "may not carry a query"],
      ["s3://", "missing bucket name"],
      ["s3:bucket/key", "expected s3://bucket/key"],
      ["s3://Bad_Bucket/x", 'invalid bucket name "Bad_Bucket"'],
      ["s3://bucket/a/../b", '".." segments would escape the store root'],
      ["s3://bucket/a//b", "empty segment"],
    ];
    for (const [uri, message] of cases) {
      let error: unknown;
      try {
        parseStorageUri(uri);
      } catch (e) {
        error = e;
      }
      expect(error, uri).toBeInstanceOf(StorageError);
      expect((error as StorageError).code).toBe("invalid_uri");
      expect((error as StorageError).message).toContain(message);
      expect(() => openStore(uri, s3)).toThrow(StorageError);
    }
  });

  it("opens a single object only when the URI names one", () => {
    const local = openObject("/data/in/prompts.jsonl");
    expect([local.store.url, local.key]).toEqual(["file:///data/in", "prompts.jsonl"]);
    expect(openObject("prompts.jsonl").store.localPath("prompts.jsonl")).toBe(resolve("prompts.jsonl"));
    for (const uri of ["s3://bucket", "s3://bucket/", "s3://bucket/in/", "/data/in/", "/"]) {
      expect(() => openObject(uri, s3), uri).toThrow(/not an object/);
    }
  });
});

describe("S3 settings (settings.storage.s3)", () => {
  const s3SettingsFromEnv = (env: NodeJS.ProcessEnv) => loadSettings(env).storage.s3;
  it("reads the usual AWS variables and the path-style flag", () => {
    expect(s3SettingsFromEnv({})).toEqual({ region: "us-east-1", forcePathStyle: false });
    expect(
      s3SettingsFromEnv({
        AWS_REGION: "eu-west-3",
        AWS_ENDPOINT_URL: "http://generic:9000",
        AWS_ENDPOINT_URL_S3: "http://minio:9000",
        AWS_ACCESS_KEY_ID: "id",
        AWS_SECRET_ACCESS_KEY: "secret",
        AWS_SESSION_TOKEN: "token",
        PLATFORM_S3_FORCE_PATH_STYLE: "true",
      }),
    ).toEqual({
      region: "eu-west-3",
      endpoint: "http://minio:9000",
      forcePathStyle: true,
      accessKeyId: "id",
      secretAccessKey: "secret",
      sessionToken: "token",
    });
    expect(s3SettingsFromEnv({ AWS_ENDPOINT_URL: "http://ceph:7480", AWS_DEFAULT_REGION: "x-1" })).toMatchObject({
      endpoint: "http://ceph:7480",
      region: "x-1",
    });
  });

  it("rejects malformed values naming the variable", () => {
    expect(() => s3SettingsFromEnv({ PLATFORM_S3_FORCE_PATH_STYLE: "yes" })).toThrow(/PLATFORM_S3_FORCE_PATH_STYLE/);
    expect(() => s3SettingsFromEnv({ AWS_ENDPOINT_URL_S3: "not a url" })).toThrow(/AWS_ENDPOINT_URL_S3/);
    expect(() => s3SettingsFromEnv({ AWS_ACCESS_KEY_ID: "only-id" })).toThrow(/AWS_SECRET_ACCESS_KEY/);
  });
});
