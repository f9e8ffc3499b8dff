// LoRA adapters on the vLLM engine against the fake `vllm serve` (test/helpers/fake-vllm.ts), in the
// style of vllm-engine.test.ts: the flags that enable LoRA, loading adapters through vLLM's API on
// first use, requests naming the adapter as their model, and the bound on adapters kept registered.
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Resources, Runtime } from "../../src/contracts/deployment.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { loadVllm, type VllmEngine, type VllmOptions, vllmArgs } from "../../workers/engines/vllm.ts";
import { STORY, fakeVllmPath, writeFakeVllmBin } from "../helpers/fake-vllm.ts";

let dir: string;
let bin: string;
let records = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "vllm-adapters-"));
  bin = await writeFakeVllmBin(dir);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

function args(runtime: object, lora?: boolean): string[] {
  return vllmArgs({
    modelPath: "/models/m",
    servedName: "m",
    port: 8123,
    runtime: Runtime.parse(runtime),
    resources: Resources.parse({}),
    lora,
  });
}

describe("vllmArgs and LoRA", () => {
  it("leaves LoRA off unless adapters may come", () => {
    expect(args({})).not.toContain("--enable-lora");
  });

  it("enables LoRA with the defaults when adapters of the version are registered", () => {
    const argv = args({}, true);
    expect(argv).toContain("--enable-lora");
    expect(flag(argv, "--max-loras")).toBe("4");
    expect(flag(argv, "--max-lora-rank")).toBe("64");
  });

  it("maps max_loras, and rounds max_lora_rank up to a rank vLLM accepts", () => {
    const argv = args({ max_loras: 2, max_lora_rank: 12 });
    expect(argv).toContain("--enable-lora");
    expect(flag(argv, "--max-loras")).toBe("2");
    expect(flag(argv, "--max-lora-rank")).toBe("16");
  });
});

type Logged = { method?: string; path?: string; body?: Record<string, unknown> };

async function requests(record: string): Promise<Logged[]> {
  const text = await readFile(`${record}.requests.jsonl`, "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Logged);
}

function options(runtime: object, lora: boolean): VllmOptions & { record: string } {
  const record = join(dir, `record-${++records}.json`);
  return {
    record,
    modelPath: join(dir, "model"),
    servedName: "stories",
    bin,
    lora,
    runtime: Runtime.parse(runtime),
    resources: Resources.parse({ parallel: 3 }),
    env: { FAKE_VLLM_RECORD: record, PATH: fakeVllmPath() },
    log: () => undefined,
  };
}

async function adapterDir(name: string): Promise<string> {
  const path = join(dir, "adapters", name);
  await mkdir(path, { recursive: true });
  await writeFile(join(path, "adapter_config.json"), JSON.stringify({ peft_type: "LORA", r: 4 }));
  return path;
}

describe("a vLLM engine serving adapters", () => {
  let engine: VllmEngine;
  let opts: ReturnType<typeof options>;

  beforeAll(async () => {
    opts = options({ max_loras: 1 }, false);
    engine = await loadVllm(opts);
  });

  afterAll(async () => {
    await engine?.dispose();
  });

  it("starts vllm serve with runtime LoRA updating allowed", async () => {
    const started = JSON.parse(await readFile(opts.record, "utf8")) as { argv: string[]; loraUpdating: string | null };
    expect(started.argv).toContain("--enable-lora");
    expect(started.loraUpdating).toBe("True");
    expect(engine.servesAdapters).toBe(true);
  });

  it("loads an adapter through the API on first use, then requests with the adapter as the model", async () => {
    const path = await adapterDir("a1");
    const params = { max_tokens: 3, temperature: 0 };
    const first = await engine.generate(
      { kind: "prompt", prompt: "Once", params, adapter: { ref: "a1@v1", path, rank: 4 } },
      {},
    );
    const again = await engine.generate(
      { kind: "prompt", prompt: "Once", params, adapter: { ref: "a1@v1", path, rank: 4 } },
      {},
    );
    const base = await engine.generate({ kind: "prompt", prompt: "Once", params }, {});
    expect(first.text).toBe(`[a1@v1]${STORY.slice(0, 2).join("")}`);
    expect(again.text).toBe(first.text);
    expect(base.text).toBe(STORY.slice(0, 3).join(""));
    const log = await requests(opts.record);
    const loads = log.filter((r) => r.path === "/v1/load_lora_adapter");
    expect(loads.map((r) => r.body)).toEqual([{ lora_name: "a1@v1", lora_path: path }]);
    const models = log.filter((r) => r.path === "/v1/completions").map((r) => r.body?.model);
    expect(models).toEqual(["a1@v1", "a1@v1", "stories"]);
  });

  it("scores a prompt (echo) under the adapter: vLLM's echo names the adapter as its model", async () => {
    const path = await adapterDir("a1");
    const out = await engine.generate(
      {
        kind: "prompt",
        prompt: "Once upon",
        params: { echo: true, logprobs: true, max_tokens: 0 },
        adapter: { ref: "a1@v1", path, rank: 4 },
      },
      {},
    );
    expect(out.echo?.logprobs?.map((t) => t.token)).toEqual(["Once", " upon"]);
    const echoed = (await requests(opts.record)).filter((r) => r.path === "/v1/completions").at(-1);
    expect(echoed?.body).toEqual({ model: "a1@v1", prompt: "Once upon", echo: true, max_tokens: 0, logprobs: 0 });
  });

  it("keeps at most 4 × max_loras adapters registered, unloading the least recently used", async () => {
    const params = { max_tokens: 1, temperature: 0 };
    for (const name of ["b1", "b2", "b3", "b4", "b5"]) {
      const path = await adapterDir(name);
      await engine.generate(
        { kind: "prompt", prompt: "Once", params, adapter: { ref: `${name}@v1`, path, rank: 4 } },
        {},
      );
    }
    const unloads = (await requests(opts.record)).filter((r) => r.path === "/v1/unload_lora_adapter");
    expect(unloads.map((r) => r.body?.lora_name)).toEqual(["a1@v1", "b1@v1"]);
  });

  it("refuses an adapter vLLM cannot load, with vLLM's reason", async () => {
    const e = await engine
      .generate(
        {
          kind: "prompt",
          prompt: "Once",
          params: { max_tokens: 1 },
          adapter: { ref: "gone@v1", path: join(dir, "nowhere"), rank: 4 },
        },
        {},
      )
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(PlatformError);
    expect((e as PlatformError).status).toBe(400);
    expect((e as PlatformError).message).toContain(
      "vLLM refused to load adapter gone@v1: No adapter found for <gone@v1>",
    );
    // The node's directory stays out of what the client reads.
    expect((e as PlatformError).message).not.toContain(dir);
  });

  it("an engine started without LoRA says it serves no adapters", async () => {
    const plain = await loadVllm(options({}, false));
    try {
      expect(plain.servesAdapters).toBe(false);
    } finally {
      await plain.dispose();
    }
  });
});
