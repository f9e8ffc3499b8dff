/**
 * The HTTP side of the vLLM engine: completions, chats and embeddings against `vllm serve`'s
 * OpenAI-compatible API, text always streamed (SSE) so deltas and usage arrive as generated and a
 * cancelled request still reports what it used. vLLM's answers become the platform's errors
 * (vllm-protocol.ts maps the wire both ways), so both engines fail alike (docs/engines.md, "Requests").
 */
import type { z } from "zod";
import type { EmbeddingItem, TokenizeJob, Usage } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { type GenerationHooks, type TextOutput, type TextRequest, usage } from "./engine.ts";
import {
  EchoResponse,
  EmbeddingResponse,
  echoedPrompt,
  httpError,
  readVllmStream,
  Detokenized,
  Tokenized,
  TokenizeResponse,
  vllmEchoBody,
  vllmRequestBody,
} from "./vllm-protocol.ts";
/** A scrape of the worker waits for vLLM's metrics this long at most (Prometheus's default timeout is 10 s). */
const METRICS_TIMEOUT_MS = 3_000;

export class VllmClient {
  private readonly baseUrl: string;
  /** With the worker's secret (vLLM's --api-key, given as VLLM_API_KEY). */
  private readonly headers: Record<string, string>;
  private readonly servedName: string;
  private readonly describeDown: () => string;

  /** `describeDown`: why the server is not answering (its exit and last output), for `engine_unavailable`. */
  constructor(baseUrl: string, servedName: string, describeDown: () => string, apiKey?: string) {
    this.baseUrl = baseUrl;
    this.headers = { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };
    this.servedName = servedName;
    this.describeDown = describeDown;
  }

  /** One streamed request: /v1/completions for a prompt, /v1/chat/completions for a chat (vLLM applies the template). */
  async generate(request: TextRequest, hooks: GenerationHooks): Promise<TextOutput> {
    if (request.kind === "prompt" && request.params.echo) return this.generateEchoed(request, hooks);
    const api = request.kind === "prompt" ? "completions" : "chat";
    try {
      const res = await this.post(
        api === "completions" ? "/v1/completions" : "/v1/chat/completions",
        vllmRequestBody(request, request.adapter ? request.adapter.ref : this.servedName),
        hooks.signal,
      );
      if (!res.ok) throw await httpError(res, api, request.kind === "prompt" ? request.prompt : undefined);
      if (!res.body) throw new PlatformError(502, "engine_error", "vLLM sent no stream");
      return await readVllmStream(res.body, request, hooks);
    } catch (e) {
      // Aborted before the stream began (readVllmStream returns a started one's text itself).
      if (hooks.signal?.aborted) return { text: "", finish_reason: "cancelled", usage: usage(0, 0) };
      throw e instanceof PlatformError ? e : this.unavailable(e);
    }
  }

  /**
   * A prompt with `echo` (job.ts EchoedPrompt): first the prompt alone, scored by vLLM's echo
   * without generation (a non-streamed `echo: true, max_tokens: 0` completion, whose legacy
   * logprobs arrays hold exactly the prompt's tokens); then, unless max_tokens is 0, the generation
   * itself as any other request. Two requests rather than one `echo` with generation, because
   * vLLM's answer then runs prompt and generated text together (`text`, and the arrays), and a
   * token-id prompt's text is vLLM's detokenization, so the seam could not be found in the text;
   * vLLM's prefix cache makes the second prefill cheap.
   */
  private async generateEchoed(
    request: Extract<TextRequest, { kind: "prompt" }>,
    hooks: GenerationHooks,
  ): Promise<TextOutput> {
    const model = request.adapter ? request.adapter.ref : this.servedName;
    const p = request.params;
    let scored: z.infer<typeof EchoResponse>;
    try {
      const res = await this.post("/v1/completions", vllmEchoBody(request.prompt, p, model), hooks.signal);
      if (!res.ok) throw await httpError(res, "completions", request.prompt);
      const parsed = EchoResponse.safeParse(await res.json().catch(() => undefined));
      if (!parsed.success)
        throw new PlatformError(502, "engine_error", "vLLM answered an echo request with an unexpected body");
      scored = parsed.data;
    } catch (e) {
      if (hooks.signal?.aborted) return { text: "", finish_reason: "cancelled", usage: usage(0, 0) };
      throw e instanceof PlatformError ? e : this.unavailable(e);
    }
    // vLLM echoes the BOS token it put before a text prompt; token ids are evaluated as given.
    const added = typeof request.prompt === "string" ? await this.addedTokens() : 0;
    const echo = echoedPrompt(request.prompt, scored, added, p);
    if (p.max_tokens === 0)
      // vLLM samples (and counts) one token it does not return: the contract's max_tokens 0 generates none.
      return {
        text: "",
        finish_reason: "length",
        usage: usage(scored.usage.prompt_tokens, 0),
        ...(p.logprobs && { logprobs: [] }),
        echo,
      };
    const { echo: _echo, ...params } = p;
    const out = await this.generate({ ...request, params }, hooks);
    return out.finish_reason === "cancelled" ? out : { ...out, echo };
  }

  /**
   * How many special tokens vLLM's tokenizer puts before a text (Llama's BOS: 1; Qwen2: 0), learned
   * once from `/tokenize` with and without them. Unknown (an older vLLM without /tokenize, a
   * failure): 0, which leaves a BOS in the echo with a null score: sums and counts of scores are
   * unchanged, whereas dropping a real token would lose its score.
   */
  private added: number | undefined;
  private async addedTokens(): Promise<number> {
    if (this.added !== undefined) return this.added;
    const probe = async (add_special_tokens: boolean) => {
      const res = await this.post("/tokenize", { model: this.servedName, prompt: "Hello", add_special_tokens });
      const parsed = TokenizeResponse.safeParse(res.ok ? await res.json().catch(() => undefined) : undefined);
      return parsed.success ? parsed.data.tokens : undefined;
    };
    try {
      const [withSpecial, plain] = await Promise.all([probe(true), probe(false)]);
      if (!withSpecial || !plain) return 0;
      const at = withSpecial.findIndex((_, i) => plain.every((t, j) => withSpecial[i + j] === t));
      this.added = Math.max(at, 0);
      return this.added;
    } catch {
      return 0;
    }
  }

  async embed(inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    const res = await this.post("/v1/embeddings", { model: this.servedName, input: inputs, encoding_format: "float" });
    if (!res.ok) throw await httpError(res, "embeddings");
    const parsed = EmbeddingResponse.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success)
      throw new PlatformError(502, "engine_error", "vLLM answered /v1/embeddings with an unexpected body");
    const embeddings = [...parsed.data.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
    return { embeddings, usage: usage(parsed.data.usage.prompt_tokens, 0) };
  }

  /** vLLM's own /tokenize (a chat with the generation prompt, as a chat job renders it) or /detokenize. */
  async tokenize(input: TokenizeJob["input"]): Promise<{ tokens: number[]; text: string; max_model_len: number }> {
    const model = this.servedName;
    if ("tokens" in input) {
      const res = await this.post("/detokenize", { model, tokens: input.tokens });
      if (!res.ok) throw await httpError(res, "detokenize");
      const parsed = Detokenized.safeParse(await res.json().catch(() => undefined));
      if (!parsed.success)
        throw new PlatformError(502, "engine_error", "vLLM answered /detokenize with an unexpected body");
      // The window is only on /tokenize's answer: asked for with no text.
      const window = await this.tokenize({ prompt: "", add_special_tokens: false });
      return { tokens: input.tokens, text: parsed.data.prompt, max_model_len: window.max_model_len };
    }
    const body =
      "prompt" in input
        ? { model, prompt: input.prompt, add_special_tokens: input.add_special_tokens ?? true }
        : { model, messages: input.messages, tools: input.tools, add_generation_prompt: true };
    const res = await this.post("/tokenize", body);
    if (!res.ok) throw await httpError(res, "tokenize");
    const parsed = Tokenized.safeParse(await res.json().catch(() => undefined));
    if (!parsed.success)
      throw new PlatformError(502, "engine_error", "vLLM answered /tokenize with an unexpected body");
    return {
      tokens: parsed.data.tokens,
      text: "prompt" in input ? input.prompt : "",
      max_model_len: parsed.data.max_model_len,
    };
  }

  /**
   * Registers a LoRA adapter with the server under `name` (`POST /v1/load_lora_adapter`, which
   * needs VLLM_ALLOW_RUNTIME_LORA_UPDATING); one it already holds is not an error.
   */
  async loadAdapter(name: string, path: string): Promise<void> {
    const res = await this.post("/v1/load_lora_adapter", { lora_name: name, lora_path: path });
    if (res.ok) return;
    // vLLM's message may name the adapter's directory on this node: the client sees the adapter's name instead.
    const raw = await res.text().catch(() => "");
    const said = (() => {
      try {
        const body = JSON.parse(raw) as { error?: { message?: unknown }; message?: unknown };
        const message = body.error?.message ?? body.message;
        return typeof message === "string" ? message : raw;
      } catch {
        return raw;
      }
    })();
    const text = said.slice(0, 500).replaceAll(path, `<${name}>`);
    if (res.status === 400 && /already (been )?loaded/i.test(text)) return;
    throw new PlatformError(
      res.status === 400 || res.status === 404 ? 400 : 502,
      "adapter_load_failed",
      `vLLM refused to load adapter ${name}: ${text || `HTTP ${res.status}`}`,
      "adapter",
    );
  }

  /** Forgets a LoRA adapter (`POST /v1/unload_lora_adapter`); failures only cost memory, so they are ignored. */
  async unloadAdapter(name: string): Promise<void> {
    await this.post("/v1/unload_lora_adapter", { lora_name: name }).catch(() => undefined);
  }

  /** vLLM's own Prometheus metrics (its /metrics), as text; bounded in time, since a scrape waits on it. */
  async metrics(): Promise<string> {
    const res = await fetch(`${this.baseUrl}/metrics`, { signal: AbortSignal.timeout(METRICS_TIMEOUT_MS) });
    if (!res.ok) throw new Error(`vLLM answered /metrics with ${res.status}`);
    return res.text();
  }

  private async post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
    try {
      return await fetch(this.baseUrl + path, {
        method: "POST",
        headers: this.headers,
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
