/**
 * The real `platform` binary against the shared stack: registry, deploy (flags and YAML), status,
 * keys. Its models, endpoint and key have names of this file's own.
 */
import { copyFile, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack } from "../helpers/stack.ts";

const MODEL = unique("tiny");
const REMOTE = `${MODEL}-remote`;
const GHOST = unique("ghost");

let stack: Stack;
let work: string;
let model: string;

beforeAll(async () => {
  // The URL test serves a model from a loopback http:// server: allowed by the shared stack's
  // settings (PLATFORM_SOURCES_ALLOW_HTTP and PLATFORM_SOURCES_ALLOW_PRIVATE, test/e2e-stack.ts).
  stack = await sharedStack();
  work = await mkdtemp(join(tmpdir(), "platform-cli-"));
  model = join(work, "tiny-chat.gguf");
  await copyFile(await tinyModelPath(), model);
});

afterAll(async () => {
  await undeploy(stack, MODEL);
});

describe("platform CLI", () => {
  it("prints its version", async () => {
    const r = await runCli(["--version"], stack.env);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it("registers versions v1, v2 and an explicit one, and lists them", async () => {
    const first = await runCli(
      ["training", "submit", "--name", MODEL, "--framework", "llamacpp", "--source", model, "--json"],
      stack.env,
    );
    expect(first.code, first.stderr).toBe(0);
    const rec = JSON.parse(first.stdout);
    expect(rec).toMatchObject({ name: MODEL, version: "v1", framework: "llamacpp" });
    expect(rec.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(rec.gguf).toMatchObject({
      architecture: "llama",
      quantization: "F32",
      chat_template: false,
      tokenizer: "llama",
    });
    expect(rec.gguf.parameters).toBeGreaterThan(10_000);
    expect(rec.gguf.context_length).toBe(512);

    const second = await runCli(["training", "submit", "--name", MODEL, "--source", `file://${model}`], stack.env);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain(`registered ${MODEL}@v2`);
    const named = await runCli(
      ["training", "submit", "--name", MODEL, "--source", model, "--version", "prod-1"],
      stack.env,
    );
    expect(named.code).toBe(0);
    const dup = await runCli(
      ["training", "submit", "--name", MODEL, "--source", model, "--version", "prod-1"],
      stack.env,
    );
    expect(dup.code).toBe(1);
    expect(dup.stderr).toMatch(/already has a version "prod-1"/);

    const table = await runCli(["training", "list"], stack.env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/NAME.*VERSION.*FRAMEWORK/);
    for (const v of ["v1", "v2", "prod-1"]) expect(table.stdout).toContain(v);
    const json = JSON.parse((await runCli(["training", "list", "--json"], stack.env)).stdout);
    // Other files' models are listed too, on the shared stack: only this file's count.
    const mine = json.filter((m: { name: string }) => m.name === MODEL);
    expect(mine.map((m: { version: string }) => m.version)).toEqual(["v1", "v2", "prod-1"]);
  });

  it("registers from a URL, fetched by the gateway (http:// on loopback, allowed by the operator)", async () => {
    const bytes = await readFile(model);
    const server = createServer((req, res) => {
      if (req.url !== "/models/tiny.gguf") return res.writeHead(404).end();
      res.writeHead(200, { "content-type": "application/octet-stream" }).end(bytes);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const ok = await runCli(
        ["training", "submit", "--name", REMOTE, "--source", `http://127.0.0.1:${port}/models/tiny.gguf`, "--json"],
        stack.env,
      );
      expect(ok.code, ok.stderr).toBe(0);
      expect(JSON.parse(ok.stdout)).toMatchObject({
        name: REMOTE,
        version: "v1",
        size_bytes: bytes.length,
        source: `http://127.0.0.1:${port}/models/tiny.gguf`,
      });
      const missing = await runCli(
        ["training", "submit", "--name", REMOTE, "--source", `http://127.0.0.1:${port}/nope.gguf`],
        stack.env,
      );
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(/answered HTTP 404/);
    } finally {
      server.close();
    }
  });

  it("rejects a missing source and a non-GGUF file clearly", async () => {
    const missing = await runCli(
      ["training", "submit", "--name", `${MODEL}-x`, "--source", join(work, "nope.gguf")],
      stack.env,
    );
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no such file/);
    const junk = join(work, "junk.gguf");
    await writeFile(junk, "definitely not gguf");
    const bad = await runCli(["training", "submit", "--name", `${MODEL}-x`, "--source", junk], stack.env);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/not a GGUF file/);
  });

  it("deploys from YAML, reports status, and keeps fields it cannot apply", async () => {
    const yaml = join(work, "deploy.yaml");
    await writeFile(
      yaml,
      [
        `endpoint: ${MODEL}`,
        "model:",
        `  name: ${MODEL}`,
        "  version: latest",
        "  framework: llamacpp",
        "runtime:",
        "  gpu_memory_utilization: 0.9",
        "  max_model_len: 256",
        "  tensor_parallel_size: 1",
        "  dtype: float16",
        "resources:",
        "  replicas: 1",
        "  gpu: 1",
        "  gpu_type: a100",
        "  memory: 2Gi",
        "  cpu: 1",
        "",
      ].join("\n"),
    );
    const deploy = await runCli(["inference", "deploy", "--config", yaml], stack.env);
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(deploy.stdout).toContain(`deployed ${MODEL}: ${MODEL}@prod-1`);
    await stack.waitFor(
      async () => (await runCli(["inference", "status", MODEL, "--json"], stack.env)).stdout.includes('"available"'),
      `${MODEL} available`,
    );
    const status = await runCli(["inference", "status", MODEL], stack.env);
    expect(status.stdout).toMatch(new RegExp(`${MODEL}\\s*│\\s*available`));
    expect(status.stdout).toMatch(/1\/1/);
    expect(status.stdout).toMatch(/not applied.*runtime\.gpu_memory_utilization.*runtime\.dtype.*resources\.gpu_type/);
    // resources.gpu is applied on llama.cpp (GPU offload where the node has one, the CPU and a warning where not).
    expect(status.stdout).not.toMatch(/resources\.gpu\b/);
    const json = JSON.parse((await runCli(["inference", "status", MODEL, "--json"], stack.env)).stdout);
    expect(json).toMatchObject({
      state: "available",
      version: "prod-1",
      requested_version: "latest",
      replicas: { ready: 1, desired: 1 },
    });
    // max_model_len 256 is applied: 300 tokens no longer fit.
    const res = await fetch(`${stack.baseUrl}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, prompt: "hi", max_tokens: 300 }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("context_length_exceeded");
  });

  it("asks a worker for its endpoint, or --standby, and nothing else", async () => {
    for (const args of [["worker"], ["worker", "--endpoint", MODEL, "--standby"]]) {
      const r = await runCli(args, stack.env);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/give --endpoint <name> \(or, as `platform up` does, --standby\)/);
    }
  });

  it("rejects invalid deployment YAML naming the field and the expected form", async () => {
    const bad = join(work, "bad.yaml");
    await writeFile(bad, `model:\n  name: ${MODEL}\nresources:\n  memory: 2GB\n  replicas: -1\n  colour: blue\n`);
    const r = await runCli(["inference", "deploy", "--config", bad], stack.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('resources.memory: expected "<n>Gi"');
    expect(r.stderr).toContain("resources.replicas");
    expect(r.stderr).toContain('unknown field(s) "colour"');
    const broken = join(work, "broken.yaml");
    await writeFile(broken, "model: [unclosed\n");
    const r2 = await runCli(["inference", "deploy", "--config", broken], stack.env);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/invalid YAML/);
    const unknownModel = await runCli(["inference", "deploy", "--model", GHOST], stack.env);
    expect(unknownModel.code).toBe(1);
    expect(unknownModel.stderr).toContain(`model "${GHOST}" is not registered`);
  });

  it("deploys with flags and manages API keys", async () => {
    const d = await runCli(
      ["inference", "deploy", "--model", MODEL, "--version", "v1", "--replicas", "0", "--json"],
      stack.env,
    );
    expect(d.code, d.stderr).toBe(0);
    expect(JSON.parse(d.stdout)).toMatchObject({ name: MODEL, version: "v1", desired_replicas: 0 });
    const created = await runCli(["keys", "create", `${MODEL}-ci`, "--json"], stack.env);
    const key = JSON.parse(created.stdout);
    expect(key.key).toMatch(/^sk-plat-/);
    const asUser = { ...stack.env, PLATFORM_API_KEY: key.key };
    const denied = await runCli(["training", "list"], asUser);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/admin/);
    const models = await fetch(`${stack.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } });
    expect(models.status).toBe(200);
    const list = await runCli(["keys", "list"], stack.env);
    expect(list.stdout).toContain(key.id);
    expect(list.stdout).not.toContain(key.key);
    expect((await runCli(["keys", "revoke", key.id], stack.env)).code).toBe(0);
    // Gateways remember verified keys for a few seconds (docs/design.md): revocation lands within that.
    await stack.waitFor(
      async () =>
        (await fetch(`${stack.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } })).status === 401,
      "the revoked key to be refused",
      15_000,
    );
  });

  it("says how to log in when there are no credentials", async () => {
    const r = await runCli(["training", "list"], {
      ...stack.env,
      PLATFORM_BASE_URL: undefined,
      PLATFORM_API_KEY: undefined,
      PLATFORM_CONFIG_DIR: work,
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/not logged in/);
  });
});
