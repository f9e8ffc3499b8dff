/**
 * Remote model sources, attacked through `POST /admin/v1/models` and the CLI:
 * a local HTTP server on loopback is exactly the "private" address a tenant
 * would aim the platform at, so every test runs offline.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import type { SourcePolicy } from "../../src/settings/sources.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const BIN = join(import.meta.dirname, "..", "..", "bin", "platform.js");

/** What the Hub (a local stand-in) must receive, and nobody else. */
const HF_TOKEN = "hf_test_token_for_the_hub_only";

let redis: PrivateRedis;
let ctl: Control;
let admin: string;
let model: Buffer;
/** Gateways that differ only in their source policy. */
const gw: Record<"strict" | "open" | "listed" | "slow" | "hf", RunningGateway> = {} as never;
let server: Server;
/** A stand-in Hugging Face Hub (HF_ENDPOINT) and the CDN it redirects to: two origins, as on huggingface.co. */
let hub: Server;
let cdn: Server;
let hubEndpoint: string;
let cdnBase: string;
/** What each of them was asked, with the Authorization header it got. */
const seen: { server: "hub" | "cdn"; path: string; authorization: string | undefined }[] = [];
/** The data directory of the "slow" gateway, whose tmp/ holds the import scratch files. */
let slowDataDir: string;
/** The same server, by two loopback addresses: 127.0.0.2 is allow-listed on the "listed" gateway, 127.0.0.1 is not. */
let base1: string;
let base2: string;

async function gateway(dataDir: string, sources: Partial<SourcePolicy>): Promise<RunningGateway> {
  const settings = loadSettings({ PLATFORM_DATA_DIR: dataDir });
  return startGateway({
    ctl,
    settings: { ...settings, redisUrl: redis.url, sources: { ...settings.sources, ...sources } },
    host: "127.0.0.1",
    port: 0,
  });
}

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "platform");
  admin = (await createApiKey(ctl, "admin", "admin")).key;
  model = await readFile(await tinyModelPath());
  server = createServer((req, res) => {
    const path = req.url ?? "/";
    if (path === "/model.gguf") return res.writeHead(200, { "content-length": model.length }).end(model);
    if (path === "/to-loopback") return res.writeHead(302, { location: `${base1}/model.gguf` }).end();
    if (path === "/to-localhost")
      return res.writeHead(302, { location: `${base1.replace("127.0.0.1", "localhost")}/model.gguf` }).end();
    if (path === "/to-metadata")
      return res.writeHead(301, { location: "http://169.254.169.254/latest/meta-data/" }).end();
    if (path === "/to-file") return res.writeHead(302, { location: "file:///etc/passwd" }).end();
    if (path === "/to-self-ok") return res.writeHead(307, { location: "/model.gguf" }).end();
    if (path === "/loop") return res.writeHead(302, { location: "/loop" }).end();
    if (path === "/declared-big") return res.writeHead(200, { "content-length": 10 * model.length }).end();
    if (path === "/undeclared-big") {
      // No Content-Length: only counting while streaming can catch it.
      res.writeHead(200);
      for (let i = 0; i < 10; i++) res.write(model);
      return res.end();
    }
    if (path === "/stall") {
      res.writeHead(200, { "content-length": model.length });
      res.write(model.subarray(0, 100)); // then nothing, forever
      return;
    }
    if (path === "/trickle") {
      // 64 bytes every 100 ms: never silent for the idle timeout, but the whole takes ~10 s,
      // so only the total deadline can end it early.
      res.writeHead(200, { "content-length": model.length });
      let sent = 0;
      const tick = setInterval(() => {
        if (sent >= 6400) {
          clearInterval(tick);
          return res.end(model.subarray(sent));
        }
        res.write(model.subarray(sent, sent + 64));
        sent += 64;
      }, 100);
      res.on("close", () => clearInterval(tick));
      return;
    }
    if (path === "/missing") return res.writeHead(404).end("no");
    res.writeHead(500).end();
  });
  const record = (name: "hub" | "cdn", headers: IncomingHttpHeaders, path: string) =>
    seen.push({ server: name, path, authorization: headers.authorization });
  hub = createServer((req, res) => {
    const path = req.url ?? "/";
    record("hub", req.headers, path);
    if (path === "/mirror/org/repo/resolve/main/file.gguf")
      return res.writeHead(200, { "content-length": model.length }).end(model);
    // As huggingface.co does for LFS files: a redirect to another origin holding the bytes.
    if (path === "/mirror/org/repo/resolve/v2/file.gguf")
      return res.writeHead(302, { location: `${cdnBase}/blobs/file.gguf?signature=abc` }).end();
    res.writeHead(404).end();
  });
  cdn = createServer((req, res) => {
    const path = req.url ?? "/";
    record("cdn", req.headers, path);
    if (path.startsWith("/blobs/file.gguf")) return res.writeHead(200, { "content-length": model.length }).end(model);
    res.writeHead(404).end();
  });
  for (const s of [server, hub, cdn]) await new Promise<void>((r) => s.listen(0, "0.0.0.0", r));
  hubEndpoint = `http://127.0.0.1:${(hub.address() as { port: number }).port}/mirror`;
  cdnBase = `http://127.0.0.1:${(cdn.address() as { port: number }).port}`;
  const port = (server.address() as { port: number }).port;
  base1 = `http://127.0.0.1:${port}`;
  base2 = `http://127.0.0.2:${port}`;
  const dir = await mkdtemp(join(tmpdir(), "platform-sources-"));
  gw.strict = await gateway(join(dir, "strict"), {});
  gw.open = await gateway(join(dir, "open"), {
    allowHttp: true,
    allowPrivate: true,
    maxBytes: 2 * model.length,
    idleTimeoutMs: 500,
  });
  gw.listed = await gateway(join(dir, "listed"), { allowHttp: true, allowedCidrs: ["127.0.0.2/32"] });
  slowDataDir = join(dir, "slow");
  gw.slow = await gateway(slowDataDir, {
    allowHttp: true,
    allowPrivate: true,
    totalTimeoutMs: 1500,
    idleTimeoutMs: 1000,
  });
  const hubSettings = loadSettings({ HF_ENDPOINT: hubEndpoint, HF_TOKEN }).sources;
  gw.hf = await gateway(join(dir, "hf"), {
    allowHttp: true,
    allowPrivate: true,
    hfEndpoint: hubSettings.hfEndpoint,
    hfToken: hubSettings.hfToken,
  });
});

afterAll(async () => {
  for (const g of Object.values(gw)) await g?.close();
  for (const s of [server, hub, cdn]) {
    s?.closeAllConnections();
    s?.close();
  }
  await ctl?.redis.quit();
  await redis?.stop();
});

async function register(on: keyof typeof gw, name: string, source: string, query = "") {
  const res = await fetch(`${gw[on].url}/admin/v1/models${query}`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ name, source }),
  });
  const text = await res.text();
  return {
    status: res.status,
    type: res.headers.get("content-type") ?? "",
    text,
    body: text.startsWith("{") && !text.includes("\n{") ? JSON.parse(text) : undefined,
  };
}

async function versions(name: string): Promise<unknown[]> {
  const res = await fetch(`${gw.open.url}/admin/v1/models`, { headers: { authorization: `Bearer ${admin}` } });
  return ((await res.json()) as { data: { name: string }[] }).data.filter((m) => m.name === name);
}

describe("remote model sources", () => {
  it("http:// is refused unless PLATFORM_SOURCES_ALLOW_HTTP is set", async () => {
    const r = await register("strict", "plain", `${base1}/model.gguf`);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "invalid_source", param: "source" });
    expect(r.body.error.message).toContain("PLATFORM_SOURCES_ALLOW_HTTP=true");
  });

  it("a loopback address is refused by default (403 naming the settings) and accepted when allowed", async () => {
    for (const host of [
      base1,
      base1.replace("127.0.0.1", "localhost"),
      base1.replace("127.0.0.1", "[::ffff:127.0.0.1]"),
    ]) {
      const r = await register("listed", "loop", `${host}/model.gguf`);
      expect(r.status, host).toBe(403);
      expect(r.body.error.code).toBe("source_forbidden");
      expect(r.body.error.message).toMatch(/PLATFORM_SOURCES_ALLOWED_HOSTS.*PLATFORM_SOURCES_ALLOW_PRIVATE=true/);
    }
    expect(await versions("loop")).toEqual([]);
    const ok = await register("open", "loop", `${base1}/model.gguf`);
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({ name: "loop", version: "v1", size_bytes: model.length });
    // The allow-list admits exactly its CIDR.
    const listed = await register("listed", "listed", `${base2}/to-self-ok`);
    expect(listed.status).toBe(201);
  });

  it("a redirect is re-checked: to a refused address, to localhost, to cloud metadata, to file:", async () => {
    for (const [path, status, code] of [
      ["/to-loopback", 403, "source_forbidden"],
      ["/to-localhost", 403, "source_forbidden"],
      ["/to-metadata", 403, "source_forbidden"],
      ["/to-file", 400, "invalid_source"],
    ] as const) {
      const r = await register("listed", "redirected", `${base2}${path}`);
      expect(r.status, path).toBe(status);
      expect(r.body.error.code, path).toBe(code);
      expect(r.body.error.message, path).toContain("redirect");
      // Neither the address redirected to nor the file's contents reach the client.
      expect(r.text).not.toMatch(/127\.0\.0\.1|169\.254|etc\/passwd|root:/);
    }
    const loop = await register("open", "redirected", `${base1}/loop`);
    expect(loop.status).toBe(502);
    expect(loop.body.error.message).toContain("more than 5 redirects");
    expect(await versions("redirected")).toEqual([]);
  });

  it("a source over PLATFORM_MAX_MODEL_BYTES is refused, declared or not, and nothing is registered", async () => {
    for (const path of ["/declared-big", "/undeclared-big"]) {
      const r = await register("open", "big", `${base1}${path}`);
      expect(r.status, path).toBe(413);
      expect(r.body.error.code).toBe("source_too_large");
      expect(r.body.error.message).toContain("PLATFORM_MAX_MODEL_BYTES");
    }
    expect(await versions("big")).toEqual([]);
  });

  it("a stalled server hits the idle timeout, naming the setting", async () => {
    const r = await register("open", "stalled", `${base1}/stall`);
    expect(r.status).toBe(504);
    expect(r.body.error.code).toBe("source_timeout");
    expect(r.body.error.message).toContain("PLATFORM_SOURCES_IDLE_TIMEOUT_MS");
    expect(await versions("stalled")).toEqual([]);
  });

  it("a server that trickles steadily is cut off at PLATFORM_SOURCES_TIMEOUT_MS, leaving nothing behind", async () => {
    const scratch = async () =>
      (await readdir(join(slowDataDir, "tmp")).catch(() => [] as string[])).filter((f) => f.startsWith("import-"));
    const started = Date.now();
    const pending = register("slow", "trickled", `${base1}/trickle`);
    // The download really was under way: its scratch file exists while the bytes trickle in.
    let during: string[] = [];
    while (during.length === 0 && Date.now() - started < 1200) {
      during = await scratch();
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(during).toHaveLength(1);
    const r = await pending;
    const elapsed = Date.now() - started;
    expect(r.status).toBe(504);
    expect(r.body.error.code).toBe("source_timeout");
    expect(r.body.error.message).toContain("PLATFORM_SOURCES_TIMEOUT_MS");
    expect(r.body.error.message).not.toContain("IDLE");
    // Not before the limit (the error, not the clock, says it was the limit that ended it).
    expect(elapsed).toBeGreaterThanOrEqual(1400);
    expect(await versions("trickled")).toEqual([]);
    expect(await scratch()).toEqual([]);
  });

  it("hf:// resolves against HF_ENDPOINT and sends HF_TOKEN to that origin only, never to the CDN it redirects to", async () => {
    const token = HF_TOKEN;
    {
      seen.length = 0;
      const main = await register("hf", "hubbed", "hf://org/repo/file.gguf");
      expect(main.status, main.text).toBe(201);
      expect(main.body).toMatchObject({
        name: "hubbed",
        version: "v1",
        source: "hf://org/repo/file.gguf",
        size_bytes: model.length,
      });
      expect(seen).toEqual([
        { server: "hub", path: "/mirror/org/repo/resolve/main/file.gguf", authorization: `Bearer ${token}` },
      ]);

      seen.length = 0;
      const pinned = await register("hf", "hubbed", "hf://org/repo@v2/file.gguf");
      expect(pinned.status, pinned.text).toBe(201);
      expect(pinned.body).toMatchObject({ name: "hubbed", version: "v2", size_bytes: model.length });
      expect(seen).toEqual([
        { server: "hub", path: "/mirror/org/repo/resolve/v2/file.gguf", authorization: `Bearer ${token}` },
        { server: "cdn", path: "/blobs/file.gguf?signature=abc", authorization: undefined },
      ]);

      // The same Hub URL named as a plain http:// source is not an hf:// source: no token.
      seen.length = 0;
      const plain = await register("hf", "hubbed", `${hubEndpoint}/org/repo/resolve/main/file.gguf`);
      expect(plain.status, plain.text).toBe(201);
      expect(seen).toEqual([
        { server: "hub", path: "/mirror/org/repo/resolve/main/file.gguf", authorization: undefined },
      ]);
      expect(await versions("hubbed")).toHaveLength(3);
    }
  });

  it("?progress=ndjson streams progress, then the record; refusals stay ordinary HTTP errors", async () => {
    const r = await register("open", "progress", `${base1}/model.gguf`, "?progress=ndjson");
    expect(r.status).toBe(200);
    expect(r.type).toContain("application/x-ndjson");
    const lines = r.text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.some((l) => l.progress?.total === model.length)).toBe(true);
    expect(lines.at(-1).result).toMatchObject({ name: "progress", size_bytes: model.length });

    const refused = await register("strict", "progress", `${base1}/model.gguf`, "?progress=ndjson");
    expect(refused.status).toBe(400);
    const missing = await register("open", "progress", `${base1}/missing`, "?progress=ndjson");
    expect(missing.status).toBe(404);
  });

  it("the CLI shows download and upload progress on stderr and keeps --json output clean", async () => {
    const env = {
      ...process.env,
      PLATFORM_BASE_URL: gw.open.url,
      PLATFORM_API_KEY: admin,
      PLATFORM_CONFIG_DIR: await mkdtemp(join(tmpdir(), "cfg-")),
    };
    const run = promisify(execFile);
    const remote = await run(
      process.execPath,
      [BIN, "training", "submit", "--name", "cli", "--source", `${base1}/model.gguf`],
      { env },
    );
    expect(remote.stderr).toMatch(/downloading .*100%/);
    expect(remote.stdout).toContain("registered cli@v1");
    const upload = await run(
      process.execPath,
      [BIN, "training", "submit", "--name", "cli", "--source", await tinyModelPath(), "--json"],
      { env },
    );
    expect(upload.stderr).toMatch(/uploading .*100%/);
    expect(JSON.parse(upload.stdout)).toMatchObject({ name: "cli", version: "v2" });
    const refused = await run(
      process.execPath,
      [BIN, "training", "submit", "--name", "cli", "--source", `${base1}/model.gguf`],
      {
        env: { ...env, PLATFORM_BASE_URL: gw.strict.url },
      },
    ).catch((e: { code: number; stderr: string }) => e);
    expect((refused as { code: number }).code).toBe(1);
    expect((refused as { stderr: string }).stderr).toContain("PLATFORM_SOURCES_ALLOW_HTTP");
    const scheme = await run(
      process.execPath,
      [BIN, "training", "submit", "--name", "cli", "--source", "ftp://example.com/m.gguf"],
      { env },
    ).catch((e: { code: number; stderr: string }) => e);
    expect((scheme as { code: number }).code).toBe(2);
    expect((scheme as { stderr: string }).stderr).toContain("https://");
  });
});
