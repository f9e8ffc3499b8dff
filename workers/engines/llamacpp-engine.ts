/**
 * The llama.cpp engine once loaded (llamacpp.ts loads it): generation on the context's sequences,
 * each request on the free sequence whose cache holds the longest part of its prompt
 * (llamacpp-sequences.ts), native tool calls, echo, grammars, and speculation's counts. Prompts are
 * rendered by llamacpp-render.ts, embeddings made by llamacpp-embed.ts. With a llama-server child
 * (llama-server.ts), its slots decode instead, chosen the same way; what it cannot do (a LoRA
 * adapter loaded on demand, a prompt's own logprobs) runs here, on a context opened on first need.
 */
import {
  type JinjaTemplateChatWrapper,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
  TokenBias,
} from "node-llama-cpp";
import { LLAMACPP } from "../../src/contracts/engines.ts";
import type {
  ChatMessage,
  EchoedPrompt,
  EmbeddingItem,
  FinishReason,
  Prompt,
  SamplingParams,
  TokenizeJob,
} from "../../src/contracts/job.ts";
import { contextLengthExceeded } from "../../src/contracts/context-window.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import {
  type ChatTools,
  type Engine,
  type GenerationHooks,
  type TextOutput,
  type TextRequest,
  usage,
} from "./engine.ts";
import type { AdapterLanes, Lane } from "./llamacpp-adapters.ts";
import { type Decoded, decode, promptPieces, scorePrompt } from "./llamacpp-decode.ts";
import type { Embedder } from "./llamacpp-embed.ts";
import { enforceable, type GrammarCache } from "./llamacpp-grammar.ts";
import {
  type CallSyntax,
  callsGrammar,
  functionsOf,
  nativeHistory,
  parseNativeCalls,
} from "./llamacpp-native-tools.ts";
import type { PromptRenderer } from "./llamacpp-render.ts";
import type { SequencePool, Taken } from "./llamacpp-sequences.ts";
import type { LlamaServer } from "./llama-server.ts";
import { readToolAnswer, refuseFormatWithTools, toolAnswerSchema } from "./tool-format.ts";

export type Draft = { model: LlamaModel; context: LlamaContext };

/** The base context: its sequences, all of them; `pool` holds those free now. */
export type LocalContext = { context: LlamaContext; sequences: LlamaContextSequence[]; pool: SequencePool };

/** What the engine is made of; llamacpp.ts makes the parts. */
export type LlamaCppParts = {
  model: LlamaModel;
  /** Tokens per sequence. */
  contextSize: number;
  parallel: number;
  /** Opens the base context; called once, on first need, unless it is `opened` at load (without a server). */
  local: () => Promise<LocalContext>;
  opened?: LocalContext;
  /** llama-server decoding in place of the base context. */
  server?: LlamaServer;
  renderer: PromptRenderer;
  embedder: Embedder;
  grammars: GrammarCache;
  adapters: AdapterLanes;
  draft?: Draft;
};

export class LlamaCppEngine implements Engine {
  readonly name = LLAMACPP.framework;
  readonly servesAdapters = true;
  readonly parallel: number;
  private readonly model: LlamaModel;
  private readonly contextSize: number;
  private readonly local: () => Promise<LocalContext>;
  private opened: LocalContext | undefined;
  private readonly server: LlamaServer | undefined;
  readonly lost: Promise<string> | undefined;
  private readonly renderer: PromptRenderer;
  private readonly embedder: Embedder;
  private readonly grammars: GrammarCache;
  private readonly draft: Draft | undefined;
  /** An encoder (BERT and kin: non-causal attention) embeds and cannot generate. */
  private readonly encoderOnly: boolean;
  /** LoRA adapters' contexts beside the base's. */
  readonly adapters: AdapterLanes;

  constructor(parts: LlamaCppParts) {
    this.model = parts.model;
    this.contextSize = parts.contextSize;
    this.opened = parts.opened;
    // One promise, so requests arriving together before the first open share one context.
    let opening: Promise<LocalContext> | undefined = parts.opened && Promise.resolve(parts.opened);
    this.local = () => {
      opening ??= parts.local().then((local) => (this.opened = local));
      return opening;
    };
    this.server = parts.server;
    this.lost = parts.server?.lost;
    this.renderer = parts.renderer;
    this.embedder = parts.embedder;
    this.grammars = parts.grammars;
    this.adapters = parts.adapters;
    this.draft = parts.draft;
    this.parallel = parts.parallel;
    this.encoderOnly = encoderOnly(this.model);
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

  embed(inputs: EmbeddingItem[]) {
    return this.embedder.embed(inputs);
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
    const syntax = this.renderer.callSyntax;
    if (request.kind === "chat" && tools && syntax)
      return this.generateNativeCalls(request.messages, tools, syntax, request.params, hooks, request.adapter);
    const grammar = await this.grammarFor(request);
    const { tokens, stopTriggers, asGiven } = this.renderer.render(request);
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
    const template = this.renderer.chatTemplate as JinjaTemplateChatWrapper;
    const state = template.generateContextState({
      chatHistory: [...nativeHistory(messages), { type: "model", response: [] }],
      availableFunctions: functionsOf(tools),
      documentFunctionParams: true,
    });
    const { tokens, stopTriggers } = this.renderer.tokensOf(state);
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
      (params.max_tokens ?? this.contextSize - first.out.usage.prompt_tokens) - first.decoded.completionTokens;
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
      // The client's prompt is the first part's: its cached share is the first part's too.
      usage: usage(
        first.out.usage.prompt_tokens,
        first.decoded.completionTokens + second.decoded.completionTokens,
        first.decoded.cachedTokens,
      ),
      ...(first.out.logprobs ? { logprobs: [...first.out.logprobs, ...(second.out.logprobs ?? [])] } : {}),
    };
    return withCalls(out, second.decoded.text, true, first.decoded.text.trim());
  }

  /**
   * One generation on a free sequence of this replica's context (the base's or the adapter's): the
   * one whose cache holds the longest part of the prompt. The model's BOS token goes first,
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
    const evaluated = this.renderer.evaluated(tokens, how.asGiven);
    const promptTokens = evaluated.length;
    const maxTokens = how.maxTokens ?? this.checkedMaxTokens(promptTokens, p);
    const tokenBias = p.logit_bias && this.tokenBias(p.logit_bias);
    const options = {
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
      },
      penalties:
        p.frequency_penalty || p.presence_penalty
          ? { frequencyPenalty: p.frequency_penalty, presencePenalty: p.presence_penalty }
          : undefined,
      signal,
      onText: how.onText,
    };
    // max_tokens 0 (echo only): the prompt's scores are the whole answer.
    const nothing: Decoded = {
      text: "",
      completionTokens: 0,
      cachedTokens: 0,
      stop: "length",
      ...(p.logprobs ? { logprobs: [] } : {}),
    };
    const server = this.server;
    // A prompt's own logprobs and an adapter loaded on demand are this process's to compute.
    if (server && !adapter && !(how.echo !== undefined && p.logprobs)) {
      const slot = server.slots.take(evaluated);
      if (!slot) throw new PlatformError(503, "engine_busy", "all sequences of this replica are busy");
      try {
        const echo = how.echo === undefined ? undefined : { text: this.echoText(how.echo) };
        const decoded =
          maxTokens === 0
            ? nothing
            : await server.decode(this.model, slot.sequence, evaluated, { ...options, logitBias: p.logit_bias });
        return { out: this.output(decoded, promptTokens, p, echo, signal), decoded };
      } finally {
        server.slots.give(slot.sequence);
      }
    }
    let lane: Lane | undefined;
    let taken: Taken | undefined;
    const local = adapter ? undefined : await this.local();
    if (adapter) ({ lane, taken } = await this.adapters.take(adapter.ref, adapter.path, evaluated));
    else taken = local?.pool.take(evaluated);
    if (!taken) throw new PlatformError(503, "engine_busy", "all sequences of this replica are busy");
    const { sequence } = taken;
    try {
      const echo =
        how.echo === undefined ? undefined : await this.echoed(sequence, how.echo, evaluated, tokens.length, p);
      const decoded: Decoded =
        maxTokens === 0
          ? nothing
          : await decode(this.model, sequence, evaluated, {
              ...options,
              sampling: { ...options.sampling, tokenBias },
            });
      return { out: this.output(decoded, promptTokens, p, echo, signal), decoded };
    } finally {
      if (lane) this.adapters.release(lane, sequence);
      else local?.pool.give(sequence);
    }
  }

  private output(
    decoded: Decoded,
    promptTokens: number,
    p: SamplingParams,
    echo: EchoedPrompt | undefined,
    signal: AbortSignal | undefined,
  ): TextOutput {
    const finish_reason: FinishReason =
      decoded.stop === "aborted" || signal?.aborted ? "cancelled" : decoded.stop === "length" ? "length" : "stop";
    const out: TextOutput = {
      text: decoded.text,
      finish_reason,
      usage: usage(promptTokens, decoded.completionTokens, decoded.cachedTokens),
      // The caller's own stop strings only: a template's or a grammar's end is the model's.
      ...(decoded.stoppedBy !== undefined && p.stop?.includes(decoded.stoppedBy)
        ? { stop_sequence: decoded.stoppedBy }
        : {}),
      ...(decoded.logprobs ? { logprobs: decoded.logprobs } : {}),
      ...(echo ? { echo } : {}),
    };
    return out;
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
    const text = this.echoText(prompt);
    if (!p.logprobs) return { text };
    const first = evaluated.length - count;
    return { text, logprobs: await scorePrompt(this.model, sequence, evaluated, first, p.top_logprobs ?? 0) };
  }

  /**
   * Token ids as their echoed tokens read, one by one: detokenizing them whole would keep the
   * space a SentencePiece word has after a BOS token, which the tokens (and transformers) drop.
   */
  private echoText(prompt: Prompt): string {
    return typeof prompt === "string" ? prompt : promptPieces(this.model, prompt as Token[]).join("");
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
    const size = this.renderer.vocabularySize;
    for (const [id, value] of Object.entries(bias)) {
      const token = Number(id);
      if (token >= size)
        throw new PlatformError(
          400,
          "invalid_request",
          `logit_bias: token ${id} is not in this model's vocabulary (${size} tokens)`,
          "logit_bias",
        );
      // -100 means "never", as OpenAI documents; other values are added to the logit.
      result.set(token as Token, value <= -100 ? "never" : { logit: value });
    }
    return result;
  }

  /** Speculative decoding's draft tokens so far, accepted by the model or not (undefined without a draft). */
  speculation(): { validated: number; refuted: number } | undefined {
    if (this.server) return this.server.speculation();
    if (!this.draft || !this.opened) return undefined;
    return this.opened.sequences.reduce(
      (sum, s) => ({
        validated: sum.validated + s.tokenPredictions.validated,
        refuted: sum.refuted + s.tokenPredictions.refuted,
      }),
      { validated: 0, refuted: 0 },
    );
  }

  /** As a job would read it: the BOS its prompt gets at decode first (run), a chat rendered as render() does. */
  async tokenize(input: TokenizeJob["input"]): Promise<{ tokens: number[]; text: string; max_model_len: number }> {
    const max_model_len = this.contextSize;
    if ("tokens" in input)
      return {
        tokens: input.tokens,
        text: this.model.detokenize(this.renderer.checkedTokenIds(input.tokens, "tokens", "tokens")),
        max_model_len,
      };
    const rendered =
      "prompt" in input
        ? this.renderer.render({ kind: "prompt", prompt: input.prompt, params: {} }).tokens
        : this.renderer.render({
            kind: "chat",
            messages: input.messages,
            params: {},
            tools: input.tools?.length ? { tools: input.tools } : undefined,
          }).tokens;
    const special = !("prompt" in input) || input.add_special_tokens !== false;
    const bos = this.renderer.bos;
    const tokens = special && bos !== null ? [bos, ...rendered] : rendered;
    return { tokens: tokens.map(Number), text: this.model.detokenize(rendered), max_model_len };
  }

  async dispose(): Promise<void> {
    await this.grammars.close();
    await this.adapters.dispose();
    await this.embedder.dispose();
    await this.server?.stop();
    await this.opened?.context.dispose();
    await this.model.dispose();
    await this.draft?.context.dispose();
    await this.draft?.model.dispose();
  }

  private checkedMaxTokens(promptTokens: number, params: SamplingParams): number {
    const window = this.contextSize;
    const requested = params.max_tokens ?? window - promptTokens;
    // An echoed prompt may fill the window: its scores are an answer without a generated token.
    const least = params.echo ? 0 : 1;
    if (promptTokens + requested > window || requested < least) {
      throw contextLengthExceeded({
        window,
        promptTokens,
        completionTokens: Math.max(requested, least),
        where: "messages",
        param: params.max_tokens === undefined ? "messages" : "max_tokens",
      });
    }
    return requested;
  }
}

/** An encoder (BERT and kin: non-causal attention) embeds and cannot generate. */
export function encoderOnly(model: LlamaModel): boolean {
  const metadata = model.fileInfo.metadata as unknown as Record<string, Record<string, unknown> | undefined>;
  const architecture = String(model.fileInfo.metadata.general?.architecture ?? "");
  return (metadata[architecture]?.attention as { causal?: unknown } | undefined)?.causal === false;
}
