/**
 * What a client can make the platform hold: body size per route, and a prompt
 * bound checked before anything is enqueued, since every queued request is a
 * copy of its prompt in Redis. docs/security.md ("Bounded inputs") explains the
 * bound; the worker still makes the exact token count.
 */
import { Transform } from "node:stream";
import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { GgufSummary } from "../formats/gguf/summary.ts";
import type { Framework } from "../contracts/deployment.ts";
import type { EmbeddingItem } from "../contracts/job.ts";
import { formatBytes } from "../contracts/bytes.ts";
import { contextLengthExceeded, embeddingInputTooLong } from "../contracts/context-window.ts";
import { ENGINES } from "../contracts/engines.ts";
import { PlatformError } from "../contracts/errors.ts";
import type { Settings } from "../settings/index.ts";

export function tooLarge(limit: number, setting: string): PlatformError {
  return new PlatformError(
    413,
    "request_too_large",
    `request body exceeds this route's limit of ${formatBytes(limit)} (${limit} bytes, ${setting}); send less, or ask the operator to raise ${setting}`,
  );
}

/**
 * A declared length is checked from the header alone (Node's parser holds the body to it).
 * Hono's bodyLimit, which counts what it reads, takes the rest: a chunked body without
 * Content-Length is held to the limit too. It is not used for both because it reads
 * `c.req.raw.body`, which makes @hono/node-server build a full undici Request and web stream
 * for every request; left alone, the JSON body is read straight from the socket (~10% of the
 * gateway's CPU per request, docs/performance.md).
 */
function limit(maxSize: number, setting: string): MiddlewareHandler {
  const counted = bodyLimit({
    maxSize,
    onError: () => {
      throw tooLarge(maxSize, setting);
    },
  });
  return async (c, next) => {
    const declared = c.req.header("content-length");
    if (declared === undefined || c.req.header("transfer-encoding") !== undefined) return counted(c, next);
    if (Number(declared) > maxSize) throw tooLarge(maxSize, setting);
    return next();
  };
}

/**
 * One middleware for every route under /v1 and /admin/v1: proto publishes get their own
 * limit, file and model uploads are counted as they stream (they may be far larger than
 * memory, see `limitStream`), everything else is JSON.
 */
export function bodyLimits(settings: Settings): MiddlewareHandler {
  const json = limit(settings.maxRequestBytes, "PLATFORM_MAX_REQUEST_BYTES");
  const protos = limit(settings.protos.maxBytes, "PLATFORM_MAX_PROTO_BYTES");
  return async (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD") return next();
    // Counted as they stream, never buffered (gateway/multipart.ts).
    if (c.req.method === "POST" && c.req.path === "/v1/files") return next();
    if (c.req.method === "POST" && /^\/admin\/v1\/protos\/[^/]+\/versions$/.test(c.req.path)) return protos(c, next);
    if (c.req.method === "POST" && /^\/admin\/v1\/models\/[^/]+\/upload$/.test(c.req.path)) return next();
    return json(c, next);
  };
}

/**
 * Passes a streamed body through, failing it with 413 past `max` bytes (the declared length is
 * checked first); `refusal`: the error instead of the setting's (a quota's).
 */
export function limitStream(
  declaredLength: string | undefined,
  max: number,
  setting: string,
  refusal: () => PlatformError = () => tooLarge(max, setting),
): Transform {
  if (declaredLength !== undefined && Number(declaredLength) > max) throw refusal();
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (seen > max) done(refusal());
      else done(null, chunk);
    },
  });
}

/**
 * Bytes per token assumed when the model's vocabulary is unknown (registered before
 * `max_token_bytes` was recorded, or not a GGUF): longer than the tokens of any vocabulary
 * we know, so the bound still never refuses a prompt that fits.
 */
export const FALLBACK_TOKEN_BYTES = 256;

export type PromptBound = { window: number; maxTokenBytes: number };

/** The window a replica of this endpoint will have, and the bytes its longest token decodes to at most. */
/** `summary`: the version's GGUF summary, or a checkpoint's (which knows its context but not its longest token). */
export function promptBound(
  framework: Framework,
  maxModelLen: number | undefined,
  summary: Pick<GgufSummary, "context_length" | "max_token_bytes"> | null | undefined,
): PromptBound | undefined {
  const trained = summary?.context_length ?? undefined;
  // The window a replica gets when the deployment sets none, as the engine's driver computes it.
  const cap = ENGINES[framework].defaultContextCap;
  const window = maxModelLen ?? (trained === undefined || cap === undefined ? trained : Math.min(trained, cap));
  if (window === undefined) return undefined;
  return { window, maxTokenBytes: summary?.max_token_bytes ?? FALLBACK_TOKEN_BYTES };
}

/**
 * Refuses a prompt that certainly overflows the window. Every token decodes to at
 * most `maxTokenBytes` bytes, so a text of B bytes takes at least ceil(B / maxTokenBytes)
 * tokens (a chat template only adds more); token ids count exactly. Together with the
 * completion's tokens (at least one) that must fit. Prompts under the bound may still
 * overflow: the worker's exact count answers those with the same error. `path`: where the
 * request holds these texts (`prompt[1]`), when not the whole of `param`.
 */
export function checkPromptBound(
  bound: PromptBound | undefined,
  texts: (string | number[])[],
  maxTokens: number | undefined,
  param: string,
  path = param,
): void {
  if (!bound) return;
  let bytes = 0;
  let ids = 0;
  for (const t of texts) {
    if (typeof t === "string") bytes += Buffer.byteLength(t, "utf8");
    else ids += t.length;
  }
  const tokens = Math.ceil(bytes / bound.maxTokenBytes) + ids;
  const completion = maxTokens ?? 1;
  if (tokens + completion > bound.window) {
    throw contextLengthExceeded({
      window: bound.window,
      promptTokens: tokens,
      completionTokens: completion,
      where: path,
      param,
      atLeast: bytes > 0,
    });
  }
}

/**
 * Embeddings: each input on its own must fit the window. A text is bounded as a prompt is (at
 * least ceil(bytes / maxTokenBytes) tokens); token ids are counted exactly. The 400 names the
 * input, its token count and the limit; the worker's exact count answers inputs under the bound.
 */
export function checkEmbeddingBound(bound: PromptBound | undefined, inputs: EmbeddingItem[]): void {
  if (!bound) return;
  inputs.forEach((input, i) => {
    const text = typeof input === "string";
    const tokens = text ? Math.ceil(Buffer.byteLength(input, "utf8") / bound.maxTokenBytes) : input.length;
    if (tokens > bound.window) throw embeddingInputTooLong(i, tokens, bound.window, text);
  });
}
