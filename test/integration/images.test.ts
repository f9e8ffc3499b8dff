/**
 * Image generation end to end (docs/images.md): a tiny random Stable Diffusion pipeline made by
 * diffusers itself (scripts/reference/make-tiny-diffusers.py) is registered, deployed on a real
 * replica running the diffusers engine's Python child, and asked for images through the gateway:
 * the PNG must be pixel-identical to what diffusers makes directly for the same prompt, seed, size,
 * steps and guidance (scripts/reference/diffusers-reference.py), the official clients must work
 * unchanged, and the edges refuse what they should. Skips, saying so, without torch and diffusers.
 */
import { execFile, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import { cp, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { importModel } from "../../src/models/import.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { openStore } from "../../src/storage/index.ts";
import { loadEngine } from "../../workers/engines/index.ts";
import { modelFile } from "../../workers/weights.ts";
import { type RunningWorker, startWorker } from "../../workers/worker.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";
import { diffusersPython, makeTinyPipeline } from "../helpers/models.ts";
import { scrape, total } from "../helpers/metrics-text.ts";
import type { Engine } from "../../workers/engines/engine.ts";

const python = diffusersPython("images.test");
const ROOT = new URL("../../", import.meta.url).pathname;
const usable = python !== undefined;
// The official Python client, where it is installed (.ci/run's .venv-py, named by PLATFORM_TEST_PYTHON).
const PYTHON_CLIENT = process.env.PLATFORM_TEST_PYTHON ?? "python3";
const pythonClient = usable && spawnSync(PYTHON_CLIENT, ["-c", "import openai"], { stdio: "ignore" }).status === 0;
if (usable && !pythonClient)
  console.warn(`images.test: ${PYTHON_CLIENT} has no openai package; the Python client test skips`);

let dir: string;
let pipelineDir: string;
let tiny: TinyGateway;
let worker: RunningWorker | undefined;
let engine: Engine;
let model: RegisteredVersion;
let user: string;
let other: string;

const REQUEST = { prompt: "a photo of a red cat", width: 64, height: 64, steps: 4, guidance: 7.5, seed: 42 };

beforeAll(async () => {
  if (!usable) return;
  dir = await mkdtemp(join(tmpdir(), "images-test-"));
  pipelineDir = join(dir, "tiny-sd");
  makeTinyPipeline(python as string, pipelineDir);
  tiny = await startTinyGateway();
  const { ctl, settings } = tiny;
  const deps = { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dir, "scratch") };
  // The registration default framework (llamacpp): a pipeline goes to diffusers whatever it was.
  model = await importModel(deps, { name: "pic", framework: "llamacpp", source: pipelineDir });
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "pic" }, resources: { parallel: 2, cpu: 2 } }));
  const endpoint = await getEndpoint(ctl, "pic");
  const picturesSettings = { ...settings.pictures, python: python as string };
  worker = startWorker({
    ctl,
    endpoint,
    replicaId: "pic-1",
    images: openStore(settings.artifactsUrl),
    loadEngine: async (describe) => {
      engine = await loadEngine(endpoint, await modelFile(settings, ctl, endpoint, model, "pic-1", describe), {
        images: picturesSettings,
      });
      return engine;
    },
  });
  await worker.ready;
  user = (await createApiKey(tiny.ctl, "user", "user")).key;
  other = (await createApiKey(tiny.ctl, "other", "user")).key;
}, 600_000);

afterAll(async () => {
  await worker?.drain({ deadlineMs: 0 });
  await tiny?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function run(cmd: string, args: string[]): string {
  const out = spawnSync(cmd, args, { encoding: "utf8", timeout: 300_000, maxBuffer: 64 * 1024 * 1024 });
  if (out.status !== 0) throw new Error(`${cmd} ${args[0]} failed (${out.status}):\n${out.stderr.slice(-3000)}`);
  return out.stdout;
}

const post = (path: string, body: unknown, key = user) =>
  fetch(`${tiny.gateway.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });

/** What diffusers makes directly, compared with the PNGs at `paths` (max channel difference, values differing). */
function reference(paths: string[]): { compared: { max_diff: number; differing: number }[] } {
  const script = join(ROOT, "scripts/reference/diffusers-reference.py");
  const lines = run(python as string, [script, pipelineDir, JSON.stringify(REQUEST), ...paths])
    .trim()
    .split("\n");
  return JSON.parse(lines.at(-1) as string);
}

describe.skipIf(!usable)("images", () => {
  it("registers the pipeline directory as an image version, with its metadata", () => {
    expect(model).toMatchObject({
      framework: "diffusers",
      task: "image",
      kind: "hf",
      pipeline: {
        pipeline_class: "StableDiffusionPipeline",
        default_width: 64,
        default_height: 64,
        size_multiple: 4,
        max_side: 128,
        scheduler: "DDIMScheduler",
        dtype: "float32",
        components: ["scheduler", "text_encoder", "tokenizer", "unet", "vae"],
      },
    });
    expect(model.manifest?.map((f) => f.path)).toContain("unet/diffusion_pytorch_model.safetensors");
  });

  it("answers the image diffusers makes for the same prompt, seed, size, steps and guidance, pixel for pixel", async () => {
    const res = await post("/v1/images/generations", {
      model: "pic",
      prompt: REQUEST.prompt,
      size: "64x64",
      num_inference_steps: REQUEST.steps,
      guidance_scale: REQUEST.guidance,
      seed: REQUEST.seed,
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { b64_json: string; seed: number }[]; usage: Record<string, number> };
    expect(body.data).toHaveLength(1);
    expect(body.data[0]?.seed).toBe(REQUEST.seed);
    expect(body.usage).toMatchObject({ images: 1, steps: REQUEST.steps });
    expect(body.usage.input_tokens).toBeGreaterThan(0);
    const png = Buffer.from(body.data[0]?.b64_json as string, "base64");
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    const path = join(dir, "platform.png");
    await writeFile(path, png);
    expect(reference([path]).compared[0]).toEqual({ max_diff: 0, differing: 0 });
    // b64_json answers leave nothing behind in the store.
    const left = await readdir(join(tiny.settings.dataDir, "artifacts", "images")).catch(() => []);
    const files = (
      await Promise.all(left.map((h) => readdir(join(tiny.settings.dataDir, "artifacts", "images", h))))
    ).flat();
    expect(files).toEqual([]);
  }, 300_000);

  it("works with the official openai client: b64_json, and url served to its key alone", async () => {
    const client = new OpenAI({ baseURL: `${tiny.gateway.url}/v1`, apiKey: user });
    const b64 = await client.images.generate({
      model: "pic",
      prompt: "a blue house",
      n: 2,
      size: "64x64" as "256x256",
      response_format: "b64_json",
      // @ts-expect-error: the platform's extensions, sent as they are
      num_inference_steps: 2,
      seed: 7,
    });
    expect(b64.data).toHaveLength(2);
    const [first, second] = (b64.data ?? []).map((d) => d.b64_json as string);
    // Choice i is seeded with seed + i: two different images.
    expect(first).not.toBe(second);
    const url = await client.images.generate({
      model: "pic",
      prompt: "a blue house",
      size: "64x64" as "256x256",
      response_format: "url",
      // @ts-expect-error: the platform's extensions
      num_inference_steps: 2,
      seed: 7,
    });
    const link = url.data?.[0]?.url as string;
    expect(link).toMatch(/\/v1\/images\/files\/img-[0-9a-f]{32}\.png$/);
    const got = await fetch(link, { headers: { authorization: `Bearer ${user}` } });
    expect(got.status).toBe(200);
    expect(got.headers.get("content-type")).toBe("image/png");
    // The same seed and request: the same image as the b64 answer's first.
    expect(Buffer.from(await got.arrayBuffer()).toString("base64")).toBe(first);
    expect((await fetch(link, { headers: { authorization: `Bearer ${other}` } })).status).toBe(404);
    expect((await fetch(link)).status).toBe(401);
  }, 300_000);

  it.skipIf(!pythonClient)(
    "works with the official Python client",
    async () => {
      const script = [
        "import sys, base64, openai",
        "c = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2])",
        "r = c.images.generate(model='pic', prompt='a tree', size='64x64', extra_body={'num_inference_steps': 2, 'seed': 3})",
        "print(base64.b64decode(r.data[0].b64_json)[1:4].decode())",
      ].join("\n");
      // Asynchronously: the gateway answering it runs in this process.
      const { stdout } = await promisify(execFile)(PYTHON_CLIENT, ["-c", script, `${tiny.gateway.url}/v1`, user], {
        timeout: 300_000,
      });
      expect(stdout.trim()).toBe("PNG");
    },
    300_000,
  );

  it("counts images and steps in usage and metrics", async () => {
    const res = await fetch(`${tiny.gateway.url}/v1/usage?since=1h&by=model&model=pic`, {
      headers: { authorization: `Bearer ${user}` },
    });
    const rows = ((await res.json()) as { data: { model: string; images: number; steps: number; requests: number }[] })
      .data;
    // This key's requests so far: 1 image of 4 steps, 2 of 2, 1 of 2 (and the Python client's, where it ran).
    expect(rows[0]?.images).toBeGreaterThanOrEqual(4);
    expect(rows[0]?.steps).toBeGreaterThanOrEqual(10);
    const samples = await scrape(tiny.gateway.metricsUrl);
    expect(total(samples, "platform_images_total", { model_name: "pic" })).toBeGreaterThanOrEqual(4);
    expect(total(samples, "platform_image_steps_total", { model_name: "pic" })).toBeGreaterThanOrEqual(10);
    expect(total(samples, "platform_image_step_seconds_count", { model_name: "pic" })).toBeGreaterThanOrEqual(4);
  });

  it("stops a generation mid-way when its request is cancelled, and serves on", async () => {
    const abort = new AbortController();
    const seen: number[] = [];
    const image = (engine.generateImage as NonNullable<Engine["generateImage"]>).bind(engine);
    const cancelled = image(
      { prompt: "a dog", width: 64, height: 64, steps: 400, guidance: 7.5, seed: 1 },
      {
        signal: abort.signal,
        onStep: (step) => {
          seen.push(step);
          if (step === 2) abort.abort();
        },
      },
    );
    await expect(cancelled).rejects.toMatchObject({ status: 499, code: "cancelled" });
    expect(Math.max(...seen)).toBeLessThan(400);
    const next = await image({ prompt: "a dog", width: 64, height: 64, steps: 1, guidance: 7.5, seed: 1 }, {});
    expect(next.png.subarray(1, 4).toString()).toBe("PNG");
  }, 300_000);

  it("its diffusers child answers its worker alone: another loopback client without the worker's token is refused", async () => {
    const { baseUrl } = engine as unknown as { baseUrl: string };
    expect((await fetch(`${baseUrl}/health`)).status).toBe(200);
    for (const [path, init] of [
      ["/info", {}],
      ["/queue", {}],
      ["/generate", { method: "POST", body: JSON.stringify({ id: "x", prompt: "a cat" }) }],
      ["/cancel", { method: "POST", body: JSON.stringify({ id: "x" }) }],
    ] as const) {
      const res = await fetch(`${baseUrl}${path}`, { ...init, headers: { authorization: "Bearer guessed" } });
      expect(res.status, path).toBe(401);
      expect(await res.json()).toEqual({ error: "unauthorized" });
    }
  });

  it("refuses a size the pipeline does not take, naming the sizes it does", async () => {
    const res = await post("/v1/images/generations", { model: "pic", prompt: "a cat", size: "66x66" });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { message: string; param: string } };
    expect(error.param).toBe("size");
    expect(error.message).toContain("multiples of 4 from 4 to 128");
  });

  it("refuses an unknown field that would change the image, naming it", async () => {
    const res = await post("/v1/images/generations", { model: "pic", prompt: "a cat", strength: 0.5 });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("strength");
    const style = await post("/v1/images/generations", { model: "pic", prompt: "a cat", style: "vivid" });
    expect(style.status).toBe(400);
  });

  it("sends each model to its route: images of a text model, chat of an image model", async () => {
    const chat = await post("/v1/chat/completions", { model: "pic", messages: [{ role: "user", content: "hi" }] });
    expect(chat.status).toBe(400);
    expect(((await chat.json()) as { error: { message: string } }).error.message).toContain("/v1/images/generations");
    const embed = await post("/v1/embeddings", { model: "pic", input: "hi" });
    expect(embed.status).toBe(400);
    const images = await post("/v1/images/generations", { model: "tiny", prompt: "a cat" });
    expect(images.status).toBe(400);
    expect(((await images.json()) as { error: { message: string } }).error.message).toContain("/v1/chat/completions");
  });

  it("refuses a broken pipeline directory, saying what is missing", async () => {
    const broken = join(dir, "broken");
    await cp(pipelineDir, broken, { recursive: true });
    await rm(join(broken, "unet", "diffusion_pytorch_model.safetensors"));
    const deps = { ctl: tiny.ctl, artifacts: openStore(tiny.settings.artifactsUrl), scratchDir: join(dir, "scratch") };
    await expect(importModel(deps, { name: "broken", framework: "llamacpp", source: broken })).rejects.toThrow(
      /unet\/ has no safetensors weights/,
    );
  });
});
