/**
 * llama.cpp through node-llama-cpp: one model, one context with `parallel`
 * sequences. Sequences generating at the same time are evaluated in shared
 * batches by the library (continuous batching), and a sequence returned to the
 * pool keeps its KV cache, so a following request with the same prefix
 * re-evaluates only what differs. Which deployment fields this honours, and its
 * default context, are its entry in src/contracts/engines.ts (`LLAMACPP`).
 */
import { availableParallelism } from "node:os";
import {
  getLlama,
  JinjaTemplateChatWrapper,
  type Llama,
  LlamaCompletion,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import { LLAMACPP } from "../../src/contracts/engines.ts";
import type { ChatMessage, FinishReason, SamplingParams } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/errors.ts";
import { type Engine, type GenerationHooks, plainChatPrompt, type TextOutput, type TextRequest, usage } from "./engine.ts";

export type LlamaCppOptions = {
  modelPath: string;
  parallel: number;
  /** Explicit: the library's default oversubscribes small machines badly (see docs/engines.md). */
  threads?: number;
  /** Tokens per sequence (prompt + completion); `runtime.max_model_len`. */
  contextSize?: number;
  gpu?: boolean;
};

/** Context per sequence when the deployment does not set `runtime.max_model_len`; the gateway's prompt bound reads the same. */
const DEFAULT_CONTEXT_CAP = LLAMACPP.defaultContextCap ?? Number.POSITIVE_INFINITY;

export function defaultThreads(): number {
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** The library's native binding, loaded once per process and kind (CPU or GPU). */
const llamas = new Map<boolean, Promise<Llama>>();
function llamaFor(gpu: boolean): Promise<Llama> {
  let llama = llamas.get(gpu);
  if (!llama) {
    llama = getLlama({ gpu: gpu ? "auto" : false, build: "never", logLevel: LlamaLogLevel.error });
    llamas.set(gpu, llama);
  }
  return llama;
}

/** Loads the CPU binding ahead of any model: a standby worker does this while it waits (workers/main.ts). */
export async function prepareLlamaCpp(): Promise<void> {
  await llamaFor(false);
}

export async function loadLlamaCpp(options: LlamaCppOptions): Promise<Engine> {
  const llama = await llamaFor(options.gpu ?? false);
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
  const context = await model.createContext({ sequences: options.parallel, contextSize, threads });
  return new LlamaCppEngine(model, context, options.parallel, threads);
}

class LlamaCppEngine implements Engine {
  readonly name = LLAMACPP.framework;
  readonly parallel: number;
  private readonly model: LlamaModel;
  private readonly context: LlamaContext;
  private readonly threads: number;
  private readonly free: LlamaContextSequence[] = [];
  private readonly chatTemplate: JinjaTemplateChatWrapper | undefined;
  private readonly bos: Token | null;
  private embeddingContext: Promise<LlamaEmbeddingContext> | undefined;

  constructor(model: LlamaModel, context: LlamaContext, parallel: number, threads: number) {
    this.model = model;
    this.context = context;
    this.parallel = parallel;
    this.threads = threads;
    for (let i = 0; i < parallel; i++) this.free.push(context.getSequence());
    const template = model.fileInfo.metadata.tokenizer?.chat_template;
    this.chatTemplate = typeof template === "string" && template.length > 0 ? new JinjaTemplateChatWrapper({ template }) : undefined;
    // Mirrors LlamaCompletion, which prepends this token itself: counted here so usage is exact.
    const wantsBos = model.vocabularyType === "wpm" || model.tokens.shouldPrependBosToken;
    this.bos = wantsBos && model.vocabularyType !== "rwkv" && model.vocabularyType !== "ugm" ? model.tokens.bos : null;
  }

  async warmup(): Promise<void> {
    await this.generate({ kind: "prompt", prompt: "Hello", params: { max_tokens: 2, temperature: 0 } }, {});
  }

  async generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    const { tokens, stopTriggers } = this.render(request);
    const promptTokens = tokens.length + (this.bos === null ? 0 : 1);
    const maxTokens = this.checkedMaxTokens(promptTokens, request.params);
    const sequence = this.free.pop();
    if (!sequence) throw new PlatformError(503, "engine_busy", "all sequences of this replica are busy");
    const completion = new LlamaCompletion({ contextSequence: sequence });
    let completionTokens = 0;
    try {
      const p = request.params;
      const result = await completion.generateCompletionWithMeta(tokens, {
        maxTokens,
        temperature: p.temperature ?? 1,
        topP: p.top_p,
        seed: p.seed,
        customStopTriggers: [...stopTriggers, ...(p.stop ?? [])],
        repeatPenalty:
          p.frequency_penalty || p.presence_penalty
            ? { frequencyPenalty: p.frequency_penalty, presencePenalty: p.presence_penalty }
            : false,
        disableContextShift: true,
        contextShiftSize: 0,
        signal: hooks.signal,
        stopOnAbortSignal: true,
        onToken: (t) => {
          completionTokens += t.length;
        },
        onTextChunk: hooks.onText,
      });
      return {
        text: result.response,
        finish_reason: finishReason(result.metadata.stopReason, hooks.signal),
        usage: usage(promptTokens, completionTokens),
      };
    } finally {
      completion.dispose();
      this.free.push(sequence);
    }
  }

  async embed(inputs: string[]): Promise<{ embeddings: number[][]; usage: ReturnType<typeof usage> }> {
    this.embeddingContext ??= this.model.createEmbeddingContext({ threads: this.threads, contextSize: this.context.contextSize });
    const ctx = await this.embeddingContext;
    const embeddings: number[][] = [];
    let promptTokens = 0;
    for (const input of inputs) {
      const tokens = this.model.tokenize(input);
      if (tokens.length > this.context.contextSize) {
        throw new PlatformError(400, "context_length_exceeded", `an input has ${tokens.length} tokens; this model embeds at most ${this.context.contextSize}`, "input");
      }
      promptTokens += tokens.length;
      embeddings.push([...(await ctx.getEmbeddingFor(tokens)).vector]);
    }
    return { embeddings, usage: usage(promptTokens, 0) };
  }

  async dispose(): Promise<void> {
    if (this.embeddingContext) await (await this.embeddingContext).dispose();
    await this.context.dispose();
    await this.model.dispose();
  }

  private render(request: TextRequest): { tokens: Token[]; stopTriggers: string[] } {
    const tokenizeOptions = this.bos === null ? undefined : ("trimLeadingSpace" as const);
    if (request.kind === "prompt") return { tokens: this.model.tokenize(request.prompt, false, tokenizeOptions), stopTriggers: [] };
    if (!this.chatTemplate) {
      return { tokens: this.model.tokenize(plainChatPrompt(request.messages), false, tokenizeOptions), stopTriggers: [] };
    }
    const state = this.chatTemplate.generateContextState({ chatHistory: [...request.messages.map(toHistoryItem), { type: "model", response: [] }] });
    let tokens = state.contextText.tokenize(this.model.tokenizer, tokenizeOptions);
    // Templates usually render the BOS token themselves; LlamaCompletion adds one too.
    if (this.bos !== null && tokens[0] === this.bos) tokens = tokens.slice(1);
    const stopTriggers = state.stopGenerationTriggers.map((t) => t.toString()).filter((t) => t.length > 0);
    return { tokens, stopTriggers };
  }

  private checkedMaxTokens(promptTokens: number, params: SamplingParams): number {
    const window = this.context.contextSize;
    const requested = params.max_tokens ?? window - promptTokens;
    if (promptTokens + requested > window || requested < 1) {
      throw new PlatformError(
        400,
        "context_length_exceeded",
        `This model's maximum context length is ${window} tokens. However, you requested ${promptTokens + Math.max(requested, 1)} tokens (${promptTokens} in the messages, ${Math.max(requested, 1)} in the completion). Please reduce the length of the messages or completion.`,
        params.max_tokens === undefined ? "messages" : "max_tokens",
      );
    }
    return requested;
  }
}


function toHistoryItem(m: ChatMessage) {
  if (m.role === "system") return { type: "system" as const, text: m.content };
  if (m.role === "user") return { type: "user" as const, text: m.content };
  return { type: "model" as const, response: [m.content] };
}

function finishReason(stopReason: string, signal: AbortSignal | undefined): FinishReason {
  if (signal?.aborted) return "cancelled";
  return stopReason === "maxTokens" ? "length" : "stop";
}
