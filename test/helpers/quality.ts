/**
 * How close a quantized model stays to its source, measured through node-llama-cpp itself: greedy
 * (temperature 0) generations and their tokens/s, token agreement, and perplexity on a fixed text.
 * Shared by the quantizer's tests and `npm run bench:quantize`, so both report the same figures.
 */
import {
  getLlama,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";

export type OpenModel = {
  model: LlamaModel;
  context: LlamaContext;
  sequence: LlamaContextSequence;
  dispose: () => Promise<void>;
};

let llama: Promise<Llama> | undefined;
export function cpuLlama(): Promise<Llama> {
  llama ??= getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  return llama;
}

/** One model, one sequence, a fixed thread count: every variant is measured the same way. */
export async function openModel(path: string, threads = 1, contextSize = 512): Promise<OpenModel> {
  const model = await (await cpuLlama()).loadModel({ modelPath: path });
  const context = await model.createContext({ contextSize: Math.min(contextSize, model.trainContextSize), threads });
  const sequence = context.getSequence();
  return {
    model,
    context,
    sequence,
    dispose: async () => {
      await context.dispose();
      await model.dispose();
    },
  };
}

function promptTokens(m: OpenModel, prompt: string): Token[] {
  const bos = m.model.tokens.bos;
  return [...(bos === null ? [] : [bos]), ...m.model.tokenize(prompt)];
}

/** `count` greedy tokens after `prompt`, and the decode rate (tokens after the first over the time they took). */
export async function greedy(
  m: OpenModel,
  prompt: string,
  count: number,
): Promise<{ tokens: Token[]; tokensPerSecond: number }> {
  await m.sequence.clearHistory();
  const tokens: Token[] = [];
  let first = 0;
  for await (const token of m.sequence.evaluate(promptTokens(m, prompt), { temperature: 0 })) {
    if (tokens.length === 0) first = performance.now();
    tokens.push(token);
    if (tokens.length >= count) break;
  }
  const seconds = (performance.now() - first) / 1000;
  return { tokens, tokensPerSecond: tokens.length > 1 && seconds > 0 ? (tokens.length - 1) / seconds : Number.NaN };
}

/** Share of positions where two generations hold the same token (free-running: after a first difference they usually part). */
export function positionalAgreement(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.max(a.length, b.length);
  if (n === 0) return 1;
  let same = 0;
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] === b[i]) same++;
  return same / n;
}

/** Tokens the two generations share before their first difference. */
export function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/**
 * Feeds `prompt` + `continuation` (the reference model's greedy tokens) and reports, at each
 * continuation position, whether this model's own top token is the reference's (teacher-forced
 * top-1 agreement: one early difference does not spoil the rest), and the natural log of the
 * probability this model gives each next token (for perplexity).
 */
export async function scoreContinuation(
  m: OpenModel,
  prompt: string,
  continuation: readonly Token[],
): Promise<{ agree: number; logProbs: number[] }> {
  await m.sequence.clearHistory();
  const input = [...promptTokens(m, prompt), ...continuation];
  const firstScored = input.length - continuation.length - 1;
  const out = await m.sequence.controlledEvaluate(
    input.map((t, i): Token | [Token, { generateNext: { probabilities: true } }] =>
      i >= firstScored && i < input.length - 1 ? [t, { generateNext: { probabilities: true } }] : t,
    ),
  );
  let agree = 0;
  const logProbs: number[] = [];
  for (let i = firstScored; i < input.length - 1; i++) {
    const probabilities = out[i]?.next.probabilities;
    if (!probabilities) throw new Error(`no probabilities at position ${i}`);
    const next = input[i + 1]!;
    // The map is sorted by probability, highest first.
    if (probabilities.keys().next().value === next) agree++;
    logProbs.push(Math.log(Math.max(probabilities.get(next) ?? 0, 1e-30)));
  }
  return { agree: agree / continuation.length, logProbs };
}

/** exp(mean negative log-likelihood) of `text`'s tokens, each given BOS and the tokens before it. */
export async function perplexity(m: OpenModel, text: string): Promise<number> {
  const tokens = m.model.tokenize(text);
  const { logProbs } = await scoreContinuation(m, "", tokens);
  return Math.exp(-logProbs.reduce((a, b) => a + b, 0) / logProbs.length);
}
