/**
 * The HTTP side of the vLLM engine: completions, chats and embeddings against `vllm serve`'s
 * OpenAI-compatible API, text always streamed (SSE) so deltas and usage arrive as generated and a
 * cancelled request still reports what it used. vLLM's answers become the platform's errors here,
 * so both engines fail alike (docs/engines.md, "Requests").
 */
import { z } from "zod";
import type { FinishReason, SamplingParams, Usage } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/errors.ts";
import { type GenerationHooks, type TextOutput, type TextRequest, usage } from "./engine.ts";

export class VllmClient {
  private readonly baseUrl: string;
  private readonly servedName: string;
  private readonly describeDown: () => string;

  /** `describeDown`: why the server is not answering (its exit and last output), for `engine_unavailable`. */
  constructor(baseUrl: string, servedName: string, describeDown: () => string) {
    this.baseUrl = baseUrl;
    this.servedName = servedName;
    this.describeDown = describeDown;
  }

  /** One streamed request: /v1/completions for a prompt, /v1/chat/completions for a chat (vLLM applies the template). */
  async generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    const body = {
      model: this.servedName,
      ...(request.kind === "prompt" ? { prompt: request.prompt } : { messages: request.messages }),
      ...sampling(request.params),
      stream: true,
      // continuous_usage_stats (vLLM's own) puts usage on every chunk, so a cancelled generation still reports what it used.
      stream_options: { include_usage: true, continuous_usage_stats: true },
    };
    let text = "";
    let used = usage(0, 0);
    let finish: string | undefined;
    try {
      const res = await this.post(request.kind === "prompt" ? "/v1/completions" : "/v1/chat/completions", body, hooks.signal);
      if (!res.ok) throw await httpError(res, request.kind === "prompt" ? "completions" : "chat");
      if (!res.body) throw new PlatformError(502, "engine_error", "vLLM sent no stream");
      for await (const data of sseData(res.body)) {
        if (data === "[DONE]") break;
        const chunk = StreamChunk.safeParse(safeJson(data));
        if (!chunk.success) throw new PlatformError(502, "engine_error", `vLLM sent an unexpected stream event: ${data.slice(0, 200)}`);
        const { error, usage: u, choices } = chunk.data;
        if (error) throw new PlatformError(error.code === 400 ? 400 : 500, "engine_error", error.message);
        if (u) used = usage(u.prompt_tokens, u.completion_tokens ?? 0);
        for (const choice of choices) {
          const piece = choice.text ?? choice.delta?.content ?? "";
          if (piece !== "") {
            text += piece;
            hooks.onText?.(piece);
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    } catch (e) {
      if (hooks.signal?.aborted) return { text, finish_reason: "cancelled", usage: used };
      throw e instanceof PlatformError ? e : this.unavailable(e);
    }
    if (hooks.signal?.aborted) return { text, finish_reason: "cancelled", usage: used };
    if (finish === undefined) throw new PlatformError(502, "engine_error", "vLLM ended the stream without a finish reason");
    return { text, finish_reason: finishReason(finish), usage: used };
  }

  async embed(inputs: string[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    const res = await this.post("/v1/embeddings", { model: this.servedName, input: inputs, encoding_format: "float" });
    if (!res.ok) throw await httpError(res, "embeddings");
    const parsed = EmbeddingResponse.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success) throw new PlatformError(502, "engine_error", "vLLM answered /v1/embeddings with an unexpected body");
    const embeddings = [...parsed.data.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
    return { embeddings, usage: usage(parsed.data.usage.prompt_tokens, 0) };
  }

  private async post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
    try {
      return await fetch(this.baseUrl + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal,
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw this.unavailable(e);
    }
  }

  private unavailable(e: unknown): PlatformError {
    const cause = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
    return new PlatformError(503, "engine_unavailable", `${this.describeDown()} (${cause})`, null, 5);
  }
}

/** Only the fields that were given: absent ones take vLLM's defaults (the model's generation_config.json). */
function sampling(p: SamplingParams): Record<string, unknown> {
  return {
    // null, not absent: /v1/completions defaults to 16 tokens, and the contract says "until the window ends".
    max_tokens: p.max_tokens ?? null,
    ...(p.temperature !== undefined && { temperature: p.temperature }),
    ...(p.top_p !== undefined && { top_p: p.top_p }),
    ...(p.seed !== undefined && { seed: p.seed }),
    ...(p.stop !== undefined && { stop: p.stop }),
    ...(p.frequency_penalty !== undefined && { frequency_penalty: p.frequency_penalty }),
    ...(p.presence_penalty !== undefined && { presence_penalty: p.presence_penalty }),
  };
}

function finishReason(reason: string): FinishReason {
  if (reason === "length") return "length";
  // vLLM aborts a request itself only when it is shutting down or failing.
  if (reason === "abort") throw new PlatformError(503, "engine_unavailable", "vLLM aborted the generation", null, 5);
  return "stop";
}

const UsageJson = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative().nullish(),
});

const StreamChunk = z.object({
  choices: z
    .array(
      z.object({
        text: z.string().nullish(),
        delta: z.object({ content: z.string().nullish() }).nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .default([]),
  usage: UsageJson.nullish(),
  error: z.object({ message: z.string(), code: z.number().optional() }).optional(),
});

const EmbeddingResponse = z.object({
  data: z.array(z.object({ index: z.number().int(), embedding: z.array(z.number()) })),
  usage: UsageJson,
});

/** vLLM has used both `{error: {...}}` (current) and a flat `{object: "error", message}` (older releases). */
const ErrorBody = z.union([
  z.object({ error: z.object({ message: z.string() }) }).transform((b) => b.error.message),
  z.object({ message: z.string() }).transform((b) => b.message),
]);

const CONTEXT_OVERFLOW = /maximum context length|maximum model length|max_model_len/i;
const NO_CHAT_TEMPLATE = /chat template/i;
const UNSUPPORTED_API = /does not support .*API/i;

async function httpError(res: Response, api: "completions" | "chat" | "embeddings"): Promise<PlatformError> {
  const raw = await res.text().catch(() => "");
  const parsed = ErrorBody.safeParse(safeJson(raw));
  const message = parsed.success ? parsed.data : raw.slice(0, 500) || `HTTP ${res.status}`;
  if (res.status === 400 && CONTEXT_OVERFLOW.test(message)) {
    return new PlatformError(400, "context_length_exceeded", message, "messages");
  }
  if (res.status === 400 && api === "chat" && NO_CHAT_TEMPLATE.test(message)) {
    return new PlatformError(400, "no_chat_template", message, "messages");
  }
  if (UNSUPPORTED_API.test(message) || res.status === 404 || res.status === 405 || res.status === 501) {
    // A generative model asked for embeddings, or an embedding model for text (vLLM answers 400 or 501 by version).
    const what = api === "embeddings" ? "embeddings" : "text generation";
    return new PlatformError(400, "unsupported_by_model", `this model does not serve ${what}: ${message}`, api === "embeddings" ? "input" : null);
  }
  if (res.status === 400 || res.status === 422) return new PlatformError(400, "invalid_request", message);
  if (res.status === 429 || res.status === 503) return new PlatformError(503, "engine_busy", message, null, 1);
  return new PlatformError(500, "engine_error", `vLLM answered HTTP ${res.status}: ${message}`);
}

/** The `data` of each server-sent event, in order. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data: string[] = [];
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += value;
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (data.length > 0) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
      }
    }
    if (data.length > 0) yield data.join("\n");
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
