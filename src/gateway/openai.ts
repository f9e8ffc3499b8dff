/** The OpenAI-compatible routes and the seed's generate route, all under /v1. */
import { type Context, Hono } from "hono";
import { endpointQueueName } from "../contracts/engines.ts";
import type { EmbeddingResult, TokenLogprob } from "../contracts/job.ts";
import { PlatformError, publicJobError } from "../errors.ts";
import type { GatewayEnv } from "./env.ts";
import { parseBody } from "./errors.ts";
import { checkEmbeddingBound, checkPromptBound } from "./limits.ts";
import { meterOf, reservationOf } from "./ratelimit.ts";
import { type Caller, type Router, requireTask } from "./routing.ts";
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest, embeddingItems, GenerateRequest, toMessages, toParams } from "./schemas.ts";
import { publicFinishReason, serveText, type TextFormat, type TextRequestContext } from "./serve-text.ts";
import { onClientGone } from "./client-gone.ts";

const chatFormat: TextFormat = {
  idPrefix: "chatcmpl-",
  response: (b, results, usage) => ({
    id: b.id,
    object: "chat.completion",
    created: b.created,
    model: b.model,
    choices: results.map((r, index) => ({
      index,
      message: { role: "assistant", content: r.tool_calls && r.text === "" ? null : r.text, ...(r.tool_calls ? { tool_calls: r.tool_calls } : {}) },
      logprobs: r.logprobs ? { content: r.logprobs } : null,
      finish_reason: publicFinishReason(r.finish_reason),
    })),
    usage,
  }),
  chunk: (b, index, d) => ({
    id: b.id,
    object: "chat.completion.chunk",
    created: b.created,
    model: b.model,
    choices: [
      {
        index,
        delta: d.first
          ? { role: "assistant", content: "" }
          : {
              ...(d.text !== undefined ? { content: d.text } : {}),
              ...(d.tool_calls ? { tool_calls: d.tool_calls.map((call, i) => ({ index: i, ...call })) } : {}),
            },
        logprobs: d.logprobs ? { content: d.logprobs } : null,
        finish_reason: d.finish ? publicFinishReason(d.finish) : null,
      },
    ],
  }),
  usageChunk: (b, usage) => ({ id: b.id, object: "chat.completion.chunk", created: b.created, model: b.model, choices: [], usage }),
};

/** The legacy completions shape of logprobs; offsets count characters from `offset`, where the text began. */
function legacyLogprobs(logprobs: TokenLogprob[] | undefined, offset = 0) {
  if (!logprobs) return null;
  const text_offset: number[] = [];
  for (const lp of logprobs) {
    text_offset.push(offset);
    offset += lp.token.length;
  }
  return {
    tokens: logprobs.map((lp) => lp.token),
    token_logprobs: logprobs.map((lp) => lp.logprob),
    top_logprobs: logprobs.map((lp) => Object.fromEntries(lp.top_logprobs.map((t) => [t.token, t.logprob]))),
    text_offset,
  };
}

const completionFormat: TextFormat = {
  idPrefix: "cmpl-",
  response: (b, results, usage) => ({
    id: b.id,
    object: "text_completion",
    created: b.created,
    model: b.model,
    choices: results.map((r, index) => ({ index, text: r.text, logprobs: legacyLogprobs(r.logprobs), finish_reason: publicFinishReason(r.finish_reason) })),
    usage,
  }),
  chunk: (b, index, d) => ({
    id: b.id,
    object: "text_completion",
    created: b.created,
    model: b.model,
    choices: [{ index, text: d.text ?? "", logprobs: legacyLogprobs(d.logprobs, d.offset), finish_reason: d.finish ? publicFinishReason(d.finish) : null }],
  }),
  usageChunk: (b, usage) => ({ id: b.id, object: "text_completion", created: b.created, model: b.model, choices: [], usage }),
};

/** The seed leaves generate's response open; this shape is documented in the README. One choice: n is refused there. */
const generateFormat: TextFormat = {
  idPrefix: "gen-",
  response: (b, [r], usage) => ({
    id: b.id,
    object: "generation",
    created: b.created,
    model: b.model,
    version: b.version,
    output: r?.text ?? "",
    finish_reason: publicFinishReason(r?.finish_reason ?? "stop"),
    ...(r?.logprobs ? { logprobs: r.logprobs } : {}),
    usage,
  }),
  chunk: (b, _index, d) => ({
    id: b.id,
    object: "generation.chunk",
    created: b.created,
    model: b.model,
    version: b.version,
    delta: d.text ?? "",
    ...(d.logprobs ? { logprobs: d.logprobs } : {}),
    finish_reason: d.finish ? publicFinishReason(d.finish) : null,
  }),
  usageChunk: (b, usage) => ({ id: b.id, object: "generation.chunk", created: b.created, model: b.model, version: b.version, delta: "", finish_reason: null, usage }),
};

export function openAiRoutes(router: Router, ctx: TextRequestContext) {
  const app = new Hono<GatewayEnv>();
  /** Routing, remembered for metrics: an error from here on counts under this endpoint and version. */
  const route = async (c: Context<GatewayEnv>, model: string) => {
    const t = await router.resolve(model, callerOf(c));
    ctx.metrics.routed(c.req.raw, { model_name: t.name, version: t.version });
    return t;
  };

  app.post("/chat/completions", async (c) => {
    const body = await parseBody(c, ChatCompletionRequest);
    const t = await route(c, body.model);
    requireTask(t, "generate");
    const messages = toMessages(body.messages);
    const params = toParams(body);
    checkPromptBound(t.bound, messages.map((m) => m.content), params.max_tokens, "messages");
    return serveText(
      c,
      ctx,
      chatFormat,
      {
        kind: "chat",
        request_id: c.get("requestId"),
        model: t.model,
        version: t.version,
        messages,
        params,
        ...(body.tools?.length ? { tools: body.tools, tool_choice: body.tool_choice ?? undefined, parallel_tool_calls: body.parallel_tool_calls ?? undefined } : {}),
      },
      { stream: body.stream ?? false, includeUsage: body.stream_options?.include_usage ?? false, label: body.model, target: t, n: body.n ?? 1 },
    );
  });

  app.post("/completions", async (c) => {
    const body = await parseBody(c, CompletionRequest);
    const t = await route(c, body.model);
    requireTask(t, "generate");
    const prompt = typeof body.prompt === "string" ? body.prompt : (body.prompt[0] as string);
    const params = toParams(body);
    checkPromptBound(t.bound, [prompt], params.max_tokens, "prompt");
    return serveText(
      c,
      ctx,
      completionFormat,
      { kind: "completion", request_id: c.get("requestId"), model: t.model, version: t.version, prompt, params },
      { stream: body.stream ?? false, includeUsage: body.stream_options?.include_usage ?? false, label: body.model, target: t, n: body.n ?? 1 },
    );
  });

  app.post("/inference/:model/generate", async (c) => {
    const body = await parseBody(c, GenerateRequest);
    const name = c.req.param("model");
    const t = await route(c, name);
    requireTask(t, "generate");
    const params = toParams(body);
    checkPromptBound(t.bound, [body.prompt], params.max_tokens, "prompt");
    return serveText(
      c,
      ctx,
      generateFormat,
      { kind: "generate", request_id: c.get("requestId"), model: t.model, version: t.version, prompt: body.prompt, params },
      { stream: body.stream ?? false, includeUsage: body.stream_options?.include_usage ?? false, label: name, target: t },
    );
  });

  app.post("/embeddings", async (c) => {
    const startedAt = performance.now();
    const body = await parseBody(c, EmbeddingRequest);
    const t = await route(c, body.model);
    requireTask(t, "embed");
    const input = embeddingItems(body.input);
    checkEmbeddingBound(t.bound, input);
    c.header("x-model-version", t.version);
    const submission = { kind: "embedding" as const, request_id: c.get("requestId"), model: t.model, version: t.version, input };
    const meter = meterOf(c);
    await meter?.admit({ model: t.name, version: t.version }, reservationOf(submission));
    const limits = ctx.admit ? await ctx.admit(t.endpoint) : undefined;
    const handle = await ctx.submit(submission, { queueWaitMs: limits?.maxQueueWaitMs, queue: endpointQueueName(t.endpoint) });
    onClientGone(c, () => void handle.cancel());
    let result: EmbeddingResult | undefined;
    for await (const event of handle.events) {
      if (event.type === "error") throw publicJobError(event.error);
      if (event.type === "done" && event.result.type === "embedding") result = event.result;
    }
    if (!result) throw new PlatformError(500, "internal_error", "worker sent no embeddings");
    const e2eSeconds = (performance.now() - startedAt) / 1000;
    ctx.metrics.answered({ model_name: t.name, version: t.version }, "online", "embedding", { usage: result.usage, finish_reason: "stop", e2eSeconds, queuedMs: result.queued_ms });
    meter?.complete({ prompt_tokens: result.usage.prompt_tokens, completion_tokens: 0 });
    const base64 = body.encoding_format === "base64";
    return c.json({
      object: "list",
      data: result.embeddings.map((vector, index) => ({
        object: "embedding",
        index,
        embedding: base64 ? Buffer.from(new Float32Array(vector).buffer).toString("base64") : vector,
      })),
      model: body.model,
      usage: { prompt_tokens: result.usage.prompt_tokens, total_tokens: result.usage.prompt_tokens },
    });
  });

  app.get("/models", async (c) => {
    const endpoints = await router.endpoints();
    return c.json({
      object: "list",
      // A/B variants are versions of an endpoint, not models of their own: `name@version` reaches them.
      data: endpoints.filter((e) => !e.variant_of).map((e) => ({ id: e.name, object: "model", created: Math.floor(e.created / 1000), owned_by: "platform" })),
    });
  });

  app.get("/models/:id", async (c) => {
    const t = await router.resolve(c.req.param("id"));
    return c.json({ id: c.req.param("id"), object: "model", created: Math.floor(t.endpoint.created / 1000), owned_by: "platform" });
  });

  return app;
}

/** The caller as sticky A/B tests see it. */
function callerOf(c: Context<GatewayEnv>): Caller {
  return { keyId: c.get("apiKey")?.id, header: (name) => c.req.header(name) };
}
