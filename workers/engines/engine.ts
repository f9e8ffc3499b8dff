/** The one interface every inference engine implements (llama.cpp, vLLM, the benchmark's echo). */
import type {
  ChatMessage,
  EchoedPrompt,
  EmbeddingItem,
  FinishReason,
  FunctionTool,
  Prompt,
  SamplingParams,
  TokenizeJob,
  TokenLogprob,
  ToolCall,
  ToolChoice,
  Usage,
} from "../../src/contracts/job.ts";

export type ChatTools = { tools: FunctionTool[]; tool_choice?: ToolChoice; parallel_tool_calls?: boolean };

/**
 * A LoRA adapter to apply (workers/adapters.ts resolved the job's `adapter`): `ref` is its
 * `<name>@<version>`, `path` what the engine loads (llama.cpp: the GGUF adapter; vLLM: the PEFT
 * directory), `rank` its r.
 */
export type AppliedAdapter = { ref: string; path: string; rank: number };

/** An engine's LoRA adapter counts. */
export type AdapterStats = { loaded: number; loads: number; evictions: number; names: string[] };

export type TextRequest =
  /** Token ids are evaluated as given: the engine adds no BOS token to them (job.ts `Prompt`). */
  (
    | { kind: "prompt"; prompt: Prompt; params: SamplingParams }
    | { kind: "chat"; messages: ChatMessage[]; params: SamplingParams; tools?: ChatTools }
  ) & {
    adapter?: AppliedAdapter;
    /** The job's priority (vLLM's field, lower first), for an engine that schedules by it (vLLM); others' order is the worker's. */
    priority?: number;
  };

export type TextOutput = {
  text: string;
  finish_reason: FinishReason;
  usage: Usage;
  tool_calls?: ToolCall[];
  /** The caller's stop string that ended the text (job.ts's TextResult). */
  stop_sequence?: string;
  logprobs?: TokenLogprob[];
  /** With `params.echo` on a prompt: the prompt, and its tokens' logprobs when asked for (job.ts). */
  echo?: EchoedPrompt;
};

export type GenerationHooks = {
  /** Called with each new piece of text, in order, with its tokens' log probabilities when asked for. */
  onText?: (text: string, logprobs?: TokenLogprob[]) => void;
  /** Aborting ends the generation early with finish_reason "cancelled". */
  signal?: AbortSignal;
};

/** One image to make (an `image` job, src/contracts/job.ts): the random seed is always set (the job's, or one drawn for it). */
export type ImageRequest = {
  prompt: string;
  negative_prompt?: string;
  width: number;
  height: number;
  /** Absent: the engine's default (DIFFUSERS_DEFAULTS). */
  steps?: number;
  guidance?: number;
  seed: number;
};

export type ImageOutput = {
  png: Buffer;
  steps: number;
  promptTokens: number;
  /** Images the pipeline call that made this one made: 1 alone, more where same-shaped requests share a call. */
  batch?: number;
};

export type ImageHooks = {
  /** After each denoising step: steps done, of `steps`. */
  onStep?: (step: number, steps: number) => void;
  /** Aborting stops the generation at its next step; the promise rejects with a 499 `cancelled`. */
  signal?: AbortSignal;
};

export interface Engine {
  readonly name: string;
  /** Sequences served at once. */
  readonly parallel: number;
  /** A real inference, so readiness means the engine can answer. */
  warmup(): Promise<void>;
  generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput>;
  /** One embedding per item, in order; an item that does not fit the context is a 400 naming it (`input[i]`). */
  embed(inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: Usage }>;
  /**
   * Text engines: a text as the tokenizer reads it (with the BOS token unless `add_special_tokens`
   * is false), a chat as the chat job would render it, or ids back to text (job.ts TokenizeJob).
   */
  tokenize?(input: TokenizeJob["input"]): Promise<{ tokens: number[]; text: string; max_model_len: number }>;
  /** Image engines (diffusers): one image; text engines leave it out, and image jobs are refused with a 400. */
  generateImage?(request: ImageRequest, hooks: ImageHooks): Promise<ImageOutput>;
  /** With speculative decoding: the draft tokens the model accepted (validated) and rejected (refuted) so far. */
  speculation?(): { validated: number; refuted: number } | undefined;
  /**
   * Engines that run in a process of their own (vLLM): resolves, with why, if that process ends
   * without `dispose`. The replica is then dead as if it had been killed (workers/worker.ts).
   */
  readonly lost?: Promise<string>;
  /** Whether it applies LoRA adapters (TextRequest.adapter); an engine without it refuses them. */
  readonly servesAdapters?: boolean;
  /** Its LoRA adapters: loaded now, and loads and evictions so far (workers/metrics.ts). */
  adapterStats?(): AdapterStats;
  /** The engine's own Prometheus metrics in the text format (vLLM's /metrics), served with the replica's. */
  metrics?(): Promise<string>;
  dispose(): Promise<void>;
}

/** `cached`: the prompt's tokens a KV cache already held (OpenAI's `prompt_tokens_details.cached_tokens`). */
export function usage(prompt: number, completion: number, cached?: number): Usage {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
  };
}

/**
 * The documented fallback for models without a chat template: the messages'
 * contents, one per line, with no role markers. A model without a template was
 * trained on plain text, and inventing a role format would only confuse it; a
 * single user message thus behaves exactly like a completion of its text.
 */
export function plainChatPrompt(messages: ChatMessage[]): string {
  return messages.map((m) => m.content).join("\n");
}
