/**
 * A context's free sequences, chosen by what their KV caches hold: a request takes the free sequence
 * whose cached tokens share the longest prefix with its prompt (ties: the least recently used), so a
 * conversation's next turn lands where its earlier turns are cached and only the rest is evaluated.
 * A finished request's cache stays on its sequence until another request takes that sequence.
 *
 * As llama-server picks its slots (`--slot-prompt-similarity`, 0.5 by default), a match counts only
 * when it holds more than half of the prompt: otherwise a new conversation, whose first tokens (BOS,
 * the template's header) every cache shares, would land on the sequence holding the last one and
 * discard it, where a free sequence holding nothing worth keeping is at hand. Such a request takes
 * the least recently used free sequence (one never used first).
 */
import type { LlamaContextSequence, Token } from "node-llama-cpp";

/** A sequence taken for a prompt: `cached` of the prompt's tokens were in its cache when taken. */
export type Taken<S = LlamaContextSequence> = { sequence: S; cached: number };

/**
 * `S`: a context's sequence here, or a llama-server slot (llama-server.ts), with `cachedOf` saying
 * how many of a prompt's leading tokens its cache holds.
 */
export class SequencePool<S = LlamaContextSequence> {
  private readonly free: S[] = [];
  /** When each sequence was last given back; a sequence never used counts as the oldest. */
  private readonly released = new Map<S, number>();
  private clock = 0;
  private readonly cachedOf: (sequence: S, prompt: readonly Token[]) => number;

  constructor(
    sequences: Iterable<S> = [],
    cachedOf: (sequence: S, prompt: readonly Token[]) => number = matched as never,
  ) {
    for (const s of sequences) this.free.push(s);
    this.cachedOf = cachedOf;
  }

  get size(): number {
    return this.free.length;
  }

  /**
   * The free sequence whose cache matches `prompt` longest, removed from the pool; undefined when
   * none is free. Decoding keeps at most all but the prompt's last token (whose evaluation yields the
   * first new token), so a match is counted up to there.
   */
  take(prompt: readonly Token[]): Taken<S> | undefined {
    let best: Taken<S> | undefined;
    let bestAt = -1;
    const worth = (cached: number) => (cached * 2 > prompt.length ? cached : 0);
    for (const [i, sequence] of this.free.entries()) {
      const cached = this.cachedOf(sequence, prompt);
      const score = worth(cached);
      const bestScore = best === undefined ? -1 : worth(best.cached);
      const better =
        best === undefined ||
        score > bestScore ||
        (score === bestScore && this.lastUsed(sequence) < this.lastUsed(best.sequence));
      if (better) {
        best = { sequence, cached };
        bestAt = i;
      }
    }
    if (best) this.free.splice(bestAt, 1);
    return best;
  }

  give(sequence: S): void {
    this.released.set(sequence, ++this.clock);
    this.free.push(sequence);
  }

  private lastUsed(sequence: S): number {
    return this.released.get(sequence) ?? 0;
  }
}

/** How many of `prompt`'s leading tokens (all but its last, at most) `sequence`'s cache holds. */
export function matched(sequence: LlamaContextSequence, prompt: readonly Token[]): number {
  if (prompt.length < 2) return 0;
  const { firstDifferentIndex } = sequence.compareContextTokens(prompt as Token[]);
  return Math.min(firstDifferentIndex, prompt.length - 1);
}
