/**
 * What the model catalog records of a GGUF file (src/models/record.ts `gguf`): its architecture,
 * size, context, quantization and tokenizer, from the header alone (read.ts), never loading the model.
 */
import { open } from "node:fs/promises";
import { z } from "zod";
import { GGML_TYPES, GGUF_MAGIC, LLAMA_FTYPE_NAMES } from "./format.ts";
import type { GgufInfo, GgufTensorInfo } from "./read.ts";

export const GgufSummary = z.object({
  architecture: z.string().nullable(),
  parameters: z.number().int().nullable(),
  context_length: z.number().int().nullable(),
  quantization: z.string().nullable(),
  chat_template: z.boolean(),
  /** `tokenizer.ggml.model`: "llama" (SentencePiece), "gpt2" (byte-level BPE), "bert" (WordPiece), ... Absent on versions registered before it was recorded. */
  tokenizer: z.string().nullable().optional(),
  /**
   * UTF-8 bytes of the vocabulary's longest token: the gateway's cheap bound on a prompt's
   * token count (src/gateway/input-bounds.ts). Absent on versions registered before it was recorded.
   */
  max_token_bytes: z.number().int().positive().nullable().optional(),
});
export type GgufSummary = z.infer<typeof GgufSummary>;

/** Whether the file starts with the GGUF magic; its bytes are never quoted back (they are the client's data). */
export async function hasGgufMagic(path: string): Promise<boolean> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(GGUF_MAGIC.length);
    const { bytesRead } = await file.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.toString("latin1") === GGUF_MAGIC;
  } finally {
    await file.close();
  }
}

/** The summary of a header readGgufInfo read. */
export function summarizeGguf(info: GgufInfo): GgufSummary {
  const value = (key: string) => info.metadata.get(key)?.value;
  const declared = value("general.architecture");
  const architecture = typeof declared === "string" ? declared : null;
  const contextLength = architecture === null ? undefined : value(`${architecture}.context_length`);
  const parameters = info.tensors.reduce((sum, t) => sum + t.dims.reduce((a, d) => a * d, 1), 0);
  return {
    architecture,
    parameters: parameters > 0 ? parameters : null,
    context_length: typeof contextLength === "number" ? contextLength : null,
    quantization: quantizationName(value("general.file_type"), info.tensors),
    chat_template: typeof value("tokenizer.chat_template") === "string",
    tokenizer: tokenizerModel(value("tokenizer.ggml.model")),
    max_token_bytes: longestToken(value("tokenizer.ggml.tokens")),
  };
}

/** `tokenizer.ggml.model` ("llama" for SentencePiece, "gpt2" for byte-level BPE, "bert" for WordPiece, ...), bounded: it is the file's text. */
function tokenizerModel(model: unknown): string | null {
  return typeof model === "string" && /^[\w.-]{1,40}$/.test(model) ? model : null;
}

/** UTF-8 bytes of the vocabulary's longest token (the stored form, never shorter than what it decodes to). */
function longestToken(tokens: unknown): number | null {
  if (!Array.isArray(tokens) || tokens.length === 0) return null;
  let longest = 0;
  for (const t of tokens) if (typeof t === "string") longest = Math.max(longest, Buffer.byteLength(t, "utf8"));
  return longest > 0 ? longest : null;
}

/** The file's declared type, else the type most of its tensors have. */
function quantizationName(fileType: unknown, tensors: GgufTensorInfo[]): string | null {
  if (typeof fileType === "number" && LLAMA_FTYPE_NAMES[fileType]) return LLAMA_FTYPE_NAMES[fileType];
  const counts = new Map<number, number>();
  for (const t of tensors) counts.set(t.type, (counts.get(t.type) ?? 0) + 1);
  const top = [...counts.entries()].sort((a, b) => b[1] - a[1])[0];
  return top ? (GGML_TYPES[top[0]]?.name ?? null) : null;
}
