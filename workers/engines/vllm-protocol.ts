/**
 * vLLM's wire, both ways: the JSON bodies the platform sends to `vllm serve`'s OpenAI-compatible
 * API (`vllmRequestBody`, `vllmEchoBody`), and the schemas and readers of what it answers (the SSE
 * stream, echo scores, embeddings, errors), mapped to the platform's contract and errors. Pure, so
 * the mapping is tested without a server; vllm-client.ts is the transport that uses it
 * (docs/engines.md, "Chat features on vLLM", "Echo on vLLM").
 */
import { randomUUID } from "node:crypto";
import { EventSourceParserStream } from "eventsource-parser/stream";
import { z } from "zod";
import type {
  ChatMessage,
  EchoedPrompt,
  FinishReason,
  Prompt,
  PromptTokenLogprob,
  ResponseFormat,
  SamplingParams,
  TokenLogprob,
  ToolCall,
} from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { type ChatTools, type GenerationHooks, type TextOutput, type TextRequest, usage } from "./engine.ts";

/** Sampling fields vLLM takes under the contract's own names and meanings. */
const PASSED = [
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
] as const satisfies readonly (keyof SamplingParams)[];

/** The JSON body of a text request (pure, so the mapping is tested without a server). */
export function vllmRequestBody(request: TextRequest, servedName: string): Record<string, unknown> {
  const p = request.params;
  const chat = request.kind === "chat";
  return {
    model: servedName,
    ...(chat
      ? { messages: request.messages.map(chatMessage), ...(request.tools && tools(request.tools)) }
      : { prompt: request.prompt }),
    // null, not absent: /v1/completions defaults to 16 tokens, and the contract says "until the window ends".
    max_tokens: p.max_tokens ?? null,
    // Only the fields that were given: absent ones take vLLM's defaults (the model's generation_config.json).
    ...Object.fromEntries(PASSED.filter((k) => p[k] !== undefined).map((k) => [k, p[k]])),
    ...(p.response_format && { response_format: responseFormat(p.response_format) }),
    // /v1/completions keeps OpenAI's legacy form: an integer count of alternatives.
    ...(p.logprobs &&
      (chat ? { logprobs: true, top_logprobs: p.top_logprobs ?? 0 } : { logprobs: p.top_logprobs ?? 0 })),
    // vLLM's priority scheduling (vllm-flags.ts: --scheduling-policy priority) orders its waiting requests by it.
    ...(request.priority !== undefined && { priority: request.priority }),
    stream: true,
    // continuous_usage_stats (vLLM's own) puts usage on every chunk, so a cancelled generation still reports what it used.
    stream_options: { include_usage: true, continuous_usage_stats: true },
  };
}

/**
 * The body that scores a prompt: vLLM's echo without generation (`echo` with `max_tokens: 0`; it
 * sets prompt_logprobs to `logprobs`). Not streamed: the answer is one piece. Sampling fields are
 * left out, since nothing sampled is returned.
 */
export function vllmEchoBody(prompt: Prompt, p: SamplingParams, model: string): Record<string, unknown> {
  return { model, prompt, echo: true, max_tokens: 0, ...(p.logprobs && { logprobs: p.top_logprobs ?? 0 }) };
}

/**
 * The contract's echo from vLLM's answer to `vllmEchoBody`: the legacy arrays hold the prompt's
 * tokens (usage.prompt_tokens of them), the first with null; the `added` special tokens vLLM put
 * before a text prompt are dropped (job.ts: BOS is no part of the prompt), so a text's first token
 * is the one scored given BOS. A text prompt's text is as sent; token ids' is vLLM's detokenization.
 */
export function echoedPrompt(
  prompt: Prompt,
  body: z.infer<typeof EchoResponse>,
  added: number,
  p: SamplingParams,
): EchoedPrompt {
  const choice = body.choices[0];
  if (!choice) throw new PlatformError(502, "engine_error", "vLLM answered an echo request with no choice");
  const text = typeof prompt === "string" ? prompt : choice.text;
  if (!p.logprobs) return { text };
  const lp = choice.logprobs;
  if (!lp || lp.tokens.length !== body.usage.prompt_tokens || lp.token_logprobs.length !== lp.tokens.length)
    throw new PlatformError(502, "engine_error", "vLLM's echo did not score every prompt token");
  const top = p.top_logprobs ?? 0;
  const logprobs: PromptTokenLogprob[] = lp.tokens.slice(added).map((token, i) => {
    const value = lp.token_logprobs[i + added] ?? null;
    const alternatives = lp.top_logprobs?.[i + added] ?? null;
    return {
      ...candidate(token, 0),
      logprob: value,
      // vLLM's map holds the prompt token beside the `top` best (top + 1 entries): keep the best `top`.
      top_logprobs:
        value === null || alternatives === null
          ? null
          : Object.entries(alternatives)
              .sort(([, a], [, b]) => b - a)
              .slice(0, top)
              .map(([t, v]) => candidate(t, v)),
    };
  });
  return { text, logprobs };
}

function chatMessage(m: ChatMessage): Record<string, unknown> {
  const calls = m.tool_calls !== undefined && m.tool_calls.length > 0;
  return {
    role: m.role,
    // As OpenAI sends it: an assistant turn that only called tools has null content, which chat templates test for.
    content: calls && m.content === "" ? null : m.content,
    ...(calls && { tool_calls: m.tool_calls }),
    ...(m.tool_call_id !== undefined && { tool_call_id: m.tool_call_id }),
  };
}

function tools(t: ChatTools): Record<string, unknown> {
  return {
    tools: t.tools,
    // Older vLLM defaults to "none" even when tools are given; OpenAI's default is "auto".
    tool_choice: t.tool_choice ?? "auto",
    ...(t.parallel_tool_calls !== undefined && { parallel_tool_calls: t.parallel_tool_calls }),
  };
}

/** vLLM constrains nothing for a json_schema without a schema; the contract still promises JSON. */
function responseFormat(f: ResponseFormat): ResponseFormat {
  return f.type === "json_schema" && f.json_schema.schema === undefined ? { type: "json_object" } : f;
}

/**
 * Reads a streamed answer: text deltas (with their tokens' logprobs) go to `hooks.onText` as they
 * arrive; tool calls, streamed as index-keyed fragments, are put together. Aborting `hooks.signal`
 * ends it with what was generated so far, finish_reason "cancelled".
 */
export async function readVllmStream(
  body: ReadableStream<Uint8Array>,
  request: TextRequest,
  hooks: GenerationHooks,
): Promise<TextOutput> {
  const wantLogprobs = request.params.logprobs === true;
  const top = request.params.top_logprobs ?? 0;
  let text = "";
  let used = usage(0, 0);
  let finish: string | undefined;
  // vLLM's own field: the stop string (or stop token id) that ended the choice.
  let stopReason: string | number | undefined;
  const calls = new Map<number, { id?: string; name: string; arguments: string }>();
  const logprobs: TokenLogprob[] = [];
  const output = (finish_reason: FinishReason): TextOutput => {
    let toolCalls: ToolCall[] = [...calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, c]) => ({
        id: c.id ?? `call_${randomUUID()}`,
        type: "function",
        function: { name: c.name, arguments: c.arguments },
      }));
    // vLLM takes parallel_tool_calls but leaves the number of calls to the model; the contract says at most one.
    if (request.kind === "chat" && request.tools?.parallel_tool_calls === false) toolCalls = toolCalls.slice(0, 1);
    return {
      text,
      finish_reason,
      usage: used,
      ...(finish_reason === "stop" && typeof stopReason === "string" && { stop_sequence: stopReason }),
      ...(toolCalls.length > 0 && { tool_calls: toolCalls }),
      ...(wantLogprobs && { logprobs }),
    };
  };
  try {
    // Leaving the loop (at [DONE], on an error) cancels the stream and so the response body.
    for await (const { data } of body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream())) {
      if (data === "[DONE]") break;
      const chunk = StreamChunk.safeParse(safeJson(data));
      if (!chunk.success)
        throw new PlatformError(502, "engine_error", `vLLM sent an unexpected stream event: ${data.slice(0, 200)}`);
      const { error, usage: u, choices } = chunk.data;
      if (error) throw new PlatformError(error.code === 400 ? 400 : 500, "engine_error", error.message);
      if (u) used = usage(u.prompt_tokens, u.completion_tokens ?? 0);
      for (const choice of choices) {
        const piece = choice.text ?? choice.delta?.content ?? "";
        const pieceLogprobs = tokenLogprobs(choice.logprobs, top);
        // A token that ends inside a character has no text yet, but its logprob is still reported.
        if (piece !== "" || pieceLogprobs.length > 0) {
          text += piece;
          logprobs.push(...pieceLogprobs);
          hooks.onText?.(piece, wantLogprobs ? pieceLogprobs : undefined);
        }
        for (const d of choice.delta?.tool_calls ?? []) {
          const call = calls.get(d.index) ?? { name: "", arguments: "" };
          calls.set(d.index, call);
          if (d.id) call.id = d.id;
          if (d.function?.name) call.name = d.function.name;
          call.arguments += d.function?.arguments ?? "";
        }
        if (choice.finish_reason) finish = choice.finish_reason;
        if (choice.stop_reason != null) stopReason = choice.stop_reason;
      }
    }
  } catch (e) {
    if (!hooks.signal?.aborted) throw e;
  }
  if (hooks.signal?.aborted) return output("cancelled");
  if (finish === undefined)
    throw new PlatformError(502, "engine_error", "vLLM ended the stream without a finish reason");
  const max = request.params.max_tokens;
  return output(finishReason(finish, calls.size > 0, max !== undefined && used.completion_tokens >= max));
}

/** `capped`: the completion reached max_tokens. */
function finishReason(reason: string, calledTools: boolean, capped: boolean): FinishReason {
  if (reason === "length") return "length";
  // vLLM aborts a request itself only when it is shutting down or failing.
  if (reason === "abort") throw new PlatformError(503, "engine_unavailable", "vLLM aborted the generation", null, 5);
  if (!calledTools) return "stop";
  // A stream that sent tool calls ends with "tool_calls" even when max_tokens cut the last one short,
  // so a completion of max_tokens is taken as cut (rarely, its last allowed token ended it).
  // vLLM says "stop" after a named tool_choice; the contract ties tool calls to "tool_calls".
  return capped ? "length" : "tool_calls";
}

/** A chunk's logprobs in the chat shape, from either of vLLM's shapes. */
function tokenLogprobs(lp: z.infer<typeof ChoiceLogprobs> | null | undefined, top: number): TokenLogprob[] {
  if (!lp) return [];
  if ("tokens" in lp) {
    // The legacy map holds the sampled token beside the `top` best (top + 1 entries): keep the best `top`.
    return lp.tokens.map((token, i) => ({
      ...candidate(token, lp.token_logprobs[i] ?? MIN_LOGPROB),
      top_logprobs: Object.entries(lp.top_logprobs?.[i] ?? {})
        .sort(([, a], [, b]) => b - a)
        .slice(0, top)
        .map(([t, logprob]) => candidate(t, logprob)),
    }));
  }
  return (lp.content ?? []).map((c) => ({ ...c, top_logprobs: c.top_logprobs ?? [] }));
}

/** vLLM's own stand-in for -inf, which JSON cannot carry. */
const MIN_LOGPROB = -9999;

function candidate(token: string, logprob: number): TokenLogprob["top_logprobs"][number] {
  return { token, logprob, bytes: [...new TextEncoder().encode(token)] };
}

const UsageJson = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative().nullish(),
});

const Candidate = z.object({
  token: z.string(),
  logprob: z.number(),
  bytes: z
    .array(z.number().int())
    .nullish()
    .transform((b) => b ?? null),
});

/** /v1/completions' legacy shape first: the chat shape's only field is optional, so it would match anything. */
const ChoiceLogprobs = z.union([
  z.object({
    tokens: z.array(z.string()),
    token_logprobs: z.array(z.number().nullable()),
    top_logprobs: z.array(z.record(z.string(), z.number()).nullable()).nullish(),
  }),
  z.object({ content: z.array(Candidate.extend({ top_logprobs: z.array(Candidate).nullish() })).nullish() }),
]);

/** A fragment of a streamed tool call: the first of an index names it, the next ones extend its arguments. */
const ToolCallDelta = z.object({
  index: z.number().int().min(0).max(127),
  id: z.string().nullish(),
  function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
});

const StreamChunk = z.object({
  choices: z
    .array(
      z.object({
        text: z.string().nullish(),
        delta: z.object({ content: z.string().nullish(), tool_calls: z.array(ToolCallDelta).nullish() }).nullish(),
        logprobs: ChoiceLogprobs.nullish(),
        finish_reason: z.string().nullish(),
        stop_reason: z.union([z.string(), z.number()]).nullish(),
      }),
    )
    .default([]),
  usage: UsageJson.nullish(),
  error: z.object({ message: z.string(), code: z.number().optional() }).optional(),
});

/** A non-streamed /v1/completions answer to `vllmEchoBody` (CompletionResponse): what echo needs of it. */
export const EchoResponse = z.object({
  choices: z.array(
    z.object({
      text: z.string(),
      logprobs: z
        .object({
          tokens: z.array(z.string()),
          token_logprobs: z.array(z.number().nullable()),
          top_logprobs: z.array(z.record(z.string(), z.number()).nullable()).nullish(),
        })
        .nullish(),
    }),
  ),
  usage: UsageJson,
});

export const TokenizeResponse = z.object({ tokens: z.array(z.number().int()) });
/** What the tokenize job reads of vLLM's /tokenize and /detokenize. */
export const Tokenized = TokenizeResponse.extend({ max_model_len: z.number().int().positive() });
export const Detokenized = z.object({ prompt: z.string() });

export const EmbeddingResponse = z.object({
  data: z.array(z.object({ index: z.number().int(), embedding: z.array(z.number()) })),
  usage: UsageJson,
});

/** vLLM has used both `{error: {...}}` (current) and a flat `{object: "error", message}` (older releases). */
const ErrorBody = z.union([
  z.object({ error: z.object({ message: z.string() }) }).transform((b) => b.error.message),
  z.object({ message: z.string() }).transform((b) => b.message),
]);

const CONTEXT_OVERFLOW = /maximum context length|maximum model length|max_model_len/i;
/** vLLM names the largest id of a prompt past its tokenizer's vocabulary. */
const OUT_OF_VOCABULARY = /token id (\d+) is out of vocabulary/i;
const NO_CHAT_TEMPLATE = /chat template/i;
const UNSUPPORTED_API = /does not support .*API/i;

/** `prompt`: the completion's, so that a token id vLLM refuses is named by its place, as llama.cpp names it. */
export async function httpError(
  res: Response,
  api: "completions" | "chat" | "embeddings" | "tokenize" | "detokenize",
  prompt?: Prompt,
): Promise<PlatformError> {
  const raw = await res.text().catch(() => "");
  const parsed = ErrorBody.safeParse(safeJson(raw));
  const message = parsed.success ? parsed.data : raw.slice(0, 500) || `HTTP ${res.status}`;
  const unknownId = Number(OUT_OF_VOCABULARY.exec(message)?.[1]);
  const at = Array.isArray(prompt) ? prompt.indexOf(unknownId) : -1;
  if (res.status === 400 && at >= 0)
    return new PlatformError(
      400,
      "invalid_request",
      `prompt[${at}]: token ${unknownId} is not in this model's vocabulary`,
      "prompt",
    );
  if (res.status === 400 && CONTEXT_OVERFLOW.test(message)) {
    return new PlatformError(400, "context_length_exceeded", message, "messages");
  }
  if (res.status === 400 && api === "chat" && NO_CHAT_TEMPLATE.test(message)) {
    return new PlatformError(400, "no_chat_template", message, "messages");
  }
  if (UNSUPPORTED_API.test(message) || res.status === 404 || res.status === 405 || res.status === 501) {
    // A generative model asked for embeddings, or an embedding model for text (vLLM answers 400 or 501 by version).
    const what = api === "embeddings" ? "embeddings" : "text generation";
    return new PlatformError(
      400,
      "unsupported_by_model",
      `this model does not serve ${what}: ${message}`,
      api === "embeddings" ? "input" : null,
    );
  }
  if (res.status === 400 || res.status === 422) return new PlatformError(400, "invalid_request", message);
  if (res.status === 429 || res.status === 503) return new PlatformError(503, "engine_busy", message, null, 1);
  return new PlatformError(500, "engine_error", `vLLM answered HTTP ${res.status}: ${message}`);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
