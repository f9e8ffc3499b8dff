/**
 * A stream that outlives its replica: when the replica serving a stream dies, the job runs again
 * elsewhere from the start, and the gateway swallows the new attempt's repeat of the text the
 * client already has, then passes on the rest (docs/fleet.md, "A stream survives its replica").
 * Chat and completions (serve-text.ts) and the Responses and Messages streams (serve-events.ts)
 * join attempts here.
 */
import { PlatformError } from "../contracts/errors.ts";
import type { JobEvent } from "../contracts/job.ts";
import { logger } from "../telemetry/log.ts";

const log = logger("gateway");

/**
 * One choice's text across the attempts of its job: what was sent, and while a new attempt repeats
 * it, that attempt's check against it.
 */
export class StreamedText {
  private sent = "";
  private replay: Replay | undefined;

  /**
   * A `started` event. Only a worker's start of an attempt (attempt 1, 2, …) begins a replay: the
   * notice a reclaimer appends when it hands a dead replica's job back (attempt 0) can reach the
   * stream after the new attempt's own start and first tokens, and a replay begun there would
   * compare the new attempt's text from the middle against the sent text from its start.
   */
  started(event: Extract<JobEvent, { type: "started" }>): void {
    if (event.attempt > 0 && this.sent !== "") this.replay = new Replay(this.sent);
  }

  /** How much text the client has (UTF-16 code units): 0 while nothing was sent. */
  get length(): number {
    return this.sent.length;
  }

  /** A token event's text: the part to send (empty while a new attempt only repeats). */
  next(text: string, logprobs: boolean): string {
    const out = this.replay ? this.replay.next(text, logprobs) : text;
    if (this.replay?.done) this.replay = undefined;
    this.sent += out;
    return out;
  }

  /** The attempt ended. One that ended short of what was sent cannot be the same answer. */
  ended(): void {
    this.replay?.next("\u0000", false);
  }
}

/**
 * What a retried choice's new attempt sends while it repeats the text the client already has: the
 * part past it, once it is past it. A deterministic generation (greedy, or seeded) repeats it
 * exactly, and the stream goes on as if nothing happened; one that differs cannot be joined to
 * what was sent, and ends with 502 `replica_lost` as before. Logprobs are carried per token and
 * cannot be split: a stream with them ends so too.
 */
export class Replay {
  private readonly expected: string;
  private at = 0;

  constructor(expected: string) {
    this.expected = expected;
  }

  get done(): boolean {
    return this.at >= this.expected.length;
  }

  /** The part of `text` to send (empty while it only repeats). */
  next(text: string, logprobs: boolean): string {
    const overlap = Math.min(text.length, this.expected.length - this.at);
    if (logprobs || text.slice(0, overlap) !== this.expected.slice(this.at, this.at + overlap)) {
      // Where the two answers part, for an operator chasing it: offsets only, never the text.
      if (!logprobs) {
        let k = 0;
        while (k < overlap && text[k] === this.expected[this.at + k]) k++;
        const partial = text[k] === "\uFFFD" || this.expected[this.at + k] === "\uFFFD";
        log.warn(
          `stream replay: the new attempt differs at character ${this.at + k} of the ${this.expected.length} sent (a ${text.length}-character chunk${partial ? "; one side holds a partial character" : ""})`,
        );
      }
      throw new PlatformError(
        502,
        "replica_lost",
        "the replica serving this stream stopped, and its replacement's answer differs from what was sent (only greedy or seeded generation can go on); retry the request",
      );
    }
    this.at += overlap;
    return text.slice(overlap);
  }
}
