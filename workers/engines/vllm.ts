/**
 * vLLM on GPU nodes: `vllm serve` runs as a child process on a free port of
 * 127.0.0.1, and this engine talks to its OpenAI-compatible HTTP API. vLLM
 * batches concurrent requests itself (continuous batching), so the engine only
 * has to keep up to `parallel` requests open at once. How deployment fields map
 * to flags, and which are not applied, is in docs/engines.md ("vLLM").
 */
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import type { DeploymentConfig, Resources, Runtime } from "../../src/contracts/deployment.ts";
import type { FinishReason, SamplingParams, Usage } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/errors.ts";
import { freePort } from "../../src/net.ts";
import { VLLM_DEFAULTS } from "../../src/settings/vllm.ts";
import { spawnWatched } from "../../src/watchdog.ts";
import { type Engine, type GenerationHooks, plainChatPrompt, type TextOutput, type TextRequest, usage } from "./engine.ts";

export type VllmOptions = {
  /** A Hugging Face style model directory (or anything `vllm serve` accepts as its model). */
  modelPath: string;
  runtime: Runtime;
  resources: Resources;
  /** The name vLLM answers to; requests carry it as `model`. */
  servedName: string;
  /** Added to the child's environment (e.g. CUDA_VISIBLE_DEVICES). */
  env?: Record<string, string | undefined>;
  /** Receives each line the child prints; default: this process's stderr, prefixed "[vllm] ". */
  log?: (line: string) => void;
  /** The executable (settings.vllm.bin, VLLM_BIN); default "vllm" on PATH. */
  bin?: string;
  /** settings.vllm.startTimeoutMs (PLATFORM_VLLM_START_TIMEOUT_MS); default 15 minutes (large weights load slowly). */
  startTimeoutMs?: number;
  /** How long `dispose` waits after SIGTERM before SIGKILL. */
  stopGraceMs?: number;
};

export type VllmArgsOptions = Pick<VllmOptions, "modelPath" | "runtime" | "resources" | "servedName"> & {
  port: number;
  /** The checkpoint's own quantization (see `checkpointQuantization`); when set, `runtime.quantization` is not passed. */
  checkpointQuantization?: string;
};

/**
 * `runtime.quantization` → `--quantization`. Both are vLLM's in-flight methods,
 * the only ones that work on an unquantized checkpoint without a calibration
 * step: `fp8` (8-bit weights, W8A8 on Ada/Hopper, weight-only FP8 on
 * Turing/Ampere) and `bitsandbytes` (4-bit NF4 weights). vLLM's integer INT8
 * and INT4 (W8A8, AWQ, GPTQ) need checkpoints quantized beforehand, which
 * vLLM recognises from their config.json by itself.
 */
export const VLLM_QUANTIZATION = { int8: "fp8", int4: "bitsandbytes" } as const;

const DEFAULT_STOP_GRACE_MS = 30_000;
const HEALTH_POLL_MS = 500;
/** A worker killed outright: vLLM gets SIGTERM at once, and its whole group SIGKILL this much later. */
const ORPHAN_KILL_AFTER_S = 30;
/** Lines of the child's output kept for error messages. */
const OUTPUT_TAIL_LINES = 30;

export function vllmArgs(options: VllmArgsOptions): string[] {
  const { runtime: r, resources } = options;
  const args = [options.modelPath, "--host", "127.0.0.1", "--port", String(options.port), "--served-model-name", options.servedName];
  if (r.max_model_len !== undefined) args.push("--max-model-len", String(r.max_model_len));
  if (r.gpu_memory_utilization !== undefined) args.push("--gpu-memory-utilization", String(r.gpu_memory_utilization));
  const tp = tensorParallelSize(r, resources);
  if (tp !== undefined) args.push("--tensor-parallel-size", String(tp));
  if (r.dtype !== undefined) args.push("--dtype", r.dtype);
  // Asking vLLM to quantize an already quantized checkpoint is an error at start-up.
  if (r.quantization !== undefined && options.checkpointQuantization === undefined) {
    args.push("--quantization", VLLM_QUANTIZATION[r.quantization]);
  }
  if (r.speculative_model !== undefined) {
    // No "method": vLLM detects EAGLE/Medusa/MLP heads from the draft's config and otherwise uses it as a draft model.
    const speculative: Record<string, unknown> = { model: r.speculative_model };
    if (r.num_speculative_tokens !== undefined) speculative.num_speculative_tokens = r.num_speculative_tokens;
    args.push("--speculative-config", JSON.stringify(speculative));
  }
  // The worker never sends more than `parallel` requests at once; vLLM's larger default only reserves memory for nothing.
  args.push("--max-num-seqs", String(resources.parallel));
  // The health poll and every request would otherwise print an access-log line. (Request logging is off by default in current vLLM, and its old --disable-log-requests flag is gone.)
  args.push("--disable-uvicorn-access-log");
  return args;
}

/**
 * `runtime.tensor_parallel_size` when set; otherwise every GPU of the replica
 * (`resources.gpu` > 1), since a replica that was given several GPUs and used
 * one would waste the rest.
 */
export function tensorParallelSize(runtime: Runtime, resources: Resources): number | undefined {
  if (runtime.tensor_parallel_size !== undefined) return runtime.tensor_parallel_size;
  if (resources.gpu !== undefined && resources.gpu > 1) return resources.gpu;
  return undefined;
}


const HfConfig = z.object({
  quantization_config: z.looseObject({ quant_method: z.string().optional() }).optional(),
});

/** The quantization a checkpoint already carries ("gguf", "awq", …), or undefined for full-precision weights. */
export async function checkpointQuantization(modelPath: string): Promise<string | undefined> {
  if (modelPath.toLowerCase().endsWith(".gguf")) return "gguf";
  let text: string;
  try {
    text = await readFile(join(modelPath, "config.json"), "utf8");
  } catch {
    return undefined; // not a local directory (e.g. a hub id): vLLM decides
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = HfConfig.safeParse(json);
  const q = parsed.success ? parsed.data.quantization_config : undefined;
  return q === undefined ? undefined : (q.quant_method ?? "unknown");
}

export async function loadVllm(options: VllmOptions): Promise<VllmEngine> {
  const port = await freePort();
  const args = vllmArgs({ ...options, port, checkpointQuantization: await checkpointQuantization(options.modelPath) });
  const bin = options.bin ?? VLLM_DEFAULTS.bin;
  const log = options.log ?? ((line: string) => process.stderr.write(`[vllm] ${line}\n`));
  // The worker's whole environment passes through (CUDA_*, HF_*, proxies): vLLM reads its own variables.
  const child = new VllmProcess(bin, args, { VLLM_NO_USAGE_STATS: "1", PYTHONUNBUFFERED: "1", ...process.env, ...options.env }, log);
  const baseUrl = `http://127.0.0.1:${port}`;
  const startTimeoutMs = options.startTimeoutMs ?? VLLM_DEFAULTS.startTimeoutMs;
  const stopGraceMs = options.stopGraceMs ?? DEFAULT_STOP_GRACE_MS;
  try {
    await child.waitHealthy(baseUrl, startTimeoutMs);
  } catch (e) {
    await child.stop(stopGraceMs);
    throw e;
  }
  return new VllmEngine(child, baseUrl, options.servedName, options.resources.parallel, stopGraceMs);
}

type ExitInfo = { code: number | null; signal: NodeJS.Signals | null; error?: Error };

/** The `vllm serve` child: its output tail, its exit, and stopping it with everything it started. */
class VllmProcess {
  readonly pid: number | undefined;
  readonly exited: Promise<ExitInfo>;
  exit: ExitInfo | undefined;
  private readonly bin: string;
  private readonly child: ChildProcess;
  private readonly tail: string[] = [];
  private readonly outputClosed: Promise<unknown>;
  private readonly killOnExit = () => this.signal("SIGKILL");

  constructor(bin: string, args: string[], env: NodeJS.ProcessEnv, log: (line: string) => void) {
    this.bin = bin;
    // Under the pipe watchdog (src/watchdog.ts): a worker killed outright (SIGKILL, OOM) runs no
    // exit handler, and vLLM would hold the GPU on. Its own process group: vLLM starts engine-core
    // and tensor-parallel workers, and all of them must go when it does.
    this.child = spawnWatched(bin, args, { env, output: "pipe", killAfterSeconds: ORPHAN_KILL_AFTER_S }).process;
    this.pid = this.child.pid;
    const closed: Promise<unknown>[] = [];
    for (const stream of [this.child.stdout, this.child.stderr]) {
      if (!stream) continue;
      const lines = createInterface({ input: stream, crlfDelay: Infinity });
      lines.on("line", (line) => {
        this.tail.push(line);
        if (this.tail.length > OUTPUT_TAIL_LINES) this.tail.shift();
        log(line);
      });
      closed.push(new Promise((resolve) => lines.once("close", resolve)));
    }
    this.outputClosed = Promise.all(closed);
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => resolve({ code, signal }));
      this.child.once("error", (error) => resolve({ code: null, signal: null, error }));
    });
    void this.exited.then((info) => {
      this.exit = info;
      process.off("exit", this.killOnExit);
    });
    // A worker that exits without disposing must not leave a server holding GPU memory.
    process.on("exit", this.killOnExit);
  }

  async waitHealthy(baseUrl: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.exit) throw await this.startError();
      if (await healthy(baseUrl)) return;
      if (Date.now() >= deadline) {
        throw new PlatformError(
          503,
          "engine_start_timeout",
          `vLLM did not become healthy within ${Math.round(timeoutMs / 1000)} s (PLATFORM_VLLM_START_TIMEOUT_MS); last output:\n${this.tail.join("\n")}`,
        );
      }
      await Promise.race([sleep(HEALTH_POLL_MS), this.exited]);
    }
  }

  /** Why the server is not there, for errors after start-up. */
  describeExit(): string {
    if (!this.exit) return "vLLM is not answering";
    const how = this.exit.error ? this.exit.error.message : this.exit.signal ? `signal ${this.exit.signal}` : `code ${this.exit.code}`;
    return `vLLM exited (${how}); last output:\n${this.tail.join("\n")}`;
  }

  async stop(graceMs: number): Promise<void> {
    if (this.exit) return;
    this.signal("SIGTERM");
    if (!(await settlesWithin(this.exited, graceMs))) this.signal("SIGKILL");
    await this.exited;
    // The watchdog can end a moment before the rest of its group: vLLM itself after a SIGKILL (no
    // longer its child to reap), what vLLM started. Disposed means the GPU is free: wait for all.
    if (!(await this.groupGone(2_000))) {
      this.signal("SIGKILL");
      await this.groupGone(2_000);
    }
  }

  private async groupGone(ms: number): Promise<boolean> {
    if (this.pid === undefined) return true;
    const deadline = Date.now() + ms;
    for (;;) {
      try {
        process.kill(-this.pid, 0);
      } catch {
        return true;
      }
      if (Date.now() >= deadline) return false;
      await sleep(20);
    }
  }

  private async startError(): Promise<PlatformError> {
    const exit = this.exit as ExitInfo;
    // 127/126: the watchdog's shell found no such executable, or could not run it.
    if (exit.error || exit.code === 127 || exit.code === 126) {
      await settlesWithin(this.outputClosed, 2_000);
      const why = exit.error?.message ?? (this.tail.at(-1) || `exit code ${exit.code}`);
      return new PlatformError(500, "engine_start_failed", `could not run vLLM ("${this.bin}"): ${why}. Install vLLM on this node or set VLLM_BIN to its executable.`);
    }
    // The last lines usually say why (a traceback, "CUDA out of memory", …); let the pipes drain first.
    await settlesWithin(this.outputClosed, 2_000);
    const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
    return new PlatformError(500, "engine_start_failed", `vLLM ${how} before it was ready:\n${this.tail.join("\n")}`);
  }

  private signal(signal: NodeJS.Signals): void {
    if (this.pid === undefined) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      // Already gone.
    }
  }
}

export class VllmEngine implements Engine {
  readonly name = "vllm";
  readonly parallel: number;
  private readonly server: VllmProcess;
  private readonly baseUrl: string;
  private readonly servedName: string;
  private readonly stopGraceMs: number;
  /** Set once vLLM says the model has no chat template; chats are then sent as plain prompts. */
  private noChatTemplate = false;

  constructor(server: VllmProcess, baseUrl: string, servedName: string, parallel: number, stopGraceMs: number) {
    this.server = server;
    this.baseUrl = baseUrl;
    this.servedName = servedName;
    this.parallel = parallel;
    this.stopGraceMs = stopGraceMs;
  }

  /** The id of the process group holding `vllm serve`, its watchdog and all vLLM starts. */
  get pid(): number | undefined {
    return this.server.pid;
  }

  async warmup(): Promise<void> {
    try {
      await this.generate({ kind: "prompt", prompt: "Hello", params: { max_tokens: 1, temperature: 0 } }, {});
    } catch (e) {
      // An embedding model (vLLM's pooling runner) has no completions API: a real embedding is its warm-up.
      await this.embed(["Hello"]).catch(() => {
        throw e;
      });
    }
  }

  async generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    if (request.kind === "chat" && this.noChatTemplate) {
      return this.generate({ kind: "prompt", prompt: plainChatPrompt(request.messages), params: request.params }, hooks);
    }
    try {
      return await this.stream(request, hooks);
    } catch (e) {
      if (request.kind === "chat" && e instanceof PlatformError && e.code === "no_chat_template") {
        // Same fallback as llama.cpp, so a model answers alike on either engine.
        this.noChatTemplate = true;
        return this.generate(request, hooks);
      }
      throw e;
    }
  }

  async embed(inputs: string[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    const res = await this.post("/v1/embeddings", { model: this.servedName, input: inputs, encoding_format: "float" });
    if (!res.ok) throw await httpError(res, "embeddings");
    const parsed = EmbeddingResponse.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success) throw new PlatformError(502, "engine_error", "vLLM answered /v1/embeddings with an unexpected body");
    const embeddings = [...parsed.data.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
    return { embeddings, usage: usage(parsed.data.usage.prompt_tokens, 0) };
  }

  async dispose(): Promise<void> {
    await this.server.stop(this.stopGraceMs);
  }

  private async stream(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    const body = {
      model: this.servedName,
      ...(request.kind === "prompt" ? { prompt: request.prompt } : { messages: request.messages }),
      ...sampling(request.params),
      stream: true,
      // continuous_usage_stats (vLLM's own) puts usage on every chunk, so a cancelled generation still reports what it used.
      stream_options: { include_usage: true, continuous_usage_stats: true },
    };
    let text = "";
    let used = usage(0, 0);
    let finish: string | undefined;
    try {
      const res = await this.post(request.kind === "prompt" ? "/v1/completions" : "/v1/chat/completions", body, hooks.signal);
      if (!res.ok) throw await httpError(res, request.kind === "prompt" ? "completions" : "chat");
      if (!res.body) throw new PlatformError(502, "engine_error", "vLLM sent no stream");
      for await (const data of sseData(res.body)) {
        if (data === "[DONE]") break;
        const chunk = StreamChunk.safeParse(safeJson(data));
        if (!chunk.success) throw new PlatformError(502, "engine_error", `vLLM sent an unexpected stream event: ${data.slice(0, 200)}`);
        const { error, usage: u, choices } = chunk.data;
        if (error) throw new PlatformError(error.code === 400 ? 400 : 500, "engine_error", error.message);
        if (u) used = usage(u.prompt_tokens, u.completion_tokens ?? 0);
        for (const choice of choices) {
          const piece = choice.text ?? choice.delta?.content ?? "";
          if (piece !== "") {
            text += piece;
            hooks.onText?.(piece);
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    } catch (e) {
      if (hooks.signal?.aborted) return { text, finish_reason: "cancelled", usage: used };
      throw e instanceof PlatformError ? e : this.unavailable(e);
    }
    if (hooks.signal?.aborted) return { text, finish_reason: "cancelled", usage: used };
    if (finish === undefined) throw new PlatformError(502, "engine_error", "vLLM ended the stream without a finish reason");
    return { text, finish_reason: finishReason(finish), usage: used };
  }

  private async post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
    try {
      return await fetch(this.baseUrl + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal,
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw this.unavailable(e);
    }
  }

  private unavailable(e: unknown): PlatformError {
    const cause = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
    return new PlatformError(503, "engine_unavailable", `${this.server.describeExit()} (${cause})`, null, 5);
  }
}

/** Only the fields that were given: absent ones take vLLM's defaults (the model's generation_config.json). */
function sampling(p: SamplingParams): Record<string, unknown> {
  return {
    // null, not absent: /v1/completions defaults to 16 tokens, and the contract says "until the window ends".
    max_tokens: p.max_tokens ?? null,
    ...(p.temperature !== undefined && { temperature: p.temperature }),
    ...(p.top_p !== undefined && { top_p: p.top_p }),
    ...(p.seed !== undefined && { seed: p.seed }),
    ...(p.stop !== undefined && { stop: p.stop }),
    ...(p.frequency_penalty !== undefined && { frequency_penalty: p.frequency_penalty }),
    ...(p.presence_penalty !== undefined && { presence_penalty: p.presence_penalty }),
  };
}

function finishReason(reason: string): FinishReason {
  if (reason === "length") return "length";
  // vLLM aborts a request itself only when it is shutting down or failing.
  if (reason === "abort") throw new PlatformError(503, "engine_unavailable", "vLLM aborted the generation", null, 5);
  return "stop";
}

const UsageJson = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative().nullish(),
});

const StreamChunk = z.object({
  choices: z
    .array(
      z.object({
        text: z.string().nullish(),
        delta: z.object({ content: z.string().nullish() }).nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .default([]),
  usage: UsageJson.nullish(),
  error: z.object({ message: z.string(), code: z.number().optional() }).optional(),
});

const EmbeddingResponse = z.object({
  data: z.array(z.object({ index: z.number().int(), embedding: z.array(z.number()) })),
  usage: UsageJson,
});

/** vLLM has used both `{error: {...}}` (current) and a flat `{object: "error", message}` (older releases). */
const ErrorBody = z.union([
  z.object({ error: z.object({ message: z.string() }) }).transform((b) => b.error.message),
  z.object({ message: z.string() }).transform((b) => b.message),
]);

const CONTEXT_OVERFLOW = /maximum context length|maximum model length|max_model_len/i;
const NO_CHAT_TEMPLATE = /chat template/i;
const UNSUPPORTED_API = /does not support .*API/i;

async function httpError(res: Response, api: "completions" | "chat" | "embeddings"): Promise<PlatformError> {
  const raw = await res.text().catch(() => "");
  const parsed = ErrorBody.safeParse(safeJson(raw));
  const message = parsed.success ? parsed.data : raw.slice(0, 500) || `HTTP ${res.status}`;
  if (res.status === 400 && CONTEXT_OVERFLOW.test(message)) {
    return new PlatformError(400, "context_length_exceeded", message, "messages");
  }
  if (res.status === 400 && api === "chat" && NO_CHAT_TEMPLATE.test(message)) {
    return new PlatformError(400, "no_chat_template", message, "messages");
  }
  if (UNSUPPORTED_API.test(message) || res.status === 404 || res.status === 405 || res.status === 501) {
    // A generative model asked for embeddings, or an embedding model for text (vLLM answers 400 or 501 by version).
    const what = api === "embeddings" ? "embeddings" : "text generation";
    return new PlatformError(400, "unsupported_by_model", `this model does not serve ${what}: ${message}`, api === "embeddings" ? "input" : null);
  }
  if (res.status === 400 || res.status === 422) return new PlatformError(400, "invalid_request", message);
  if (res.status === 429 || res.status === 503) return new PlatformError(503, "engine_busy", message, null, 1);
  return new PlatformError(500, "engine_error", `vLLM answered HTTP ${res.status}: ${message}`);
}

/** The `data` of each server-sent event, in order. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data: string[] = [];
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += value;
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (data.length > 0) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
      }
    }
    if (data.length > 0) yield data.join("\n");
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

async function healthy(baseUrl: string): Promise<boolean> {
  try {
    const res = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(5_000) });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false; // not listening yet: vLLM binds its port only after loading the model
  }
}


/** Whether `promise` settles within `ms`; the timer never outlives the answer (it would hold a stopping worker open). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
