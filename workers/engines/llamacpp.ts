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
  type ChatWrapperGeneratedContextState,
  DraftSequenceTokenPredictor,
  getLlama,
  JinjaTemplateChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
  TokenBias,
} from "node-llama-cpp";
import { DEFAULT_MAX_LORAS, LLAMACPP } from "../../src/contracts/engines.ts";
import type {
  ChatMessage,
  EchoedPrompt,
  EmbeddingItem,
  FinishReason,
  Prompt,
  SamplingParams,
  TokenizeJob,
} from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { DEFAULT_GRAMMAR_TIMEOUT_MS } from "../../src/settings/structured.ts";
import { logger } from "../../src/telemetry/log.ts";
import {
  type ChatTools,
  type Engine,
  type GenerationHooks,
  plainChatPrompt,
  type TextOutput,
  type TextRequest,
  usage,
} from "./engine.ts";
import { type Decoded, decode, promptPieces, scorePrompt } from "./llamacpp-decode.ts";
import {
  type CallSyntax,
  callSyntaxOf,
  callsGrammar,
  functionsOf,
  nativeHistory,
  parseNativeCalls,
} from "./llamacpp-native-tools.ts";
import { AdapterLanes, type Lane } from "./llamacpp-adapters.ts";
import { enforceable, GrammarCache } from "./llamacpp-grammar.ts";
import { readToolAnswer, refuseFormatWithTools, toolAnswerSchema, toolPromptMessages } from "./tool-format.ts";

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
  const context = await model.createContext(contextOptions);
  // An adapter's context: the base context's settings with the adapter applied (no draft: its guesses would be the base's).
  const adapters = new AdapterLanes(
    model,
    (path) => model.createContext({ ...contextOptions, lora: { adapters: [{ filePath: path, scale: 1 }] } }),
    options.maxLoras ?? DEFAULT_MAX_LORAS,
  );
  const draft =
    options.draft && (await loadDraft(llama, model, options.draft.modelPath, options.parallel, contextSize, threads));
  const tokens = options.draft?.tokens ?? DEFAULT_DRAFT_TOKENS;
  if (draft)
    log.info({ draft_tokens: tokens }, `speculative decoding: a draft model proposes ${tokens} tokens per step`);
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
  const grammars = new GrammarCache(llama, { timeoutMs: options.grammarTimeoutMs ?? DEFAULT_GRAMMAR_TIMEOUT_MS });
  return new LlamaCppEngine(model, context, sequences, threads, grammars, adapters, draft);
}

type Draft = { model: LlamaModel; context: LlamaContext };

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

class LlamaCppEngine implements Engine {
  readonly name = LLAMACPP.framework;
  readonly servesAdapters = true;
  readonly parallel: number;
  private readonly model: LlamaModel;
  private readonly context: LlamaContext;
  private readonly threads: number;
  private readonly free: LlamaContextSequence[] = [];
  private readonly chatTemplate: JinjaTemplateChatWrapper | undefined;
  /** The template's own tool-call syntax; without one, tools use the generic format (tool-format.ts). */
  private readonly callSyntax: CallSyntax | undefined;
  private readonly bos: Token | null;
  private readonly grammars: GrammarCache;
  private readonly draft: Draft | undefined;
  private readonly sequences: LlamaContextSequence[];
  private readonly vocabularySize: number;
  private embeddingContext: Promise<LlamaEmbeddingContext> | undefined;
  /** An encoder (BERT and kin: non-causal attention) embeds and cannot generate. */
  private readonly encoderOnly: boolean;
  /** The converter recorded a sentence-transformers Normalize module (src/formats/convert/bert.ts). */
  private readonly normalizeEmbeddings: boolean;
  /** LoRA adapters' contexts beside the base's. */
  readonly adapters: AdapterLanes;

  constructor(
    model: LlamaModel,
    context: LlamaContext,
    sequences: LlamaContextSequence[],
    threads: number,
    grammars: GrammarCache,
    adapters: AdapterLanes,
    draft?: Draft,
  ) {
    this.model = model;
    this.adapters = adapters;
    this.draft = draft;
    this.sequences = sequences;
    this.grammars = grammars;
    const metadata = model.fileInfo.metadata as unknown as Record<string, Record<string, unknown> | undefined>;
    const architecture = String(model.fileInfo.metadata.general?.architecture ?? "");
    this.encoderOnly = (metadata[architecture]?.attention as { causal?: unknown } | undefined)?.causal === false;
    this.normalizeEmbeddings =
      (metadata.platform?.embedding as { normalize?: unknown } | undefined)?.normalize === true;
    const vocabulary = model.fileInfo.metadata.tokenizer?.ggml?.tokens;
    this.vocabularySize = Array.isArray(vocabulary) ? vocabulary.length : 0;
    this.context = context;
    this.parallel = sequences.length;
    this.threads = threads;
    this.free.push(...sequences);
    const template = model.fileInfo.metadata.tokenizer?.chat_template;
    this.chatTemplate =
      typeof template === "string" && template.length > 0 ? new JinjaTemplateChatWrapper({ template }) : undefined;
    this.callSyntax = callSyntaxOf(this.chatTemplate);
    // Mirrors LlamaCompletion, which prepends this token itself: counted here so usage is exact.
    const wantsBos = model.vocabularyType === "wpm" || model.tokens.shouldPrependBosToken;
    this.bos = wantsBos && model.vocabularyType !== "rwkv" && model.vocabularyType !== "ugm" ? model.tokens.bos : null;
  }

  adapterStats() {
    return this.adapters.stats();
  }

  async warmup(): Promise<void> {
    if (this.encoderOnly) {
      await this.embed(["Hello"]);
      return;
    }
    await this.generate({ kind: "prompt", prompt: "Hello", params: { max_tokens: 2, temperature: 0 } }, {});
  }

  async generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    // The gateway refuses these already (model_not_generative); a producer enqueueing directly meets this.
    if (this.encoderOnly)
      throw new PlatformError(
        400,
        "model_not_generative",
        "this model is an embedding model (an encoder): it serves /v1/embeddings only",
        "model",
      );
    const tools = request.kind === "chat" ? request.tools : undefined;
    if (tools) refuseFormatWithTools(request.params);
    if (request.kind === "chat" && tools && this.callSyntax)
      return this.generateNativeCalls(request.messages, tools, this.callSyntax, request.params, hooks, request.adapter);
    const grammar = await this.grammarFor(request);
    const { tokens, stopTriggers, asGiven } = this.render(request);
    const echo = request.kind === "prompt" && request.params.echo ? request.prompt : undefined;
    // A tool answer in the generic format is JSON to read back first: it is sent whole at the end.
    const { out } = await this.run(
      tokens,
      { stopStrings: stopTriggers, grammar, asGiven, echo, onText: tools ? undefined : hooks.onText },
      request.params,
      hooks.signal,
      request.adapter,
    );
    return tools ? readToolAnswer(out, tools) : out;
  }

  /**
   * Tools in the template's own syntax (llamacpp-native-tools.ts). `auto`: the model writes freely
   * until it starts a call, then the rest of the answer is held to the calls' grammar.
   */
  private async generateNativeCalls(
    messages: ChatMessage[],
    tools: ChatTools,
    syntax: CallSyntax,
    params: SamplingParams,
    hooks: GenerationHooks,
    adapter: TextRequest["adapter"],
  ): Promise<TextOutput> {
    const template = this.chatTemplate as JinjaTemplateChatWrapper;
    const state = template.generateContextState({
      chatHistory: [...nativeHistory(messages), { type: "model", response: [] }],
      availableFunctions: functionsOf(tools),
      documentFunctionParams: true,
    });
    const { tokens, stopTriggers } = this.tokensOf(state);
    const choice = tools.tool_choice ?? "auto";
    const selected =
      typeof choice === "object" ? tools.tools.filter((t) => t.function.name === choice.function.name) : tools.tools;
    const names = selected.map((t) => t.function.name);
    const parallel = tools.parallel_tool_calls === true;
    const grammar = (afterPrefix: boolean) =>
      this.grammars.cached(JSON.stringify(["calls", syntax, selected, parallel, afterPrefix]), () =>
        callsGrammar(this.grammars, syntax, selected, parallel, afterPrefix),
      );
    // The calls read back; an answer cut short gives its calls as far as they go, never the raw syntax.
    const withCalls = (out: TextOutput, text: string, afterPrefix: boolean, content: string): TextOutput => {
      const whole = out.finish_reason === "stop" ? parseNativeCalls(text, syntax, names, afterPrefix) : undefined;
      if (whole) return { ...out, text: content, tool_calls: whole, finish_reason: "tool_calls" };
      const cut = parseNativeCalls(text, syntax, names, afterPrefix, true);
      return { ...out, text: content, ...(cut && { tool_calls: cut }) };
    };
    if (choice !== "auto") {
      const { out, decoded } = await this.run(
        tokens,
        { stopStrings: stopTriggers, grammar: await grammar(false) },
        params,
        hooks.signal,
        adapter,
      );
      return withCalls(out, decoded.text, false, "");
    }
    const first = await this.run(
      tokens,
      { stopStrings: [...stopTriggers, syntax.prefix], onText: hooks.onText },
      params,
      hooks.signal,
      adapter,
    );
    if (first.decoded.stoppedBy !== syntax.prefix) return first.out;
    // The prefix as the model wrote it (its special tokens as such), then the call under the grammar.
    const written = this.model.tokenize(first.decoded.text + syntax.prefix, true);
    const left =
      (params.max_tokens ?? this.context.contextSize - first.out.usage.prompt_tokens) - first.decoded.completionTokens;
    if (left < 1) return { ...first.out, finish_reason: "length" };
    const second = await this.run(
      [...tokens, ...written],
      { stopStrings: stopTriggers, grammar: await grammar(true), maxTokens: left },
      params,
      hooks.signal,
      adapter,
    );
    const out: TextOutput = {
      ...second.out,
      usage: usage(first.out.usage.prompt_tokens, first.decoded.completionTokens + second.decoded.completionTokens),
      ...(first.out.logprobs ? { logprobs: [...first.out.logprobs, ...(second.out.logprobs ?? [])] } : {}),
    };
    return withCalls(out, second.decoded.text, true, first.decoded.text.trim());
  }

  /**
   * One generation on a free sequence of this replica's context. The model's BOS token goes first,
   * unless `asGiven`: a client's token ids are evaluated exactly as sent. `echo`: the prompt as the
   * client sent it, to answer with (and, with logprobs, its tokens scored) before the generated text.
   */
  private async run(
    tokens: Token[],
    how: {
      stopStrings: string[];
      grammar?: LlamaGrammar;
      onText?: GenerationHooks["onText"];
      maxTokens?: number;
      asGiven?: boolean;
      echo?: Prompt;
    },
    p: SamplingParams,
    signal: AbortSignal | undefined,
    adapter?: TextRequest["adapter"],
  ): Promise<{ out: TextOutput; decoded: Decoded }> {
    const evaluated = this.bos === null || how.asGiven ? tokens : [this.bos, ...tokens];
    const promptTokens = evaluated.length;
    const maxTokens = how.maxTokens ?? this.checkedMaxTokens(promptTokens, p);
    const tokenBias = p.logit_bias && this.tokenBias(p.logit_bias);
    let lane: Lane | undefined;
    let sequence: LlamaContextSequence | undefined;
    if (adapter) ({ lane, sequence } = await this.adapters.take(adapter.ref, adapter.path));
    else sequence = this.free.pop();
    if (!sequence) throw new PlatformError(503, "engine_busy", "all sequences of this replica are busy");
    try {
      const echo =
        how.echo === undefined ? undefined : await this.echoed(sequence, how.echo, evaluated, tokens.length, p);
      // max_tokens 0 (echo only): the prompt's scores are the whole answer.
      const decoded: Decoded =
        maxTokens === 0
          ? { text: "", completionTokens: 0, stop: "length", ...(p.logprobs ? { logprobs: [] } : {}) }
          : await decode(this.model, sequence, evaluated, {
              maxTokens,
              stopStrings: [...how.stopStrings, ...(p.stop ?? [])],
              grammar: how.grammar,
              topLogprobs: p.logprobs ? (p.top_logprobs ?? 0) : undefined,
              // OpenAI's and vLLM's defaults (no top-k, top-p 1), not node-llama-cpp's (40, 0.95); top_k -1 is vLLM's "off".
              sampling: {
                temperature: p.temperature ?? 1,
                topP: p.top_p ?? 1,
                topK: p.top_k !== undefined && p.top_k > 0 ? p.top_k : 0,
                minP: p.min_p ?? 0,
                seed: p.seed,
                tokenBias,
              },
              penalties:
                p.frequency_penalty || p.presence_penalty
                  ? { frequencyPenalty: p.frequency_penalty, presencePenalty: p.presence_penalty }
                  : undefined,
              signal,
              onText: how.onText,
            });
      const finish_reason: FinishReason =
        decoded.stop === "aborted" || signal?.aborted ? "cancelled" : decoded.stop === "length" ? "length" : "stop";
      const out: TextOutput = {
        text: decoded.text,
        finish_reason,
        usage: usage(promptTokens, decoded.completionTokens),
        ...(decoded.logprobs ? { logprobs: decoded.logprobs } : {}),
        ...(echo ? { echo } : {}),
      };
      return { out, decoded };
    } finally {
      if (lane) this.adapters.release(lane, sequence);
      else this.free.push(sequence);
    }
  }

  /**
   * The prompt to answer with: a text as sent, token ids as the model reads them; with logprobs,
   * its `count` tokens (the end of `evaluated`, after the BOS token the engine may have put first) scored.
   */
  private async echoed(
    sequence: LlamaContextSequence,
    prompt: Prompt,
    evaluated: Token[],
    count: number,
    p: SamplingParams,
  ): Promise<EchoedPrompt> {
    // Token ids as their echoed tokens read, one by one: detokenizing them whole would keep the
    // space a SentencePiece word has after a BOS token, which the tokens (and transformers) drop.
    const text = typeof prompt === "string" ? prompt : promptPieces(this.model, prompt as Token[]).join("");
    if (!p.logprobs) return { text };
    const first = evaluated.length - count;
    return { text, logprobs: await scorePrompt(this.model, sequence, evaluated, first, p.top_logprobs ?? 0) };
  }

  /** The grammar that holds the answer to its format: the tool format, a JSON schema, or any JSON. */
  private async grammarFor(request: TextRequest): Promise<LlamaGrammar | undefined> {
    if (request.kind === "chat" && request.tools) {
      // Each function's schema is judged where the client wrote it, before it is wrapped in the tool format.
      for (const [i, t] of request.tools.tools.entries())
        enforceable(t.function.parameters ?? {}, `tools[${i}].function.parameters`, "");
      return this.grammars.schema(toolAnswerSchema(request.tools), "tools");
    }
    const format = request.params.response_format;
    if (format?.type === "json_object") return this.grammars.json();
    if (format?.type === "json_schema")
      return format.json_schema.schema
        ? this.grammars.schema(format.json_schema.schema, "response_format.json_schema.schema")
        : this.grammars.json();
    return undefined;
  }

  private tokenBias(bias: Record<string, number>): TokenBias {
    const result = new TokenBias(this.model.tokenizer);
    for (const [id, value] of Object.entries(bias)) {
      const token = Number(id);
      if (token >= this.vocabularySize)
        throw new PlatformError(
          400,
          "invalid_request",
          `logit_bias: token ${id} is not in this model's vocabulary (${this.vocabularySize} tokens)`,
          "logit_bias",
        );
      // -100 means "never", as OpenAI documents; other values are added to the logit.
      result.set(token as Token, value <= -100 ? "never" : { logit: value });
    }
    return result;
  }

  async embed(inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: ReturnType<typeof usage> }> {
    // One batch holds a whole input: an encoder attends over all of it at once, so llama.cpp cannot split it (its default batch is 512 tokens).
    this.embeddingContext ??= this.model.createEmbeddingContext({
      threads: this.threads,
      contextSize: this.context.contextSize,
      batchSize: this.context.contextSize,
    });
    const ctx = await this.embeddingContext;
    // node-llama-cpp refuses an input as long as the context, so the longest one is a token shorter.
    const limit = this.context.contextSize - 1;
    const sequences = inputs.map((input, i) => {
      const tokens =
        typeof input === "string" ? this.model.tokenize(input) : this.checkedTokenIds(input, `input[${i}]`, "input");
      // The library answers an empty vector for no tokens; whitespace alone may tokenize to none.
      if (tokens.length === 0)
        throw new PlatformError(
          400,
          "invalid_request",
          `input[${i}] has no tokens (is it only whitespace?); send some text`,
          "input",
        );
      // What is evaluated: the library adds the model's own start and end tokens ([CLS]/[SEP] for BERT).
      const evaluated = ctx.calculateInputLength([...tokens]);
      if (evaluated > limit) {
        throw new PlatformError(
          400,
          "context_length_exceeded",
          `input[${i}] has ${evaluated} tokens; this model embeds at most ${limit} tokens per input. Shorten or split input[${i}].`,
          "input",
        );
      }
      return { tokens, evaluated };
    });
    const embeddings: number[][] = [];
    for (const { tokens } of sequences) {
      const vector = [...(await ctx.getEmbeddingFor([...tokens])).vector];
      embeddings.push(this.normalizeEmbeddings ? l2Normalized(vector) : vector);
    }
    return {
      embeddings,
      usage: usage(
        sequences.reduce((n, s) => n + s.evaluated, 0),
        0,
      ),
    };
  }

  /**
   * Token ids from a client, at `path` of the field `param`: one outside the vocabulary would make
   * llama.cpp read past its tables.
   */
  private checkedTokenIds(ids: number[], path: string, param: string): Token[] {
    const bad = ids.findIndex((id) => id >= this.vocabularySize);
    if (bad >= 0)
      throw new PlatformError(
        400,
        "invalid_request",
        `${path}[${bad}]: token ${ids[bad]} is not in this model's vocabulary (${this.vocabularySize} tokens)`,
        param,
      );
    return ids as Token[];
  }

  /** Speculative decoding's draft tokens so far, accepted by the model or not (undefined without a draft). */
  speculation(): { validated: number; refuted: number } | undefined {
    if (!this.draft) return undefined;
    return this.sequences.reduce(
      (sum, s) => ({
        validated: sum.validated + s.tokenPredictions.validated,
        refuted: sum.refuted + s.tokenPredictions.refuted,
      }),
      { validated: 0, refuted: 0 },
    );
  }

  /** As a job would read it: the BOS its prompt gets at decode first (run), a chat rendered as render() does. */
  async tokenize(input: TokenizeJob["input"]): Promise<{ tokens: number[]; text: string; max_model_len: number }> {
    const max_model_len = this.context.contextSize;
    if ("tokens" in input)
      return {
        tokens: input.tokens,
        text: this.model.detokenize(this.checkedTokenIds(input.tokens, "tokens", "tokens")),
        max_model_len,
      };
    const rendered =
      "prompt" in input
        ? this.render({ kind: "prompt", prompt: input.prompt, params: {} }).tokens
        : this.render({
            kind: "chat",
            messages: input.messages,
            params: {},
            tools: input.tools?.length ? { tools: input.tools } : undefined,
          }).tokens;
    const special = !("prompt" in input) || input.add_special_tokens !== false;
    const tokens = special && this.bos !== null ? [this.bos, ...rendered] : rendered;
    return { tokens: tokens.map(Number), text: this.model.detokenize(rendered), max_model_len };
  }

  async dispose(): Promise<void> {
    await this.grammars.close();
    await this.adapters.dispose();
    if (this.embeddingContext) await (await this.embeddingContext).dispose();
    await this.context.dispose();
    await this.model.dispose();
    await this.draft?.context.dispose();
    await this.draft?.model.dispose();
  }

  /** `asGiven`: token ids from the client, to evaluate without the BOS token (`run`). */
  private render(request: TextRequest): { tokens: Token[]; stopTriggers: string[]; asGiven?: boolean } {
    // A raw prompt is tokenized as llama.cpp's server and the checkpoint's own (transformers) tokenizer do: a
    // SentencePiece vocabulary that prefixes a space ("▁Once") keeps it, so a converted checkpoint continues
    // a prompt exactly as transformers does (test/e2e/model-directories.test.ts).
    if (request.kind === "prompt")
      return typeof request.prompt === "string"
        ? { tokens: this.model.tokenize(request.prompt, false), stopTriggers: [] }
        : { tokens: this.checkedTokenIds(request.prompt, "prompt", "prompt"), stopTriggers: [], asGiven: true };
    const tokenizeOptions = this.bos === null ? undefined : ("trimLeadingSpace" as const);
    // Earlier calls and results: in the template's own syntax where it has one, in the generic format otherwise.
    if (this.chatTemplate && this.callSyntax)
      return this.tokensOf(
        this.chatTemplate.generateContextState({
          chatHistory: [...nativeHistory(request.messages), { type: "model", response: [] }],
        }),
      );
    const messages = toolPromptMessages(request.messages, request.tools);
    if (!this.chatTemplate) {
      return { tokens: this.model.tokenize(plainChatPrompt(messages), false, tokenizeOptions), stopTriggers: [] };
    }
    return this.tokensOf(
      this.chatTemplate.generateContextState({
        chatHistory: [...messages.map(toHistoryItem), { type: "model", response: [] }],
      }),
    );
  }

  /** A rendered chat as tokens, and the template's stop texts. */
  private tokensOf(state: ChatWrapperGeneratedContextState): { tokens: Token[]; stopTriggers: string[] } {
    const tokenizeOptions = this.bos === null ? undefined : ("trimLeadingSpace" as const);
    let tokens = state.contextText.tokenize(this.model.tokenizer, tokenizeOptions);
    // Templates usually render the BOS token themselves; decode() prepends one too.
    if (this.bos !== null && tokens[0] === this.bos) tokens = tokens.slice(1);
    const stopTriggers = state.stopGenerationTriggers.map((t) => t.toString()).filter((t) => t.length > 0);
    return { tokens, stopTriggers };
  }

  private checkedMaxTokens(promptTokens: number, params: SamplingParams): number {
    const window = this.context.contextSize;
    const requested = params.max_tokens ?? window - promptTokens;
    // An echoed prompt may fill the window: its scores are an answer without a generated token.
    const least = params.echo ? 0 : 1;
    if (promptTokens + requested > window || requested < least) {
      throw new PlatformError(
        400,
        "context_length_exceeded",
        `This model's maximum context length is ${window} tokens. However, you requested ${promptTokens + Math.max(requested, least)} tokens (${promptTokens} in the messages, ${Math.max(requested, least)} in the completion). Please reduce the length of the messages or completion.`,
        params.max_tokens === undefined ? "messages" : "max_tokens",
      );
    }
    return requested;
  }
}

/** The vector scaled to length 1 (a zero vector stays as it is). */
function l2Normalized(vector: number[]): number[] {
  const norm = Math.sqrt(vector.reduce((s, v) => s + v * v, 0));
  return norm > 0 ? vector.map((v) => v / norm) : vector;
}

function toHistoryItem(m: ChatMessage) {
  if (m.role === "system") return { type: "system" as const, text: m.content };
  if (m.role === "user" || m.role === "tool") return { type: "user" as const, text: m.content };
  return { type: "model" as const, response: [m.content] };
}
