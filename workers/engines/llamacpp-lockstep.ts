/**
 * Lockstep decoding for the sequences of one context. node-llama-cpp batches the decodes queued
 * when it dispatches, and it dispatches again, at once, whatever is queued when a batch ends. Its
 * sequences resume one by one as their tokens are sampled (each on the thread pool), so the last
 * of four had not queued its next token yet when the next batch went: measured on a 76M model,
 * 4 × 128 tokens took 171 batches of 3 tokens, each sequence skipping every fourth batch, and four
 * sequences decoded hardly faster than one (docs/performance.md, "Serving traces"). Here a
 * sequence that has its token waits until every other generating sequence of the context has its
 * own, then they all ask for the next in the same turn of the event loop: 129 batches of 4.
 *
 * A sequence joins at its first generated token (a prompt being evaluated holds nobody up) and
 * leaves when its generation ends. Nobody waits on a sequence that waits for its decode: the
 * library dispatches queued decodes on its own, so the group always moves on.
 */
import type { LlamaContext } from "node-llama-cpp";

export class Lockstep {
  private members = 0;
  private waiting: (() => void)[] = [];

  join(): void {
    this.members++;
  }

  leave(): void {
    this.members--;
    this.release();
  }

  /** Resolves once every member has arrived (this one included). */
  arrive(): Promise<void> {
    const arrived = new Promise<void>((resolve) => this.waiting.push(resolve));
    this.release();
    return arrived;
  }

  private release(): void {
    if (this.waiting.length === 0 || this.waiting.length < this.members) return;
    const go = this.waiting;
    this.waiting = [];
    for (const resolve of go) resolve();
  }
}

const groups = new WeakMap<LlamaContext, Lockstep>();

/** The lockstep group of a context's sequences (one per context: the base's, each adapter's). */
export function lockstepOf(context: LlamaContext): Lockstep {
  let group = groups.get(context);
  if (!group) {
    group = new Lockstep();
    groups.set(context, group);
  }
  return group;
}
