/**
 * llama.cpp through node-llama-cpp, loaded: one model, one context with `parallel` sequences (and a
 * draft model's, when speculating). Sequences generating at the same time are evaluated in shared
 * batches by the library (continuous batching), and a sequence returned to the pool keeps its KV
 * cache, so a following request with the same prefix re-evaluates only what differs. This file
 * loads and puts the parts together: generation (llamacpp-engine.ts, llamacpp-decode.ts), the
 * sequences' choice (llamacpp-sequences.ts), prompts and chat templates (llamacpp-render.ts),
 * embeddings (llamacpp-embed.ts), adapters, grammars and native tools. Which deployment fields this
 * honours, and its default context, are its entry in src/contracts/engines.ts (`LLAMACPP`).
 */
import { availableParallelism } from "node:os";
import { DraftSequenceTokenPredictor, getLlama, type Llama, LlamaLogLevel, type LlamaModel } from "node-llama-cpp";
import { DEFAULT_MAX_LORAS, LLAMACPP } from "../../src/contracts/engines.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import type { EngineSettings } from "../../src/settings/engine.ts";
import { DEFAULT_GRAMMAR_TIMEOUT_MS } from "../../src/settings/structured.ts";
import { logger } from "../../src/telemetry/log.ts";
import type { Engine } from "./engine.ts";
import { AdapterLanes } from "./llamacpp-adapters.ts";
import { loadCpuLlama } from "./llamacpp-build.ts";
import { Embedder } from "./llamacpp-embed.ts";
import { type Draft, encoderOnly, LlamaCppEngine, type LocalContext } from "./llamacpp-engine.ts";
import type { LlamaServer } from "./llama-server.ts";
import { llamaServerBin, wantsServer } from "./llama-server-build.ts";
import { GrammarCache } from "./llamacpp-grammar.ts";
import { PromptRenderer } from "./llamacpp-render.ts";
import { SequencePool } from "./llamacpp-sequences.ts";

export type LlamaCppOptions = {
  modelPath: string;
  parallel: number;
  /** Explicit: the library's default oversubscribes small machines badly (see docs/engines.md). */
  threads?: number;
  /** Tokens per sequence (prompt + completion); `runtime.max_model_len`. */
  contextSize?: number;
  gpu?: boolean;
  /**
   * Speculative decoding: a smaller model with the same vocabulary drafts up to `tokens` (default
   * 4) tokens per step, which the model checks in one batch; the output is the model's own.
   */
  draft?: { modelPath: string; tokens?: number };
  /** How long building one JSON schema's grammar may take (PLATFORM_GRAMMAR_TIMEOUT_MS). */
  grammarTimeoutMs?: number;
  /**
   * `runtime.dtype: float32`: attention in float32 too, a float32 KV cache and no flash attention
   * (whose CPU kernel rounds to float16). llama.cpp's default float16 cache moves a logit by about
   * 1e-4 of its size; prompt scores (echo) then match transformers' float32 to about 1e-5.
   */
  float32?: boolean;
  /** LoRA adapter contexts kept at once (`runtime.max_loras`; llamacpp-adapters.ts). */
  maxLoras?: number;
  /** Which CPU binary to load (PLATFORM_LLAMA_BUILD, PLATFORM_ENGINE_DIR); llamacpp-binary.ts. */
  binary?: EngineSettings;
};

/** Draft tokens per step when `runtime.num_speculative_tokens` is unset (vLLM's usual choice too). */
const DEFAULT_DRAFT_TOKENS = 4;

const log = logger("llamacpp");

/** Context per sequence when the deployment does not set `runtime.max_model_len`; the gateway's prompt bound reads the same. */
const DEFAULT_CONTEXT_CAP = LLAMACPP.defaultContextCap ?? Number.POSITIVE_INFINITY;

export function defaultThreads(): number {
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** The library's native binding, loaded once per process and kind (CPU or GPU). */
const llamas = new Map<boolean, Promise<Llama>>();
/**
 * `binary`: which CPU binary (llamacpp-binary.ts), as the worker's settings say; without it (tests,
 * benches calling the engine directly), node-llama-cpp's own choice, the prebuilt one here.
 */
function llamaFor(gpu: boolean, binary?: EngineSettings): Promise<Llama> {
  let llama = llamas.get(gpu);
  if (!llama) {
    llama =
      !gpu && binary
        ? loadCpuLlama(binary).then(({ llama, binary, note, path }) => {
            log.info({ llama_binary: binary, path }, `llama.cpp: ${note}`);
            return llama;
          })
        : getLlama({ gpu: gpu ? "auto" : false, build: "never", logLevel: LlamaLogLevel.error });
    llamas.set(gpu, llama);
  }
  return llama;
}

/** Loads the CPU binding ahead of any model: a standby worker does this while it waits (workers/main.ts). */
export async function prepareLlamaCpp(binary?: EngineSettings): Promise<void> {
  await llamaFor(false, binary);
}

export async function loadLlamaCpp(options: LlamaCppOptions): Promise<Engine> {
  const llama = await llamaFor(options.gpu ?? false, options.binary);
  if (options.gpu && llama.gpu === false)
    log.warn(
      "resources.gpu asks for a GPU, but node-llama-cpp found none on this node (no CUDA, Vulkan or Metal): running on the CPU",
    );
  else if (options.gpu)
    log.info({ gpu: llama.gpu, devices: await llama.getGpuDeviceNames() }, `GPU offload: ${llama.gpu}`);
  const model = await llama.loadModel({ modelPath: options.modelPath });
  const contextSize = options.contextSize ?? Math.min(model.trainContextSize, DEFAULT_CONTEXT_CAP);
  if (contextSize > model.trainContextSize) {
    throw new PlatformError(
      400,
      "invalid_config",
      `runtime.max_model_len ${contextSize} exceeds the model's trained context length ${model.trainContextSize}`,
      "runtime.max_model_len",
    );
  }
  const threads = options.threads ?? defaultThreads();
  const contextOptions = {
    sequences: options.parallel,
    contextSize,
    threads,
    ...(options.float32
      ? {
          experimentalKvCacheKeyType: "F32" as const,
          experimentalKvCacheValueType: "F32" as const,
          flashAttention: false,
        }
      : {}),
  };
  // An adapter's context: the base context's settings with the adapter applied (no draft: its guesses would be the base's).
  const adapters = new AdapterLanes(
    model,
    (path) => model.createContext({ ...contextOptions, lora: { adapters: [{ filePath: path, scale: 1 }] } }),
    options.maxLoras ?? DEFAULT_MAX_LORAS,
  );
  const tokens = options.draft?.tokens ?? DEFAULT_DRAFT_TOKENS;
  const server = await startServer(options, model, contextSize, threads, tokens);
  // With a server it decodes, speculation included: the base context here serves what it cannot.
  const draft =
    !server && options.draft
      ? await loadDraft(llama, model, options.draft.modelPath, options.parallel, contextSize, threads)
      : undefined;
  if (options.draft)
    log.info({ draft_tokens: tokens }, `speculative decoding: a draft model proposes ${tokens} tokens per step`);
  const openLocal = async (): Promise<LocalContext> => {
    const context = await model.createContext(contextOptions);
    const sequences = Array.from({ length: options.parallel }, () =>
      // minTokens: wait for the draft's tokens; with none (the library's default) a fast model outruns its draft and never speculates.
      context.getSequence(
        draft
          ? {
              tokenPredictor: new DraftSequenceTokenPredictor(draft.context.getSequence(), {
                minTokens: tokens,
                maxTokens: tokens,
              }),
            }
          : {},
      ),
    );
    return { context, sequences, pool: new SequencePool(sequences) };
  };
  const local = server ? undefined : await openLocal();
  const grammars = new GrammarCache(llama, { timeoutMs: options.grammarTimeoutMs ?? DEFAULT_GRAMMAR_TIMEOUT_MS });
  const renderer = new PromptRenderer(model);
  return new LlamaCppEngine({
    model,
    contextSize,
    parallel: options.parallel,
    local: openLocal,
    opened: local,
    server,
    renderer,
    embedder: new Embedder(model, renderer, threads, contextSize),
    grammars,
    adapters,
    draft,
  });
}

/**
 * The llama-server child when the settings ask for one (PLATFORM_LLAMA_ENGINE=server) and it can
 * serve this model here: a generative model on the CPU. Otherwise none, saying why when asked for.
 */
async function startServer(
  options: LlamaCppOptions,
  model: LlamaModel,
  contextSize: number,
  threads: number,
  draftTokens: number,
): Promise<LlamaServer | undefined> {
  if (!options.binary || !wantsServer(options.binary)) return undefined;
  const why = options.gpu
    ? "the replica has a GPU (llama-server here is a CPU build)"
    : encoderOnly(model)
      ? "the model is an embedding model (an encoder)"
      : undefined;
  if (why) {
    log.info(`llama-server: not for this replica, since ${why}; decoding in this process`);
    return undefined;
  }
  const { LlamaServer } = await import("./llama-server.ts");
  return LlamaServer.start({
    bin: llamaServerBin(options.binary),
    modelPath: options.modelPath,
    parallel: options.parallel,
    contextSize,
    threads,
    float32: options.float32,
    draft: options.draft && { modelPath: options.draft.modelPath, tokens: draftTokens },
  });
}

/** The draft model, refused (400) unless its vocabulary is the model's: its tokens are checked as the model's own. */
async function loadDraft(
  llama: Llama,
  model: LlamaModel,
  modelPath: string,
  parallel: number,
  contextSize: number,
  threads: number,
): Promise<Draft> {
  const draftModel = await llama.loadModel({ modelPath });
  const vocabulary = (m: LlamaModel) => m.fileInfo.metadata.tokenizer?.ggml?.tokens;
  const mine = vocabulary(model);
  const its = vocabulary(draftModel);
  if (!Array.isArray(mine) || !Array.isArray(its) || mine.length !== its.length || mine.some((t, i) => t !== its[i])) {
    await draftModel.dispose();
    throw new PlatformError(
      400,
      "invalid_config",
      "runtime.speculative_model: the draft model's vocabulary differs from the model's; speculative decoding needs a draft with the same tokenizer (usually a smaller model of the same family)",
      "runtime.speculative_model",
    );
  }
  const context = await draftModel.createContext({
    sequences: parallel,
    contextSize: Math.min(contextSize, draftModel.trainContextSize),
    threads,
  });
  return { model: draftModel, context };
}
