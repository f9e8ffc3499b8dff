/**
 * vLLM on GPU nodes: `vllm serve` runs as a child process on a free port of
 * 127.0.0.1, and this engine talks to its OpenAI-compatible HTTP API. vLLM
 * batches concurrent requests itself (continuous batching), so the engine only
 * has to keep up to `parallel` requests open at once. This file puts the three
 * parts together: the flags (vllm-flags.ts), the child process (vllm-process.ts)
 *, the HTTP client (vllm-client.ts) and vLLM's wire (vllm-protocol.ts); docs/engines.md ("vLLM") describes them.
 */
import { randomBytes } from "node:crypto";
import { withoutWorkerAllocator } from "../../src/process/worker-env.ts";
import { DEFAULT_MAX_LORAS, VLLM } from "../../src/contracts/engines.ts";
import type { EmbeddingItem, TokenizeJob, Usage } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { freePort } from "../../src/process/free-port.ts";
import { VLLM_DEFAULTS } from "../../src/settings/vllm.ts";
import { type Engine, type GenerationHooks, plainChatPrompt, type TextOutput, type TextRequest } from "./engine.ts";
import { readToolAnswer, refuseFormatWithTools, toolAnswerSchema, toolPromptMessages } from "./tool-format.ts";
import { VllmClient } from "./vllm-client.ts";
import { checkpointQuantization, type VllmArgsOptions, vllmArgs } from "./vllm-flags.ts";
import { VllmProcess } from "./vllm-process.ts";

// The flags builder is part of this engine's interface (tests, docs); one import path serves both.
export {
  checkpointQuantization,
  notAppliedByVllm,
  tensorParallelSize,
  VLLM_QUANTIZATION,
  type VllmArgsOptions,
  vllmArgs,
} from "./vllm-flags.ts";

export type VllmOptions = Omit<VllmArgsOptions, "port" | "checkpointQuantization"> & {
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

const DEFAULT_STOP_GRACE_MS = 30_000;
/** Adapters kept registered with vLLM per GPU slot (`--max-loras`) before idle ones are unloaded. */
const ADAPTERS_KNOWN_PER_SLOT = 4;

export async function loadVllm(options: VllmOptions): Promise<VllmEngine> {
  const port = await freePort();
  const args = vllmArgs({ ...options, port, checkpointQuantization: await checkpointQuantization(options.modelPath) });
  const bin = options.bin ?? VLLM_DEFAULTS.bin;
  // Only this worker knows it (in vLLM's environment, so not in a command line `ps` shows): vLLM's
  // /v1 routes, adapter loading among them, refuse any other loopback client (docs/security.md).
  const apiKey = randomBytes(24).toString("base64url");
  const log = options.log ?? ((line: string) => process.stderr.write(`[vllm] ${line}\n`));
  // The worker's whole environment passes through (CUDA_*, HF_*, proxies): vLLM reads its own
  // variables. Not the allocator settings a worker is started with, made for a Node worker's threads.
  const child = new VllmProcess(
    bin,
    args,
    {
      VLLM_NO_USAGE_STATS: "1",
      PYTHONUNBUFFERED: "1",
      // Adapters are loaded through the API on first use (docs/adapters.md).
      ...(args.includes("--enable-lora") ? { VLLM_ALLOW_RUNTIME_LORA_UPDATING: "True" } : {}),
      ...withoutWorkerAllocator(process.env),
      ...options.env,
      VLLM_API_KEY: apiKey,
    },
    log,
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  const startTimeoutMs = options.startTimeoutMs ?? VLLM_DEFAULTS.startTimeoutMs;
  const stopGraceMs = options.stopGraceMs ?? DEFAULT_STOP_GRACE_MS;
  try {
    await child.waitHealthy(baseUrl, startTimeoutMs);
  } catch (e) {
    await child.stop(stopGraceMs);
    throw e;
  }
  const client = new VllmClient(baseUrl, options.servedName, () => child.describeExit(), apiKey);
  const lora = args.includes("--enable-lora");
  return new VllmEngine(
    child,
    client,
    options.resources.parallel,
    stopGraceMs,
    lora ? (options.runtime.max_loras ?? DEFAULT_MAX_LORAS) : 0,
  );
}

export class VllmEngine implements Engine {
  readonly name = VLLM.framework;
  readonly parallel: number;
  private readonly server: VllmProcess;
  private readonly client: VllmClient;
  private readonly stopGraceMs: number;
  /** Set once vLLM says the model has no chat template; chats are then sent as plain prompts. */
  private noChatTemplate = false;

  readonly lost: Promise<string>;
  private disposing = false;
  readonly servesAdapters: boolean;
  /**
   * Adapters registered with vLLM: name → requests in flight and last use. vLLM keeps `--max-loras` of
   * them on the GPU and swaps the rest itself; past ADAPTERS_KNOWN_PER_SLOT × max_loras the least
   * recently used idle one is unloaded, so a replica's life of adapters stays bounded.
   */
  private readonly adapters = new Map<string, { active: number; lastUsed: number; loading: Promise<void> }>();
  private readonly knownAdapters: number;

  constructor(server: VllmProcess, client: VllmClient, parallel: number, stopGraceMs: number, maxLoras = 0) {
    this.servesAdapters = maxLoras > 0;
    this.knownAdapters = maxLoras * ADAPTERS_KNOWN_PER_SLOT;
    this.server = server;
    this.client = client;
    this.parallel = parallel;
    this.stopGraceMs = stopGraceMs;
    // Settles only for an exit nobody asked for: a crash, the OOM killer, someone's SIGKILL.
    this.lost = server.exited.then(() =>
      this.disposing ? new Promise<string>(() => undefined) : server.describeExit(),
    );
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
      const prompt = plainChatPrompt(toolPromptMessages(request.messages, request.tools));
      if (!request.tools) return this.generate({ kind: "prompt", prompt, params: request.params }, hooks);
      // No template, so no tool parser either: the generic format, held by vLLM's guided decoding, as on llama.cpp.
      refuseFormatWithTools(request.params);
      const schema = toolAnswerSchema(request.tools);
      const params = {
        ...request.params,
        response_format: { type: "json_schema" as const, json_schema: { name: "tool_answer", schema } },
      };
      return readToolAnswer(
        await this.generate({ kind: "prompt", prompt, params }, { signal: hooks.signal }),
        request.tools,
      );
    }
    const adapter = request.adapter;
    if (adapter) {
      const held = await this.holdAdapter(adapter.ref, adapter.path);
      try {
        return await this.client.generate(request, hooks);
      } finally {
        held.active--;
      }
    }
    try {
      return await this.client.generate(request, hooks);
    } catch (e) {
      if (request.kind === "chat" && e instanceof PlatformError && e.code === "no_chat_template") {
        // Same fallback as llama.cpp, so a model answers alike on either engine.
        this.noChatTemplate = true;
        return this.generate(request, hooks);
      }
      throw e;
    }
  }

  private loads = 0;
  private evictions = 0;

  adapterStats() {
    return {
      loaded: this.adapters.size,
      loads: this.loads,
      evictions: this.evictions,
      names: [...this.adapters.keys()],
    };
  }

  /** The adapter registered with vLLM (loaded on first use), counted as in use until the caller lets go. */
  private async holdAdapter(ref: string, path: string): Promise<{ active: number }> {
    let entry = this.adapters.get(ref);
    if (!entry) {
      const loading = this.client.loadAdapter(ref, path);
      entry = { active: 0, lastUsed: 0, loading };
      this.adapters.set(ref, entry);
      this.loads++;
      loading.catch(() => this.adapters.delete(ref));
      const idle = [...this.adapters.entries()].filter(([name, e]) => name !== ref && e.active === 0);
      if (this.adapters.size > this.knownAdapters && idle.length > 0) {
        const [oldest] = idle.sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0]!;
        this.adapters.delete(oldest);
        this.evictions++;
        void this.client.unloadAdapter(oldest);
      }
    }
    entry.active++;
    entry.lastUsed = performance.now();
    try {
      await entry.loading;
    } catch (e) {
      entry.active--;
      throw e;
    }
    return entry;
  }

  tokenize(input: TokenizeJob["input"]): Promise<{ tokens: number[]; text: string; max_model_len: number }> {
    return this.client.tokenize(input);
  }

  embed(inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    return this.client.embed(inputs);
  }

  metrics(): Promise<string> {
    return this.client.metrics();
  }

  async dispose(): Promise<void> {
    this.disposing = true;
    await this.server.stop(this.stopGraceMs);
  }
}
