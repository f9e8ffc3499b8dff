/**
 * The llama.cpp decoding loop: one sequence, token by token, through node-llama-cpp's
 * `evaluateWithMetadata`, so each token's probabilities are at hand when a client asks for
 * logprobs (LlamaCompletion, which this replaced, does not expose them). It does what
 * LlamaCompletion did besides: reuse of the KV cache's common prefix, stop strings (held back
 * while they might still match, never streamed), characters split across tokens, and the
 * grammar's own stop triggers and trailing whitespace. `scorePrompt` scores a prompt's own tokens
 * (echo with logprobs) before it is continued.
 */
import type {
  ControlledEvaluateInputItem,
  LlamaContextSequence,
  LlamaGrammar,
  LlamaModel,
  SequenceEvaluateOptions,
  Token,
} from "node-llama-cpp";
import type { PromptTokenLogprob, TokenLogprob } from "../../src/contracts/job.ts";
import { evaluationState } from "./llamacpp-grammar.ts";
import { type Lockstep, lockstepOf } from "./llamacpp-lockstep.ts";

export type DecodeOptions = {
  maxTokens: number;
  /** Text that ends the generation; it is not part of the answer. */
  stopStrings: string[];
  grammar?: LlamaGrammar;
  /** Report logprobs with this many alternatives per token (0: the token's own only). */
  topLogprobs?: number;
  sampling: Pick<SequenceEvaluateOptions, "temperature" | "topP" | "topK" | "minP" | "seed" | "tokenBias">;
  /** OpenAI's penalties, on the tokens generated so far. */
  penalties?: { frequencyPenalty?: number; presencePenalty?: number };
  signal?: AbortSignal;
  onText?: (text: string, logprobs?: TokenLogprob[]) => void;
};

/** `stoppedBy`: the stop string that ended it (stop "stop"); `cachedTokens`: the prompt's tokens its cache held. */
export type Decoded = {
  text: string;
  completionTokens: number;
  cachedTokens: number;
  stop: "eog" | "stop" | "length" | "aborted";
  stoppedBy?: string;
  logprobs?: TokenLogprob[];
};

const PARTIAL_CHARACTER = "\uFFFD";
/** -Infinity does not survive JSON; vLLM reports impossible tokens with the same value. */
export const IMPOSSIBLE_LOGPROB = -9999;

export async function decode(
  model: LlamaModel,
  sequence: LlamaContextSequence,
  prompt: Token[],
  options: DecodeOptions,
): Promise<Decoded> {
  const input = await reuseCommonPrefix(sequence, prompt);
  const generated: Token[] = [];
  const stopStrings = [...options.stopStrings, ...grammarStops(options.grammar)];
  const trimTrailingSpace = options.grammar?.trimWhitespaceSuffix ?? false;
  const wantLogprobs = options.topLogprobs !== undefined;
  const allLogprobs: TokenLogprob[] = [];
  let pendingLogprobs: TokenLogprob[] = [];
  let pendingTokens: Token[] = [];
  let emitted = "";
  let held = "";
  let stoppedBy: string | undefined;

  const emit = (text: string) => {
    if (text === "" && pendingLogprobs.length === 0) return;
    emitted += text;
    if (wantLogprobs) options.onText?.(text, pendingLogprobs);
    else if (text !== "") options.onText?.(text);
    pendingLogprobs = [];
  };
  /** Adds text; returns true when a stop string completed (the text before it is emitted). */
  const accept = (text: string): boolean => {
    const buffer = held + text;
    const stopAt = firstStop(buffer, stopStrings);
    if (stopAt !== undefined) {
      held = "";
      stoppedBy = stopAt.stop;
      emit(buffer.slice(0, stopAt.at));
      return true;
    }
    const keep = Math.max(
      heldSuffixLength(buffer, stopStrings),
      trimTrailingSpace ? buffer.length - buffer.trimEnd().length : 0,
    );
    held = buffer.slice(buffer.length - keep);
    emit(buffer.slice(0, buffer.length - keep));
    return false;
  };

  const evaluation = sequence.evaluateWithMetadata(
    input,
    { probabilities: wantLogprobs },
    {
      ...options.sampling,
      grammarEvaluationState: options.grammar ? evaluationState(model, options.grammar) : undefined,
      repeatPenalty: options.penalties && { punishTokens: () => generated, penalty: 1, ...options.penalties },
    },
  );
  let stop: Decoded["stop"];
  // With a draft model a step yields several tokens from one decode: lockstep would only stall it.
  const group = sequence.tokenPredictor ? undefined : lockstepOf(sequence.context);
  let joined: Lockstep | undefined;
  try {
    stop = await loop();
  } finally {
    joined?.leave();
  }
  async function loop(): Promise<Decoded["stop"]> {
    for await (const out of evaluation) {
      generated.push(out.token);
      pendingTokens.push(out.token);
      if (wantLogprobs) {
        // As the text is decoded: the answer's first token without a preceding one.
        const before = generated.length > 1 ? (generated[generated.length - 2] as Token) : undefined;
        const probabilities = untempered(
          (out as { probabilities?: Map<Token, number> }).probabilities,
          options.sampling.temperature ?? 0,
        );
        const entry = logprobOf(model, out.token, before, probabilities, options.topLogprobs ?? 0);
        pendingLogprobs.push(entry);
        allLogprobs.push(entry);
      }
      // A character split across tokens is decoded once its last byte arrives.
      const alone = model.detokenize([out.token]);
      const waiting = alone.endsWith(PARTIAL_CHARACTER) && pendingTokens.length < 4 && !model.isSpecialToken(out.token);
      if (!waiting) {
        const text = model.detokenize(
          pendingTokens,
          false,
          generated.slice(0, generated.length - pendingTokens.length),
        );
        pendingTokens = [];
        if (accept(text)) return "stop";
      }
      if (options.signal?.aborted) return "aborted";
      if (generated.length >= options.maxTokens) return "length";
      if (group) {
        if (!joined) {
          joined = group;
          group.join();
        }
        await group.arrive();
      }
    }
    return "eog";
  }
  // Ended without a stop string: what was held back is answer after all (trailing space of a grammar's answer excepted).
  if (stop !== "stop") {
    if (pendingTokens.length > 0)
      held += model.detokenize(pendingTokens, false, generated.slice(0, generated.length - pendingTokens.length));
    emit(trimTrailingSpace ? held.trimEnd() : held);
  }
  return {
    text: emitted,
    completionTokens: generated.length,
    cachedTokens: prompt.length - input.length,
    stop,
    ...(stoppedBy === undefined ? {} : { stoppedBy }),
    ...(wantLogprobs ? { logprobs: allLogprobs } : {}),
  };
}

/**
 * The log probability of each of `prompt`'s tokens from index `first` on, given the tokens before
 * it, with the `top` most likely alternatives; the token at index 0 has nothing before it (null).
 * `first` is 1 when the engine put a BOS token first: the BOS is no token of the client's prompt.
 *
 * The prompt is evaluated from scratch, every token but the last with its next-token logits: a KV
 * cache gives back no logits of the tokens it holds. That leaves the sequence holding all but the
 * last token, which is what decode() keeps of it before evaluating the last one and generating.
 *
 * llama.cpp hands over the raw logits (the greedy sampler changes none) of the token that came and
 * of the `top` best, and Σ exp(logit − max) over the vocabulary: log-softmax is then
 * (logit − max) − ln Σ, in float64. Only that sum is float32 (llama.cpp's own), which keeps every
 * logit of the vocabulary in native code rather than crossing into JavaScript, per prompt token.
 */
export async function scorePrompt(
  model: LlamaModel,
  sequence: LlamaContextSequence,
  prompt: Token[],
  first: number,
  top: number,
): Promise<PromptTokenLogprob[]> {
  await sequence.clearHistory();
  const items: ControlledEvaluateInputItem[] = prompt.slice(0, -1).map((token, i) => [
    token,
    {
      generateNext: {
        // The best token is the maximum the sum is relative to; asked for even when no alternatives are.
        logits: { filter: { tokens: [prompt[i + 1] as Token], includeTop: Math.max(top, 1) } },
        totalLogitWeight: true,
      },
    },
  ]);
  const outputs = items.length > 0 ? await sequence.controlledEvaluate(items) : [];
  const scored: PromptTokenLogprob[] = [];
  for (let k = first; k < prompt.length; k++) {
    const token = prompt[k] as Token;
    // As decode() does for generated tokens: the preceding token keeps a word's leading space.
    const context = k > 0 ? [prompt[k - 1] as Token] : [];
    const candidate = (t: Token, logprob: number) => tokenCandidate(model, t, context, logprob);
    if (k === 0) {
      scored.push({ ...candidate(token, 0), logprob: null, top_logprobs: null });
      continue;
    }
    const next = outputs[k - 1]?.next;
    if (!next?.logits || next.totalLogitWeight === undefined || !next.logits.has(token))
      throw new Error(`llama.cpp returned no logits for prompt token ${k}`);
    const ranked = [...next.logits].sort((a, b) => b[1] - a[1]);
    const max = (ranked[0] as [Token, number])[1];
    const logSum = Math.log(next.totalLogitWeight);
    const logprob = (logit: number) => logit - max - logSum;
    scored.push({
      ...candidate(token, logprob(next.logits.get(token) as number)),
      top_logprobs: ranked.slice(0, top).map(([t, logit]) => candidate(t, logprob(logit))),
    });
  }
  return scored;
}

/** Each token's text, the preceding token as context (as decode() reads generated tokens). */
export function promptPieces(model: LlamaModel, tokens: Token[]): string[] {
  return tokens.map((t, k) => model.detokenize([t], false, k > 0 ? [tokens[k - 1] as Token] : []));
}

/**
 * Keeps the part of the sequence's KV cache the prompt starts with and returns what is left to
 * evaluate: at least the prompt's last token, whose evaluation yields the first new token.
 */
async function reuseCommonPrefix(sequence: LlamaContextSequence, prompt: Token[]): Promise<Token[]> {
  const keep = prompt.slice(0, -1);
  await sequence.adaptStateToTokens(keep, false);
  return prompt.slice(sequence.nextTokenIndex);
}

export function grammarStops(grammar: LlamaGrammar | undefined): string[] {
  return (grammar?.stopGenerationTriggers ?? [])
    .map((t) =>
      typeof t === "string" ? t : Array.isArray(t) ? t.filter((p) => typeof p === "string").join("") : t.toString(),
    )
    .filter((t) => t !== "");
}

function firstStop(text: string, stops: string[]): { at: number; stop: string } | undefined {
  let first: { at: number; stop: string } | undefined;
  for (const stop of stops) {
    const at = text.indexOf(stop);
    if (at >= 0 && (first === undefined || at < first.at)) first = { at, stop };
  }
  return first;
}

/** How much of the text's end could still grow into a stop string. */
function heldSuffixLength(text: string, stops: string[]): number {
  let longest = 0;
  for (const s of stops) {
    for (let n = Math.min(s.length - 1, text.length); n > longest; n--) {
      if (text.endsWith(s.slice(0, n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

/**
 * The distribution before temperature, from the one node-llama-cpp reports (after it): p_T ∝ p^(1/T),
 * so p ∝ p_T^T. Exact over the tokens it lists: all of them unless top_k/top_p/min_p cut some.
 */
function untempered(
  probabilities: Map<Token, number> | undefined,
  temperature: number,
): Map<Token, number> | undefined {
  if (!probabilities || temperature <= 0 || temperature === 1) return probabilities;
  const scaled = [...probabilities].map(
    ([t, p]) => [t, p > 0 ? temperature * Math.log(p) : Number.NEGATIVE_INFINITY] as const,
  );
  // A loop, not Math.max(...): a real vocabulary has more entries than a call takes arguments.
  let max = Number.NEGATIVE_INFINITY;
  for (const [, x] of scaled) if (x > max) max = x;
  const total = scaled.reduce((sum, [, x]) => sum + Math.exp(x - max), 0);
  return new Map(scaled.map(([t, x]) => [t, Math.exp(x - max) / total]));
}

/** `before`: the token preceding it, so a word's leading space survives detokenizing it alone. */
function logprobOf(
  model: LlamaModel,
  token: Token,
  before: Token | undefined,
  probabilities: Map<Token, number> | undefined,
  top: number,
): TokenLogprob {
  const context = before === undefined ? [] : [before];
  const candidate = (t: Token, p: number | undefined) =>
    tokenCandidate(model, t, context, p && p > 0 ? Math.log(p) : IMPOSSIBLE_LOGPROB);
  const alternatives: ReturnType<typeof candidate>[] = [];
  if (probabilities) {
    for (const [t, p] of probabilities) {
      if (alternatives.length >= top) break;
      alternatives.push(candidate(t, p));
    }
  }
  return { ...candidate(token, probabilities?.get(token)), top_logprobs: alternatives };
}

/** A token as logprobs list it: its text read after `context` (a word keeps its leading space), the logprob, the bytes. */
export function tokenCandidate(model: LlamaModel, token: Token, context: Token[], logprob: number) {
  const text = model.detokenize([token], false, context);
  return { token: text, logprob, bytes: [...Buffer.from(text, "utf8")] };
}
