// The vLLM engine against a fake `vllm serve` (test/helpers/fake-vllm.ts): there is no
// GPU here, so the child process, its flags, its HTTP API and its failures are
// what is tested; vLLM's own behaviour is mimicked by the fake.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { alive } from "../helpers/processes.ts";
import { WORKER_ALLOCATOR_ENV } from "../../src/process/worker-env.ts";
import { DeploymentConfig, Resources, Runtime } from "../../src/contracts/deployment.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import {
  checkpointQuantization,
  loadVllm,
  notAppliedByVllm,
  type VllmEngine,
  type VllmOptions,
  vllmArgs,
} from "../../workers/engines/vllm.ts";
import {
  CHAT_REPLY,
  countTokens,
  fakeLogprob,
  fakePieces,
  renderChat,
  STORY,
  TOO_LONG_MESSAGE,
  UNHEALTHY_POLLS,
  VOCABULARY_SIZE,
  fakeVllmPath,
  writeFakeVllmBin,
} from "../helpers/fake-vllm.ts";

let dir: string;
/** The fake `vllm`, given as settings.vllm.bin (VLLM_BIN) would be. */
let bin: string;
let records = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "vllm-engine-"));
  bin = await writeFakeVllmBin(dir);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function args(runtime: object, resources: object, extra: { checkpointQuantization?: string } = {}): string[] {
  return vllmArgs({
    modelPath: "/models/m",
    servedName: "m",
    port: 8123,
    runtime: Runtime.parse(runtime),
    resources: Resources.parse(resources),
    ...extra,
  });
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

describe("vllmArgs", () => {
  it("maps a minimal deployment to the model, the address, the name and the sequence limit", () => {
    expect(args({}, {})).toEqual([
      "serve",
      "/models/m",
      "--host",
      "127.0.0.1",
      "--port",
      "8123",
      "--served-model-name",
      "m",
      "--max-num-seqs",
      "4",
      "--enable-prefix-caching",
      "--scheduling-policy",
      "priority",
      "--disable-uvicorn-access-log",
    ]);
  });

  it("maps every runtime field", () => {
    const argv = args(
      {
        max_model_len: 8192,
        gpu_memory_utilization: 0.85,
        tensor_parallel_size: 2,
        dtype: "bfloat16",
        quantization: "int8",
        speculative_model: "/models/draft",
        num_speculative_tokens: 5,
      },
      { parallel: 16, gpu: 2 },
    );
    expect(argv.slice(0, 2)).toEqual(["serve", "/models/m"]);
    expect(flag(argv, "--max-model-len")).toBe("8192");
    expect(flag(argv, "--gpu-memory-utilization")).toBe("0.85");
    expect(flag(argv, "--tensor-parallel-size")).toBe("2");
    expect(flag(argv, "--dtype")).toBe("bfloat16");
    expect(flag(argv, "--quantization")).toBe("fp8");
    expect(JSON.parse(flag(argv, "--speculative-config") ?? "null")).toEqual({
      model: "/models/draft",
      num_speculative_tokens: 5,
    });
    expect(flag(argv, "--max-num-seqs")).toBe("16");
    expect(argv).not.toContain("--disable-log-requests"); // removed from current vLLM
  });

  it("splits the model over all of a replica's GPUs unless tensor_parallel_size says otherwise", () => {
    expect(flag(args({}, { gpu: 4 }), "--tensor-parallel-size")).toBe("4");
    expect(flag(args({ tensor_parallel_size: 2 }, { gpu: 4 }), "--tensor-parallel-size")).toBe("2");
    expect(args({}, { gpu: 1 })).not.toContain("--tensor-parallel-size");
    expect(args({}, {})).not.toContain("--tensor-parallel-size");
  });

  it("quantizes in flight (int4 → bitsandbytes) but never a checkpoint that is already quantized", () => {
    expect(flag(args({ quantization: "int4" }, {}), "--quantization")).toBe("bitsandbytes");
    expect(args({ quantization: "int4" }, {}, { checkpointQuantization: "awq" })).not.toContain("--quantization");
  });

  it("speculates only with a draft model, leaving the token count to the draft's config when unset", () => {
    expect(args({ num_speculative_tokens: 3 }, {})).not.toContain("--speculative-config");
    expect(JSON.parse(flag(args({ speculative_model: "d" }, {}), "--speculative-config") ?? "null")).toEqual({
      model: "d",
    });
    expect(
      notAppliedByVllm(DeploymentConfig.parse({ model: { name: "m" }, runtime: { num_speculative_tokens: 3 } })),
    ).toEqual(["runtime.num_speculative_tokens"]);
    expect(
      notAppliedByVllm(
        DeploymentConfig.parse({
          model: { name: "m" },
          runtime: { speculative_model: "d", num_speculative_tokens: 3 },
          resources: { gpu: 2 },
        }),
      ),
    ).toEqual([]);
  });
});

describe("checkpointQuantization", () => {
  it("reads quantization_config from a model directory and knows GGUF files", async () => {
    const quantized = join(dir, "quantized");
    const plain = join(dir, "plain");
    await mkdir(quantized);
    await mkdir(plain);
    await writeFile(
      join(quantized, "config.json"),
      JSON.stringify({ model_type: "llama", quantization_config: { quant_method: "awq", bits: 4 } }),
    );
    await writeFile(join(plain, "config.json"), JSON.stringify({ model_type: "llama" }));
    expect(await checkpointQuantization(quantized)).toBe("awq");
    expect(await checkpointQuantization(plain)).toBeUndefined();
    expect(await checkpointQuantization(join(dir, "missing"))).toBeUndefined();
    expect(await checkpointQuantization("/models/Model-Q4_K_M.gguf")).toBe("gguf");
  });
});

type Started = { argv: string[]; pid: number; malloc: Record<string, string> };
type Logged = { method?: string; path?: string; body?: Record<string, unknown>; event?: string };

/** Options for one fake server, with its own record file. */
function options(
  env: Record<string, string> = {},
  overrides: Partial<VllmOptions> = {},
): VllmOptions & { record: string } {
  const record = join(dir, `record-${++records}.json`);
  return {
    record,
    modelPath: join(dir, "model"),
    servedName: "stories",
    bin,
    runtime: Runtime.parse({ max_model_len: 2048 }),
    resources: Resources.parse({ parallel: 3 }),
    // The launcher's `#!/usr/bin/env node` must find this Node (type stripping), not an older one on PATH.
    env: {
      FAKE_VLLM_RECORD: record,
      PATH: fakeVllmPath(),
      ...env,
    },
    log: () => undefined,
    ...overrides,
  };
}

/** The process group of `pid`, from /proc/<pid>/stat (the field after the parenthesised name and the state). */
function pgid(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
}

async function started(record: string): Promise<Started> {
  return JSON.parse(await readFile(record, "utf8")) as Started;
}

async function requests(record: string): Promise<Logged[]> {
  const text = await readFile(`${record}.requests.jsonl`, "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Logged);
}

async function lastBody(record: string, path: string): Promise<Record<string, unknown> | undefined> {
  return (await requests(record)).filter((r) => r.path === path).at(-1)?.body;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

describe("a running vLLM engine", () => {
  let engine: VllmEngine;
  let opts: ReturnType<typeof options>;

  beforeAll(async () => {
    // The worker's environment as the local backend starts it (one allocator variable the platform's
    // default, one the user's own), and the endpoint's env setting one of the platform's values itself.
    process.env.MALLOC_ARENA_MAX = WORKER_ALLOCATOR_ENV.MALLOC_ARENA_MAX;
    process.env.MALLOC_TRIM_THRESHOLD_ = "4096";
    opts = options({ MALLOC_MMAP_THRESHOLD_: WORKER_ALLOCATOR_ENV.MALLOC_MMAP_THRESHOLD_ as string });
    try {
      engine = await loadVllm(opts);
    } finally {
      delete process.env.MALLOC_ARENA_MAX;
      delete process.env.MALLOC_TRIM_THRESHOLD_;
    }
  });

  afterAll(async () => {
    await engine?.dispose();
  });

  it("keeps the worker's allocator defaults from vllm serve, but not the user's own or the endpoint's settings", async () => {
    expect((await started(opts.record)).malloc).toEqual({
      MALLOC_TRIM_THRESHOLD_: "4096",
      MALLOC_MMAP_THRESHOLD_: WORKER_ALLOCATOR_ENV.MALLOC_MMAP_THRESHOLD_,
    });
  });

  it("starts vllm serve with the mapped flags and becomes ready only once /health answers 200", async () => {
    const { argv, pid } = await started(opts.record);
    // engine.pid names the process group (the watchdog's), which holds vllm serve.
    expect(pgid(pid)).toBe(engine.pid);
    expect(argv.slice(0, 2)).toEqual(["serve", opts.modelPath]);
    expect(flag(argv, "--host")).toBe("127.0.0.1");
    expect(flag(argv, "--served-model-name")).toBe("stories");
    expect(flag(argv, "--max-model-len")).toBe("2048");
    expect(flag(argv, "--max-num-seqs")).toBe("3");
    expect(engine.parallel).toBe(3);
    const polls = (await requests(opts.record)).filter((r) => r.path === "/health");
    expect(polls.length).toBe(UNHEALTHY_POLLS + 1);
  });

  it("warms up with a one-token completion", async () => {
    await engine.warmup();
    const body = await lastBody(opts.record, "/v1/completions");
    expect(body).toMatchObject({ model: "stories", prompt: "Hello", max_tokens: 1, temperature: 0, stream: true });
  });

  it("streams a completion whose deltas make up the text, with its usage and sampling parameters", async () => {
    const deltas: string[] = [];
    const prompt = "Tell me a story about a fox";
    const out = await engine.generate(
      {
        kind: "prompt",
        prompt,
        params: {
          max_tokens: 5,
          temperature: 0.7,
          top_p: 0.9,
          seed: 42,
          frequency_penalty: 0.5,
          presence_penalty: -0.5,
        },
      },
      { onText: (t) => deltas.push(t) },
    );
    expect(out.text).toBe(STORY.slice(0, 5).join(""));
    expect(deltas.join("")).toBe(out.text);
    expect(deltas.length).toBe(5);
    expect(out.finish_reason).toBe("length");
    // vLLM counts the BOS token its tokenizer puts before a text prompt.
    expect(out.usage).toEqual({
      prompt_tokens: countTokens(prompt) + 1,
      completion_tokens: 5,
      total_tokens: countTokens(prompt) + 6,
    });
    expect(await lastBody(opts.record, "/v1/completions")).toEqual({
      model: "stories",
      prompt,
      max_tokens: 5,
      temperature: 0.7,
      top_p: 0.9,
      seed: 42,
      frequency_penalty: 0.5,
      presence_penalty: -0.5,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
  });

  it("generates to the natural end when max_tokens is absent (not vLLM's 16-token completions default)", async () => {
    const out = await engine.generate({ kind: "prompt", prompt: "Once", params: {} }, {});
    expect(out.text).toBe(STORY.join(""));
    expect(out.finish_reason).toBe("stop");
    expect((await lastBody(opts.record, "/v1/completions"))?.max_tokens).toBeNull();
  });

  it("passes stop strings", async () => {
    const out = await engine.generate({ kind: "prompt", prompt: "Once", params: { stop: [" fox"] } }, {});
    expect(out.text).toBe(STORY.slice(0, 8).join("")); // ends before " fox"
    expect(out.finish_reason).toBe("stop");
    expect((await lastBody(opts.record, "/v1/completions"))?.stop).toEqual([" fox"]);
  });

  it("passes a job's priority to vLLM's priority scheduling (which the server was started with)", async () => {
    const out = await engine.generate({ kind: "prompt", prompt: "Once", params: { max_tokens: 2 }, priority: -3 }, {});
    expect(out.text).toBe(STORY.slice(0, 2).join(""));
    expect((await lastBody(opts.record, "/v1/completions"))?.priority).toBe(-3);
    expect((await started(opts.record)).argv).toContain("--enable-prefix-caching");
  });

  it("streams a chat through /v1/chat/completions, where vLLM applies the chat template", async () => {
    const messages = [
      { role: "system" as const, content: "You are kind." },
      { role: "user" as const, content: "Hi there" },
    ];
    const deltas: string[] = [];
    const out = await engine.generate(
      { kind: "chat", messages, params: { max_tokens: 50 } },
      { onText: (t) => deltas.push(t) },
    );
    expect(out.text).toBe(CHAT_REPLY.join(""));
    expect(deltas.join("")).toBe(out.text);
    expect(out.finish_reason).toBe("stop");
    const promptTokens = countTokens(renderChat(messages));
    expect(out.usage).toEqual({
      prompt_tokens: promptTokens,
      completion_tokens: CHAT_REPLY.length,
      total_tokens: promptTokens + CHAT_REPLY.length,
    });
    expect(await lastBody(opts.record, "/v1/chat/completions")).toMatchObject({
      model: "stories",
      messages,
      max_tokens: 50,
      stream: true,
    });
  });

  it("stops when aborted, returning what was generated as cancelled, and vLLM sees the client leave", async () => {
    const controller = new AbortController();
    const deltas: string[] = [];
    const out = await engine.generate(
      { kind: "prompt", prompt: "SLOW story", params: {} },
      {
        signal: controller.signal,
        onText: (t) => {
          deltas.push(t);
          if (deltas.length === 3) controller.abort();
        },
      },
    );
    expect(out.finish_reason).toBe("cancelled");
    expect(out.text).toBe(deltas.join(""));
    expect(out.text.startsWith(STORY.slice(0, 3).join(""))).toBe(true);
    expect(out.usage.prompt_tokens).toBe(3);
    expect(out.usage.completion_tokens).toBeGreaterThanOrEqual(3);
    await expect.poll(async () => (await requests(opts.record)).some((r) => r.event === "client_closed")).toBe(true);
  });

  it("returns cancelled at once for a signal aborted before the request", async () => {
    const out = await engine.generate({ kind: "prompt", prompt: "Once", params: {} }, { signal: AbortSignal.abort() });
    expect(out).toEqual({
      text: "",
      finish_reason: "cancelled",
      usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
    });
  });

  it("turns vLLM's context-length 400 into context_length_exceeded with vLLM's message", async () => {
    for (const request of [
      { kind: "prompt" as const, prompt: "TOO_LONG", params: {} },
      { kind: "chat" as const, messages: [{ role: "user" as const, content: "TOO_LONG" }], params: {} },
    ]) {
      const e = await rejection(engine.generate(request, {}));
      expect(e).toBeInstanceOf(PlatformError);
      expect(e).toMatchObject({
        status: 400,
        code: "context_length_exceeded",
        param: "messages",
        message: TOO_LONG_MESSAGE,
        type: "invalid_request_error",
      });
    }
  });

  it("passes a token-id prompt to /v1/completions as ids, never as text", async () => {
    const ids = [1, 403, 407, 261, 378];
    const out = await engine.generate({ kind: "prompt", prompt: ids, params: { max_tokens: 2 } }, {});
    expect(out.text).toBe(STORY.slice(0, 2).join(""));
    expect(out.usage.prompt_tokens).toBe(ids.length);
    expect(await lastBody(opts.record, "/v1/completions")).toMatchObject({ prompt: ids });
  });

  it("names the place of a token id vLLM does not know, as llama.cpp does", async () => {
    const e = await rejection(
      engine.generate({ kind: "prompt", prompt: [1, 2, VOCABULARY_SIZE + 5, 3], params: { max_tokens: 2 } }, {}),
    );
    expect(e).toMatchObject({
      status: 400,
      code: "invalid_request",
      param: "prompt",
      message: `prompt[2]: token ${VOCABULARY_SIZE + 5} is not in this model's vocabulary`,
    });
  });

  it("scores a text prompt with echo and max_tokens 0: vLLM's echo without generation, its BOS left out", async () => {
    const prompt = "Once upon a time there was a fox";
    const out = await engine.generate(
      { kind: "prompt", prompt, params: { echo: true, logprobs: true, top_logprobs: 2, max_tokens: 0 } },
      {},
    );
    const pieces = fakePieces(prompt);
    expect(out.text).toBe("");
    expect(out.finish_reason).toBe("length");
    expect(out.logprobs).toEqual([]);
    // vLLM counts the BOS and the one token it samples and drops; the contract's max_tokens 0 generates none.
    expect(out.usage).toEqual({
      prompt_tokens: pieces.length + 1,
      completion_tokens: 0,
      total_tokens: pieces.length + 1,
    });
    expect(out.echo?.text).toBe(prompt);
    // Every text token scored (the first given BOS), as transformers scores tokenizer(text).
    expect(out.echo?.logprobs?.map((t) => [t.token, t.logprob])).toEqual(pieces.map((t) => [t, fakeLogprob(t)]));
    expect(out.echo?.logprobs?.map((t) => t.token).join("")).toBe(prompt);
    expect(out.echo?.logprobs?.[1]).toEqual({
      token: " upon",
      logprob: fakeLogprob(" upon"),
      bytes: [...Buffer.from(" upon")],
      top_logprobs: [
        { token: " upon", logprob: fakeLogprob(" upon"), bytes: [...Buffer.from(" upon")] },
        { token: "<alt0>", logprob: -3, bytes: [...Buffer.from("<alt0>")] },
      ],
    });
    expect(await lastBody(opts.record, "/v1/completions")).toEqual({
      model: "stories",
      prompt,
      echo: true,
      max_tokens: 0,
      logprobs: 2,
    });
    // What vLLM's tokenizer puts before a text is learned once, from /tokenize with and without special tokens.
    await engine.generate(
      { kind: "prompt", prompt: "The end", params: { echo: true, logprobs: true, max_tokens: 0 } },
      {},
    );
    const probes = (await requests(opts.record)).filter((r) => r.path === "/tokenize").map((r) => r.body);
    expect(probes).toEqual([
      { model: "stories", prompt: "Hello", add_special_tokens: true },
      { model: "stories", prompt: "Hello", add_special_tokens: false },
    ]);
  });

  it("echoes token ids as given (the first null), then generates as asked", async () => {
    const ids = [5, 6, 7];
    const deltas: string[] = [];
    const out = await engine.generate(
      { kind: "prompt", prompt: ids, params: { echo: true, logprobs: true, max_tokens: 2, temperature: 0 } },
      { onText: (t) => deltas.push(t) },
    );
    expect(out.echo).toEqual({
      text: "5 6 7",
      logprobs: [
        { token: "5", logprob: null, bytes: [...Buffer.from("5")], top_logprobs: null },
        { token: " 6", logprob: fakeLogprob(" 6"), bytes: [...Buffer.from(" 6")], top_logprobs: [] },
        { token: " 7", logprob: fakeLogprob(" 7"), bytes: [...Buffer.from(" 7")], top_logprobs: [] },
      ],
    });
    expect(out.text).toBe(STORY.slice(0, 2).join(""));
    expect(deltas.join("")).toBe(out.text);
    expect(out.usage).toEqual({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
    const calls = (await requests(opts.record)).filter((r) => r.path === "/v1/completions").slice(-2);
    expect(calls.map((r) => r.body)).toEqual([
      { model: "stories", prompt: ids, echo: true, max_tokens: 0, logprobs: 0 },
      expect.objectContaining({ prompt: ids, max_tokens: 2, stream: true, logprobs: 0 }),
    ]);
    expect(calls[1]?.body).not.toHaveProperty("echo");
  });

  it("echoes the prompt's text alone when no logprobs are asked for", async () => {
    const out = await engine.generate(
      { kind: "prompt", prompt: "Once upon", params: { echo: true, max_tokens: 0 } },
      {},
    );
    expect(out).toEqual({
      text: "",
      finish_reason: "length",
      usage: { prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 },
      echo: { text: "Once upon" },
    });
  });

  it("reports embeddings on a generative model as unsupported by the model", async () => {
    const e = await rejection(engine.embed(["hello"]));
    expect(e).toMatchObject({ status: 400, code: "unsupported_by_model", param: "input" });
    expect((e as Error).message).toContain("The model does not support Embeddings API");
  });

  it("tokenizes through vLLM's /tokenize and /detokenize: a prompt with its BOS, a chat as rendered, ids to text", async () => {
    const prompt = await engine.tokenize({ prompt: "Once upon a time" });
    expect(prompt.tokens).toHaveLength(5);
    expect(prompt.tokens[0]).toBe(1);
    expect(prompt.max_model_len).toBe(2048);
    const bare = await engine.tokenize({ prompt: "Once upon a time", add_special_tokens: false });
    expect(bare.tokens).toEqual(prompt.tokens.slice(1));
    const chat = await engine.tokenize({ messages: [{ role: "user", content: "Once upon a time" }] });
    expect(await lastBody(opts.record, "/tokenize")).toMatchObject({ add_generation_prompt: true, model: "stories" });
    expect(chat.tokens.length).toBeGreaterThan(prompt.tokens.length);
    expect(await engine.tokenize({ tokens: bare.tokens })).toEqual({
      tokens: bare.tokens,
      text: "Once upon a time",
      max_model_len: 2048,
    });
  });
});

describe("a vLLM engine serving an embedding model", () => {
  let engine: VllmEngine;
  let opts: ReturnType<typeof options>;

  beforeAll(async () => {
    opts = options({ FAKE_VLLM_RUNNER: "pooling" });
    engine = await loadVllm(opts);
  });

  afterAll(async () => {
    await engine?.dispose();
  });

  it("warms up with a real embedding, since it has no completions API", async () => {
    await engine.warmup();
    expect(await lastBody(opts.record, "/v1/embeddings")).toEqual({
      model: "stories",
      input: ["Hello"],
      encoding_format: "float",
    });
  });

  it("embeds through /v1/embeddings, in input order", async () => {
    const out = await engine.embed(["a b c", "hello"]);
    expect(out.embeddings).toEqual([
      [5, 3, 1],
      [5, 1, 1],
    ]);
    expect(out.usage).toEqual({ prompt_tokens: 4, completion_tokens: 0, total_tokens: 4 });
    expect(await lastBody(opts.record, "/v1/embeddings")).toEqual({
      model: "stories",
      input: ["a b c", "hello"],
      encoding_format: "float",
    });
  });

  it("reports text generation as unsupported by the model", async () => {
    const e = await rejection(engine.generate({ kind: "prompt", prompt: "Once", params: {} }, {}));
    expect(e).toMatchObject({ status: 400, code: "unsupported_by_model" });
  });
});

describe("vLLM engine lifecycle", () => {
  it("dispose stops the server process", async () => {
    const opts = options();
    const engine = await loadVllm(opts);
    const { pid } = await started(opts.record);
    expect(alive(pid)).toBe(true);
    await engine.dispose();
    expect(alive(pid)).toBe(false);
    const e = await rejection(engine.generate({ kind: "prompt", prompt: "Once", params: {} }, {}));
    expect(e).toMatchObject({ status: 503, code: "engine_unavailable" });
  });

  it("dispose kills a server that ignores SIGTERM once the grace period is over", async () => {
    const opts = options({ FAKE_VLLM_IGNORE_TERM: "1" }, { stopGraceMs: 300 });
    const engine = await loadVllm(opts);
    const { pid } = await started(opts.record);
    await engine.dispose();
    expect(alive(pid)).toBe(false);
  });

  it("stops the server when the worker is killed outright (SIGKILL), which runs no exit handler", async () => {
    const opts = options();
    const module = new URL("../../workers/engines/vllm.ts", import.meta.url).href;
    const { record, log: _log, ...rest } = opts;
    const script = `import { loadVllm } from ${JSON.stringify(module)};
      const runtime = ${JSON.stringify(rest.runtime)}, resources = ${JSON.stringify(rest.resources)};
      await loadVllm({ ...${JSON.stringify({ modelPath: rest.modelPath, servedName: rest.servedName, bin: rest.bin, env: rest.env })}, runtime, resources, log: () => undefined });
      console.log("READY");
      setInterval(() => undefined, 1000);`;
    const worker = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
      env: process.env,
    });
    try {
      let out = "";
      worker.stdout?.on("data", (b) => (out += b));
      const t0 = Date.now();
      while (!out.includes("READY")) {
        if (Date.now() - t0 > 30_000 || worker.exitCode !== null) throw new Error(`the engine did not start: ${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const { pid } = await started(record);
      expect(alive(pid)).toBe(true);
      worker.kill("SIGKILL");
      const t1 = Date.now();
      while (alive(pid) && Date.now() - t1 < 5_000) await new Promise((r) => setTimeout(r, 50));
      expect(alive(pid)).toBe(false);
    } finally {
      worker.kill("SIGKILL");
    }
  });

  it("rejects with the end of the server's stderr when it exits while starting", async () => {
    const opts = options({ FAKE_VLLM_EXIT: "CUDA out of memory while loading weights" });
    const e = await rejection(loadVllm(opts));
    expect(e).toBeInstanceOf(PlatformError);
    expect((e as Error).message).toContain("exited with code 1");
    expect((e as Error).message).toContain("ValueError: CUDA out of memory while loading weights");
  });

  it("rejects and stops the server when it is not healthy in time", async () => {
    const opts = options({ FAKE_VLLM_NEVER_HEALTHY: "1" }, { startTimeoutMs: 1_500 });
    const e = await rejection(loadVllm(opts));
    expect(e).toMatchObject({ code: "engine_start_timeout" });
    expect(alive((await started(opts.record)).pid)).toBe(false);
  });

  it("says how to fix a missing vllm executable", async () => {
    const e = await rejection(loadVllm(options({}, { bin: join(dir, "no-such-vllm") })));
    expect(e).toMatchObject({ code: "engine_start_failed" });
    expect((e as Error).message).toContain("VLLM_BIN");
  });

  it("sends chats as plain prompts when the model has no chat template, as llama.cpp does", async () => {
    const opts = options({ FAKE_VLLM_NO_TEMPLATE: "1" });
    const engine = await loadVllm(opts);
    try {
      const messages = [
        { role: "user" as const, content: "Once" },
        { role: "user" as const, content: "upon" },
      ];
      const out = await engine.generate({ kind: "chat", messages, params: { max_tokens: 3 } }, {});
      expect(out.text).toBe(STORY.slice(0, 3).join(""));
      expect(await lastBody(opts.record, "/v1/completions")).toMatchObject({ prompt: "Once\nupon", max_tokens: 3 });
      const chats = (await requests(opts.record)).filter((r) => r.path === "/v1/chat/completions");
      await engine.generate({ kind: "chat", messages, params: { max_tokens: 1 } }, {});
      // Learned once: the second chat does not try the chat route again.
      expect((await requests(opts.record)).filter((r) => r.path === "/v1/chat/completions").length).toBe(chats.length);
    } finally {
      await engine.dispose();
    }
  });
});
