/**
 * Hugging Face-style checkpoint directories in the registry, through `POST /admin/v1/models` and
 * the upload route of a real gateway: from a server-local directory, file://, an s3:// prefix
 * (s3rver), an hf:// repository (a local stand-in for the Hub, via HF_ENDPOINT) and a tar upload;
 * the manifest and metadata recorded (sentence-transformers' 1_Pooling/config.json kept from every
 * source); a download resumed after the stand-in cuts the connection; the offline error; path
 * escapes, links, devices and truncated streams in uploads refused; and materialising the stored
 * directory (in S3) into a worker's cache, verified and reused.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { manifestDigest } from "../../src/models/checkpoint.ts";
import { localArtifact } from "../../src/models/materialize.ts";
import { Header } from "tar";
import { writeTar } from "../../src/models/tar.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore, type S3Settings } from "../../src/storage/index.ts";
import { startS3, type S3Server } from "../helpers/batch-env.ts";
import { writeTinyBert } from "../fixtures/tiny-bert.ts";
import { CHECKPOINT_PARAMETERS, expectedManifest, TEST_ARCHITECTURE, writeCheckpoint } from "../helpers/checkpoints.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { freePort, type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const BUCKET = "platform-models";

let redis: PrivateRedis;
let ctl: Control;
let admin: string;
let s3: S3Server;
let work: string;
let gw: RunningGateway;
/** Same settings, but HF_ENDPOINT names a port nobody listens on: the Hub is unreachable. */
let offline: RunningGateway;
let offlineHost: string;
let artifactsUrl: string;
/** A checkpoint directory under the storage root (single safetensors file), and one sharded. */
let single: string;
let singleNames: string[];
let sharded: string;
let shardedNames: string[];
let hub: Server;
/** What the Hub stand-in was asked: path and Range header. */
const seen: { path: string; range: string | undefined }[] = [];
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

async function gateway(dataDir: string, env: Record<string, string>): Promise<RunningGateway> {
  const settings = loadSettings({
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_STORAGE_ROOTS: `${work},s3://${BUCKET}/in`,
    PLATFORM_ARTIFACTS_URL: artifactsUrl,
    ...(s3.env as Record<string, string>),
    ...env,
  });
  return startGateway({
    ctl,
    settings: {
      ...settings,
      redisUrl: redis.url,
      sources: { ...settings.sources, allowHttp: true, allowPrivate: true },
    },
    host: "127.0.0.1",
    port: 0,
  });
}

/** The Hub stand-in's answers: a repository listing (Hub API) and file downloads (resolve/). */
function startHub(files: Record<string, Buffer>): Promise<Server> {
  const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
  const cut = new Set<string>();
  const server = createServer((req, res) => {
    const url = req.url ?? "/";
    seen.push({ path: url, range: req.headers.range });
    const listing = /^\/mirror\/api\/models\/org\/([\w-]+)\/revision\/main\?blobs=true$/.exec(url);
    if (listing) {
      const repo = listing[1]!;
      if (repo === "missing") return res.writeHead(404).end();
      const siblings = Object.entries(files).map(([name, body]) => ({
        rfilename: name,
        size: body.length,
        // As the Hub does: LFS files carry their SHA-256; "badsum" lists a wrong one.
        ...(name.endsWith(".safetensors")
          ? { lfs: { sha256: repo === "badsum" ? "f".repeat(64) : sha(body), size: body.length } }
          : {}),
      }));
      siblings.push({ rfilename: "original/consolidated.00.pth", size: 10 });
      return res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify({ id: `org/${repo}`, sha: COMMIT, siblings }));
    }
    const file = /^\/mirror\/org\/([\w-]+)\/resolve\/([\w]+)\/([\w.-]+(?:\/[\w.-]+)?)$/.exec(url);
    const body = file && file[2] === COMMIT ? files[file[3]!] : undefined;
    if (!file || !body) return res.writeHead(404).end();
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    // "norange" ignores Range, as some servers do: it answers 200 with the whole file again.
    if (range && file[1] !== "norange") {
      const start = Number(range[1]);
      return res
        .writeHead(206, {
          "content-length": body.length - start,
          "content-range": `bytes ${start}-${body.length - 1}/${body.length}`,
        })
        .end(body.subarray(start));
    }
    // "flaky": the first download of each safetensors file breaks off halfway, as a dropped connection does.
    if (
      (file[1] === "flaky" || file[1] === "norange") &&
      file[3]!.endsWith(".safetensors") &&
      !cut.has(`${file[1]}/${file[3]}`)
    ) {
      cut.add(`${file[1]}/${file[3]}`);
      res.writeHead(200, { "content-length": body.length });
      res.write(body.subarray(0, Math.floor(body.length / 2)), () => setTimeout(() => res.socket?.destroy(), 20));
      return;
    }
    res.writeHead(200, { "content-length": body.length }).end(body);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "platform");
  admin = (await createApiKey(ctl, "admin", "admin")).key;
  work = await mkdtemp(join(tmpdir(), "platform-dirs-"));
  s3 = await startS3(join(work, "s3rver"), BUCKET);
  artifactsUrl = `s3://${BUCKET}/artifacts`;
  single = join(work, "ckpt-single");
  // With sentence-transformers' module files, so every source is seen to keep 1_Pooling/config.json.
  singleNames = await writeCheckpoint(single, { sentenceTransformers: true });
  sharded = join(work, "ckpt-sharded");
  shardedNames = await writeCheckpoint(sharded, { sharded: true });
  const files: Record<string, Buffer> = {};
  for (const name of singleNames) files[name] = await readFile(join(single, name));
  hub = await startHub(files);
  const hubUrl = `http://127.0.0.1:${(hub.address() as { port: number }).port}/mirror`;
  gw = await gateway(join(work, "gw"), { HF_ENDPOINT: hubUrl });
  offlineHost = `127.0.0.1:${await freePort()}`;
  offline = await gateway(join(work, "offline"), { HF_ENDPOINT: `http://${offlineHost}` });
});

afterAll(async () => {
  await gw?.close();
  await offline?.close();
  hub?.closeAllConnections();
  hub?.close();
  await s3?.close();
  if (work) await rm(work, { recursive: true, force: true });
  await ctl?.redis.quit();
  await redis?.stop();
});

async function register(on: RunningGateway, name: string, source: string, framework = "vllm") {
  const res = await fetch(`${on.url}/admin/v1/models`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ name, source, framework }),
  });
  const text = await res.text();
  return { status: res.status, text, body: JSON.parse(text) };
}

async function upload(name: string, tar: Buffer | AsyncIterable<Buffer>) {
  const body = Buffer.isBuffer(tar) ? tar : await collect(tar as AsyncIterable<Buffer>);
  const res = await fetch(`${gw.url}/admin/v1/models/${name}/upload?framework=vllm&source=upload`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/x-tar" },
    body,
  });
  const text = await res.text();
  return { status: res.status, text, body: JSON.parse(text) };
}

async function versions(name: string): Promise<RegisteredVersion[]> {
  const res = await fetch(`${gw.url}/admin/v1/models`, { headers: { authorization: `Bearer ${admin}` } });
  return ((await res.json()) as { data: RegisteredVersion[] }).data.filter((m) => m.name === name);
}

async function collect(chunks: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of chunks) out.push(c);
  return Buffer.concat(out);
}

function s3Settings(): S3Settings {
  return s3.settings;
}

describe("registering a checkpoint directory", () => {
  it("takes a BERT checkpoint whose only vocabulary is vocab.txt, for llama.cpp, as an embedding model", async () => {
    const dir = join(work, "bert-vocab-txt");
    const { vocab } = await writeTinyBert(dir, { pooling: "mean" });
    await rm(join(dir, "tokenizer.json"));
    await writeFile(join(dir, "vocab.txt"), `${vocab.join("\n")}\n`);
    const r = await register(gw, "bert-vocab", dir, "llamacpp");
    expect(r.status, r.text).toBe(201);
    expect(r.body).toMatchObject({
      kind: "hf",
      task: "embed",
      checkpoint: { architecture: "BertModel", tokenizer: "vocab.txt" },
    });
    expect(r.body.manifest.map((f: { path: string }) => f.path)).toContain("vocab.txt");
  });

  it("from a server-local directory: one version, a manifest with per-file sha256, the metadata, files stored under their names", async () => {
    const r = await register(gw, "local-dir", single);
    expect(r.status, r.text).toBe(201);
    const manifest = await expectedManifest(single, singleNames);
    expect(r.body).toMatchObject({
      name: "local-dir",
      version: "v1",
      framework: "vllm",
      kind: "hf",
      gguf: null,
      artifact: "models/local-dir/v1",
      manifest,
    });
    expect(r.body.manifest.map((f: { path: string }) => f.path)).not.toContain("README.md");
    expect(r.body.sha256).toBe(manifestDigest(manifest));
    // As docs/models.md says: the digest is what sha256sum over the files, sorted by name, hashes to.
    const files = manifest.map((f) => f.path).join(" ");
    const shell = await promisify(execFile)("sh", [
      "-c",
      `cd "${single}" && sha256sum ${files} | LC_ALL=C sort -k2 | sha256sum`,
    ]);
    expect(shell.stdout.split(" ")[0]).toBe(r.body.sha256);
    expect(r.body.size_bytes).toBe(manifest.reduce((n, f) => n + f.size, 0));
    expect(r.body.checkpoint).toEqual({
      architecture: TEST_ARCHITECTURE,
      model_type: "platform_test",
      parameters: CHECKPOINT_PARAMETERS,
      context_length: 2048,
      dtype: "float32",
      quantization: null,
      tokenizer: "LlamaTokenizerFast",
      chat_template: true,
    });
    const store = openStore(artifactsUrl, s3Settings());
    const keys: string[] = [];
    for await (const o of store.list("models/local-dir/v1/")) keys.push(o.key);
    expect(keys).toEqual(manifest.map((f) => `models/local-dir/v1/${f.path}`));
    expect(await versions("local-dir")).toHaveLength(1);
  });

  it("from file:// with sharded safetensors and an index: every shard in the manifest, parameters summed over the shards", async () => {
    const r = await register(gw, "sharded", `file://${sharded}`);
    expect(r.status, r.text).toBe(201);
    expect(r.body.manifest).toEqual(await expectedManifest(sharded, shardedNames));
    expect(r.body.manifest.map((f: { path: string }) => f.path)).toEqual(
      expect.arrayContaining([
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
      ]),
    );
    expect(r.body.checkpoint.parameters).toBe(CHECKPOINT_PARAMETERS);
  });

  it("from an s3:// prefix inside the storage roots, with the same digest as the same files from a directory", async () => {
    const store = openStore(`s3://${BUCKET}/in/ckpt`, s3Settings());
    for (const name of singleNames) await store.put(name, await readFile(join(single, name)));
    await store.put("nested/config.json", "{}"); // below the prefix's top level: not part of the checkpoint
    const r = await register(gw, "from-s3", `s3://${BUCKET}/in/ckpt/`);
    expect(r.status, r.text).toBe(201);
    expect(r.body.manifest).toEqual(await expectedManifest(single, singleNames));
    expect(r.body.sha256).toBe((await versions("local-dir"))[0]!.sha256);
    const outside = await register(gw, "from-s3", `s3://${BUCKET}/elsewhere/`);
    expect(outside.status).toBe(403);
    expect(outside.body.error.code).toBe("storage_forbidden");
  });

  it("from hf://org/repo: lists the repository with the Hub API at HF_ENDPOINT and fetches only the checkpoint's files, pinned to the listed commit", async () => {
    seen.length = 0;
    const r = await register(gw, "from-hub", "hf://org/tiny");
    expect(r.status, r.text).toBe(201);
    expect(r.body).toMatchObject({
      kind: "hf",
      source: "hf://org/tiny",
      manifest: await expectedManifest(single, singleNames),
    });
    expect(r.body.sha256).toBe((await versions("local-dir"))[0]!.sha256);
    expect(seen[0]).toEqual({ path: "/mirror/api/models/org/tiny/revision/main?blobs=true", range: undefined });
    const fetched = seen
      .slice(1)
      .map((s) => s.path)
      .sort();
    expect(fetched).toEqual(
      (await expectedManifest(single, singleNames)).map((f) => `/mirror/org/tiny/resolve/${COMMIT}/${f.path}`).sort(),
    );
    expect(fetched).toContain(`/mirror/org/tiny/resolve/${COMMIT}/1_Pooling/config.json`);
  });

  it("streams the repository's download progress as NDJSON (?progress=ndjson), then the record", async () => {
    const res = await fetch(`${gw.url}/admin/v1/models?progress=ndjson`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "hub-progress", source: "hf://org/tiny", framework: "vllm" }),
    });
    expect(res.headers.get("content-type")).toContain("application/x-ndjson");
    const lines = (await res.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const manifest = await expectedManifest(single, singleNames);
    const total = manifest.reduce((n, f) => n + f.size, 0);
    expect(lines.filter((l) => l.progress).every((l) => l.progress.total === total)).toBe(true);
    expect(lines.some((l) => l.progress?.received === total)).toBe(true);
    expect(lines.at(-1).result).toMatchObject({ name: "hub-progress", kind: "hf", manifest });
  });

  it("resumes a download with HTTP Range after the connection breaks off mid-file", async () => {
    seen.length = 0;
    const r = await register(gw, "resumed", "hf://org/flaky");
    expect(r.status, r.text).toBe(201);
    expect(r.body.manifest).toEqual(await expectedManifest(single, singleNames));
    const weights = seen.filter((s) => s.path.endsWith("/model.safetensors"));
    const size = (await stat(join(single, "model.safetensors"))).size;
    expect(weights).toEqual([
      { path: `/mirror/org/flaky/resolve/${COMMIT}/model.safetensors`, range: undefined },
      { path: `/mirror/org/flaky/resolve/${COMMIT}/model.safetensors`, range: `bytes=${Math.floor(size / 2)}-` },
    ]);
    // A server that answers the range with the whole file again: started over, not appended.
    seen.length = 0;
    const again = await register(gw, "resumed", "hf://org/norange");
    expect(again.status, again.text).toBe(201);
    expect(again.body.manifest).toEqual(await expectedManifest(single, singleNames));
    expect(seen.filter((s) => s.path.endsWith("/model.safetensors")).map((s) => s.range)).toEqual([
      undefined,
      `bytes=${Math.floor(size / 2)}-`,
    ]);
  });

  it("refuses bytes that do not match the Hub's SHA-256, an unknown repository, and says clearly when the Hub cannot be reached", async () => {
    const bad = await register(gw, "badsum", "hf://org/badsum");
    expect(bad.status).toBe(502);
    expect(bad.body.error.code).toBe("source_corrupt");
    const missing = await register(gw, "missing", "hf://org/missing");
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toContain("org/missing");
    const down = await register(offline, "offline", "hf://org/tiny");
    expect(down.status).toBe(502);
    expect(down.body.error.code).toBe("source_unreachable");
    expect(down.body.error.message).toBe(
      `source: could not reach ${offlineHost} (ECONNREFUSED); check the network (and HF_ENDPOINT, for hf:// sources)`,
    );
    expect(down.text).not.toMatch(/\n\s+at |Error:/);
    for (const name of ["badsum", "missing", "offline"]) expect(await versions(name)).toEqual([]);
  });

  it("refuses a directory that is not a checkpoint, and a symbolic link in a server-side directory", async () => {
    const noTokenizer = join(work, "no-tokenizer");
    await writeCheckpoint(noTokenizer, { noTokenizer: true });
    const r = await register(gw, "broken", noTokenizer);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "invalid_artifact", param: "source" });
    expect(r.body.error.message).toContain("no tokenizer.json, tokenizer.model or vocab.txt");

    const linked = join(work, "linked");
    await writeCheckpoint(linked);
    await writeFile(join(work, "secret.txt"), "not for tenants");
    await symlink(join(work, "secret.txt"), join(linked, "tokenizer.model"));
    const l = await register(gw, "broken", linked);
    expect(l.status).toBe(400);
    expect(l.body.error.message).toContain("tokenizer.model is a symbolic link");
    expect(await versions("broken")).toEqual([]);
  });
});

describe("uploading a checkpoint directory as a tar stream", () => {
  /** One tar header block, made by node-tar's own encoder, for entries no well-behaved writer would make. */
  const header = (path: string, size: number, type: "File" | "SymbolicLink" = "File", linkpath?: string) => {
    const h = new Header({ path, size, type, mode: 0o644, mtime: new Date(), ...(linkpath ? { linkpath } : {}) });
    h.encode();
    return h.block!;
  };

  it("registers the files it carries, leaving out what is not part of a checkpoint", async () => {
    const r = await upload("uploaded", writeTar(single, singleNames));
    expect(r.status, r.text).toBe(201);
    expect(r.body).toMatchObject({ kind: "hf", manifest: await expectedManifest(single, singleNames) });
  });

  it("takes what `tar -cf - -C <dir> .` makes, GNU or POSIX (pax) format, skipping subdirectories", async () => {
    const tree = join(work, "tar-tree");
    const names = await writeCheckpoint(tree, { sentenceTransformers: true });
    await mkdir(join(tree, "original"));
    await writeFile(join(tree, "original", "config.json"), "{}");
    for (const format of ["gnu", "posix"]) {
      const tar = await promisify(execFile)("tar", [`--format=${format}`, "-cf", "-", "-C", tree, "."], {
        encoding: "buffer",
        maxBuffer: 16 * 1024 * 1024,
      });
      const r = await upload("system-tar", tar.stdout);
      expect(r.status, `${format}: ${r.text}`).toBe(201);
      expect(r.body.manifest, format).toEqual(await expectedManifest(tree, names));
    }
  });

  it("refuses names that escape the directory, absolute names and links, writing nothing", async () => {
    const raw = (header: Buffer, body = Buffer.alloc(0)) =>
      Buffer.concat([header, body, Buffer.alloc((512 - (body.length % 512)) % 512)]);
    const cases: [string, Buffer, RegExp][] = [
      ["dot-dot", raw(header("../escaped.json", 2), Buffer.from("{}")), /climbs out/],
      ["absolute", raw(header("/tmp/abs.json", 2), Buffer.from("{}")), /absolute path/],
      ["escape through a subdirectory", raw(header("sub/../../escaped.json", 2), Buffer.from("{}")), /climbs out/],
      [
        "escape through a module directory",
        raw(header("1_Pooling/../../escaped.json", 2), Buffer.from("{}")),
        /climbs out/,
      ],
      ["link", raw(header("tokenizer.model", 0, "SymbolicLink", "/etc/passwd")), /symbolic link/],
    ];
    const good = await collect(
      writeTar(
        single,
        singleNames.filter((n) => n !== "README.md"),
      ),
    );
    for (const [what, evil, message] of cases) {
      // The hostile entry first, then a whole checkpoint: refused all the same.
      const r = await upload("escape", Buffer.concat([evil, good]));
      expect(r.status, what).toBe(400);
      expect(r.body.error.code, what).toBe("invalid_artifact");
      expect(r.body.error.message, what).toMatch(message);
    }
    expect(await versions("escape")).toEqual([]);
    const scratch = join(work, "gw", "tmp");
    expect((await readdir(scratch)).filter((f) => f.startsWith("import-"))).toEqual([]);
    expect(await readdir(join(work, "gw")).then((l) => l.includes("escaped.json"))).toBe(false);
    await expect(stat("/tmp/abs.json")).rejects.toThrow();
  });

  it("refuses a stream that is not tar", async () => {
    const r = await upload("not-tar", Buffer.from("x".repeat(2048)));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain("tar");
  });

  it("refuses a device entry, a truncated stream and one without the end-of-archive marker, registering nothing", async () => {
    const good = await collect(
      writeTar(
        single,
        singleNames.filter((n) => n !== "README.md"),
      ),
    );
    const fifo = new Header({ path: "fifo", size: 0, type: "FIFO", mode: 0o644, mtime: new Date() });
    fifo.encode();
    // The end-of-archive marker is the zero blocks after the last entry's data.
    let lastEntryEnd = good.length;
    while (lastEntryEnd > 0 && good.subarray(lastEntryEnd - 512, lastEntryEnd).every((b) => b === 0))
      lastEntryEnd -= 512;
    const cases: [string, Buffer, RegExp][] = [
      ["fifo", Buffer.concat([fifo.block!, good]), /entry "fifo" is a FIFO; only regular files/],
      ["cut inside a file", good.subarray(0, Math.floor(good.length / 2)), /truncated/],
      ["no end-of-archive marker", good.subarray(0, lastEntryEnd), /end-of-archive marker/],
    ];
    for (const [what, body, message] of cases) {
      const r = await upload("cut", body);
      expect(r.status, `${what}: ${r.text}`).toBe(400);
      expect(r.body.error.code, what).toBe("invalid_artifact");
      expect(r.body.error.message, what).toMatch(message);
    }
    expect(await versions("cut")).toEqual([]);
  });
});

describe("materialising a stored checkpoint on a worker", () => {
  it("copies the directory from S3 into <cache>/<digest>/, checked against the manifest, and a second replica reuses it", async () => {
    const [record] = await versions("local-dir");
    const store = openStore(artifactsUrl, s3Settings());
    const cacheDir = join(work, "node-1", "cache", "models");
    const [a, b] = await Promise.all([
      localArtifact(store, cacheDir, record!),
      localArtifact(store, cacheDir, record!),
    ]);
    expect(a).toBe(join(cacheDir, record!.sha256));
    expect(b).toBe(a);
    for (const f of record!.manifest!)
      expect(
        createHash("sha256")
          .update(await readFile(join(a, f.path)))
          .digest("hex"),
      ).toBe(f.sha256);
    const onDisk = (await readdir(a, { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name).slice(a.length + 1));
    expect(onDisk.sort()).toEqual(record!.manifest!.map((f) => f.path).sort());
    expect(record!.manifest!.map((f) => f.path)).toContain("1_Pooling/config.json");
    const inode = (await stat(a)).ino;
    expect(await localArtifact(store, cacheDir, record!)).toBe(a);
    expect((await stat(a)).ino).toBe(inode);
    // No temp directory is left beside it.
    expect(await readdir(cacheDir)).toEqual([record!.sha256]);
  });

  it("refuses a stored file that no longer matches the manifest, leaving no directory behind", async () => {
    const [record] = await versions("sharded");
    const store = openStore(artifactsUrl, s3Settings());
    await store.put(`${record!.artifact}/config.json`, JSON.stringify({ architectures: ["Tampered"] }));
    const cacheDir = join(work, "node-2", "cache", "models");
    await expect(localArtifact(store, cacheDir, record!)).rejects.toThrow(
      /config\.json in the artifact store does not match the version's manifest/,
    );
    expect(await readdir(cacheDir)).toEqual([]);
  });

  it("keeps a single file's extension in the cache (an S3-stored GGUF stays <sha256>.gguf)", async () => {
    const res = await fetch(`${gw.url}/admin/v1/models/gguf-s3/upload?framework=llamacpp&source=tiny.gguf`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/octet-stream" },
      body: await readFile(await tinyModelPath()),
    });
    expect(res.status).toBe(201);
    const record = (await res.json()) as RegisteredVersion;
    expect(record.kind).toBe("gguf");
    const cacheDir = join(work, "node-3", "cache", "models");
    await mkdir(cacheDir, { recursive: true });
    expect(await localArtifact(openStore(artifactsUrl, s3Settings()), cacheDir, record)).toBe(
      join(cacheDir, `${record.sha256}.gguf`),
    );
  });
});
