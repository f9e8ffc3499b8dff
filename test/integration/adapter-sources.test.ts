/**
 * Where adapters come from (docs/adapters.md): a PEFT directory registered from a server-local
 * directory, an s3:// prefix (s3rver) and an hf:// repository (a local stand-in for the Hub), with
 * the artifact store in S3 so that the base's shapes are read from its safetensors headers there;
 * and an adapter of a GGUF base checked against the GGUF's tensor infos.
 */
import { createHash } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { readGgufInfo } from "../../src/formats/gguf/index.ts";
import { writeTar } from "../../src/models/tar.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { type S3Server, startS3 } from "../helpers/batch-env.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { writeSafetensors } from "../helpers/safetensors.ts";

const BUCKET = "platform-adapters";
const CHECKPOINT = fileURLToPath(new URL("../fixtures/hf/llama/", import.meta.url));
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

let redis: PrivateRedis;
let ctl: Control;
let admin: string;
let s3: S3Server;
let work: string;
let gw: RunningGateway;
let hub: Server;
/** A valid adapter of the tiny Llama checkpoint: q_proj and v_proj of both layers, rank 4. */
let adapter: string;

const values = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + seed) * 0.1);

/** A PEFT directory with a lora_A/lora_B pair per (weight, [out, in]). */
async function writeAdapter(dir: string, weights: [string, number, number][], rank = 4): Promise<void> {
  await mkdir(dir, { recursive: true });
  const modules = [...new Set(weights.map(([w]) => /\.([a-z_]+)$/.exec(w)![1]!))];
  await writeFile(
    join(dir, "adapter_config.json"),
    JSON.stringify({ peft_type: "LORA", r: rank, lora_alpha: 8, target_modules: modules, bias: "none" }),
  );
  await writeSafetensors(
    join(dir, "adapter_model.safetensors"),
    weights.flatMap(([w, out, inDim], i) => [
      { name: `base_model.model.${w}.lora_A.weight`, shape: [rank, inDim], data: values(rank * inDim, i) },
      { name: `base_model.model.${w}.lora_B.weight`, shape: [out, rank], data: values(out * rank, i + 0.5) },
    ]),
  );
  await writeFile(join(dir, "README.md"), "# an adapter\n");
}

function startHub(files: Record<string, Buffer>): Promise<Server> {
  const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
  const server = createServer((req, res) => {
    const url = req.url ?? "/";
    if (url === "/mirror/api/models/org/adapter/revision/main?blobs=true") {
      const siblings = Object.entries(files).map(([name, body]) => ({
        rfilename: name,
        size: body.length,
        ...(name.endsWith(".safetensors") ? { lfs: { sha256: sha(body), size: body.length } } : {}),
      }));
      return res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify({ id: "org/adapter", sha: COMMIT, siblings }));
    }
    const file = /^\/mirror\/org\/adapter\/resolve\/([\w]+)\/([\w.-]+)$/.exec(url);
    const body = file && file[1] === COMMIT ? files[file[2]!] : undefined;
    if (!body) return res.writeHead(404).end();
    res.writeHead(200, { "content-length": body.length }).end(body);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function register(body: Record<string, unknown>) {
  const res = await fetch(`${gw.url}/admin/v1/models`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ framework: "llamacpp", ...body }),
  });
  const text = await res.text();
  return { status: res.status, text, body: JSON.parse(text) as RegisteredVersion };
}

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "platform");
  admin = (await createApiKey(ctl, "admin", "admin")).key;
  work = await mkdtemp(join(tmpdir(), "platform-adapter-sources-"));
  s3 = await startS3(join(work, "s3rver"), BUCKET);
  adapter = join(work, "adapter");
  await writeAdapter(adapter, [
    ["model.layers.0.self_attn.q_proj", 64, 64],
    ["model.layers.0.self_attn.v_proj", 16, 64],
    ["model.layers.1.self_attn.q_proj", 64, 64],
    ["model.layers.1.self_attn.v_proj", 16, 64],
  ]);
  const files: Record<string, Buffer> = {};
  for (const name of ["adapter_config.json", "adapter_model.safetensors", "README.md"])
    files[name] = await readFile(join(adapter, name));
  hub = await startHub(files);
  const settings = loadSettings({
    PLATFORM_DATA_DIR: join(work, "gw"),
    PLATFORM_STORAGE_ROOTS: `${work},s3://${BUCKET}/in`,
    PLATFORM_ARTIFACTS_URL: `s3://${BUCKET}/artifacts`,
    HF_ENDPOINT: `http://127.0.0.1:${(hub.address() as { port: number }).port}/mirror`,
    ...(s3.env as Record<string, string>),
  });
  gw = await startGateway({
    ctl,
    settings: {
      ...settings,
      redisUrl: redis.url,
      sources: { ...settings.sources, allowHttp: true, allowPrivate: true },
    },
    host: "127.0.0.1",
    port: 0,
  });
  // The base, uploaded as the CLI sends a directory: its files land in S3.
  const chunks: Buffer[] = [];
  const names = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];
  for await (const c of writeTar(CHECKPOINT, names) as AsyncIterable<Buffer>) chunks.push(c);
  const res = await fetch(`${gw.url}/admin/v1/models/tiny/upload?framework=llamacpp&source=upload`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/x-tar" },
    body: Buffer.concat(chunks),
  });
  expect(res.status, await res.clone().text()).toBe(201);
}, 120_000);

afterAll(async () => {
  await gw?.close();
  hub?.closeAllConnections();
  hub?.close();
  await s3?.close();
  if (work) await rm(work, { recursive: true, force: true });
  await ctl?.redis.quit();
  await redis?.stop();
});

describe("adapter sources", () => {
  let fromDir: RegisteredVersion;

  it("from a server-local directory: its two files, the base's shapes read from S3", async () => {
    const r = await register({ name: "local", source: adapter, base: "tiny@v1" });
    expect(r.status, r.text).toBe(201);
    fromDir = r.body;
    expect(r.body.kind).toBe("adapter");
    expect(r.body.manifest!.map((f) => f.path)).toEqual(["adapter_config.json", "adapter_model.safetensors"]);
    expect(r.body.adapter).toMatchObject({ rank: 4, alpha: 8, target_modules: ["q_proj", "v_proj"] });
    const store = openStore(`s3://${BUCKET}/artifacts`, s3.settings);
    try {
      expect(await store.head(`${r.body.artifact}/adapter_model.safetensors`)).not.toBeNull();
    } finally {
      store.close();
    }
  });

  it("from an s3:// prefix, with the same digest as from the directory", async () => {
    const store = openStore(`s3://${BUCKET}/in/adapter`, s3.settings);
    try {
      for (const name of ["adapter_config.json", "adapter_model.safetensors"])
        await store.put(name, await readFile(join(adapter, name)));
    } finally {
      store.close();
    }
    const r = await register({ name: "from-s3", source: `s3://${BUCKET}/in/adapter/`, base: "tiny@v1" });
    expect(r.status, r.text).toBe(201);
    expect(r.body.sha256).toBe(fromDir.sha256);
  });

  it("from hf://org/repo, leaving the repository's README behind", async () => {
    const r = await register({ name: "from-hub", source: "hf://org/adapter", base: "tiny@v1" });
    expect(r.status, r.text).toBe(201);
    expect(r.body.sha256).toBe(fromDir.sha256);
    expect(r.body.manifest!.map((f) => f.path)).toEqual(["adapter_config.json", "adapter_model.safetensors"]);
  });

  it("an adapter of a GGUF base is checked against the GGUF's tensors", async () => {
    const gguf = join(work, "tiny.gguf");
    await copyFile(await tinyModelPath(), gguf);
    const base = await register({ name: "gguf-base", source: gguf });
    expect(base.status, base.text).toBe(201);
    const dims = new Map((await readGgufInfo(gguf)).tensors.map((t) => [t.name, t.dims]));
    const [inDim, out] = dims.get("blk.0.attn_v.weight")!;
    const fits = join(work, "gguf-fits");
    await writeAdapter(fits, [["model.layers.0.self_attn.v_proj", out!, inDim!]]);
    const ok = await register({ name: "gguf-adapter", source: fits, base: "gguf-base@v1" });
    expect(ok.status, ok.text).toBe(201);
    const wrong = join(work, "gguf-wrong");
    await writeAdapter(wrong, [["model.layers.0.self_attn.v_proj", out! + 8, inDim!]]);
    const refused = await register({ name: "gguf-adapter", source: wrong, base: "gguf-base@v1" });
    expect(refused.status).toBe(400);
    expect(refused.text).toContain(`the base gguf-base@v1's weight is [${out}, ${inDim}]`);
  });

  it("an adapter source outside the storage roots is refused, as any source", async () => {
    const r = await register({ name: "outside", source: "/etc", base: "tiny@v1" });
    expect(r.status).toBe(403);
  });
});
