/**
 * What a batch line becomes, whatever its format: the work a record asks for (text, chat, an
 * image), the line parsed into a record or its failure, the record's outcome, and the format that
 * reads and writes lines (formats.ts picks one; input.ts, openai-lines.ts and image-records.ts
 * implement them). Types only, so every file of the batch may import them without a circle.
 */
import type { ChatMessage, FinishReason, Prompt, SamplingParams } from "../contracts/job.ts";
import type { ImageParams } from "../contracts/picture-params.ts";
import type { InputLine } from "../files/jsonl.ts";

/** What one record asks the model for. */
export type Work =
  | { kind: "prompt"; prompt: Prompt }
  | { kind: "chat"; messages: ChatMessage[] }
  | { kind: "image"; image: ImageWork };

export type ParsedEntry =
  | { ok: true; line: number; id: string; work: Work; params: SamplingParams }
  | { ok: false; line: number; id: string; code: string; message: string };

/** What an image record asks a replica for (job.ts ImageJob's fields). */
export type ImageWork = {
  prompt: string;
  negative_prompt?: string;
  width: number;
  height: number;
  params: ImageParams;
};

/**
 * An image record's answer: the PNG's key in the artifact store until placed, then its name
 * relative to the result (`uri`, a relative URI reference: IMAGE_REFERENCE).
 */
export type ImageOutcome = { key?: string; uri?: string; seed: number; steps: number; width: number; height: number };

/**
 * Outcome of one record, as kept until its batch is written. `tokens` is the
 * total; the details are there for output formats that show them.
 */
export type Outcome =
  | {
      ok: true;
      text: string;
      tokens: number;
      prompt_tokens?: number;
      completion_tokens?: number;
      finish_reason?: FinishReason;
      /** An image record's answer (image-records.ts); `text` is then empty. */
      image?: ImageOutcome;
    }
  | { ok: false; code: string; message: string; status?: number; param?: string | null };

export type LineFormat = {
  parse(line: InputLine): ParsedEntry;
  /** One output line (without its newline); must depend only on its arguments, so a redone batch writes the same part. */
  render(record: { line: number; id: string }, outcome: Outcome): string;
  /**
   * Present when the format's failed records go to a file of their own (the
   * OpenAI shape's error file): says of a written line whether it is one.
   * Parts keep every line in input order either way (a partial download or a
   * resumed run reads them as they are); the result is split when assembled.
   * Absent: one result holds every line (the platform's own format).
   */
  failed?(line: string): boolean;
};
