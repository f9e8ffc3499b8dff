/** The OpenAI-compatible routes and the platform's own generate route, all under /v1 (the protocol: src/contracts/openai.ts). */
import { type Context, Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import { checkSchemaLimits, type SchemaLimits } from "../../contracts/schema-limits.ts";
import {
  ChatCompletionRequest,
  chatFormat,
  CompletionRequest,
  completionFormat,
  EmbeddingRequest,
  embeddingItems,
  embeddingList,
  GenerateRequest,
  generateFormat,
  type ModelList,
  modelEntry,
  promptsOf,
  toMessages,
  toParams,
} from "../../contracts/openai.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";
import { checkEmbeddingBound, checkPromptBound } from "../input-bounds.ts";
import { type Caller, type Router, requireTask, type Target } from "../routing.ts";
import { serve, type ServeContext } from "../serve.ts";
import { serveText } from "../serve-text.ts";

/** `schemaLimits`: the bounds on a request's JSON schemas, checked before anything is routed or queued. */
export function openAiRoutes(router: Router, ctx: ServeContext, schemaLimits: SchemaLimits) {
  const app = new Hono<GatewayEnv>();
  /** Routing, remembered for metrics: an error from here on counts under this endpoint and version. */
  const route = async (c: Context<GatewayEnv>, model: string) => {
    const t = await router.resolve(model, callerOf(c));
    ctx.metrics.routed(c.req.raw, { model_name: t.label, version: t.version });
    return t;
  };
  /** The adapter a `<endpoint>:<adapter>` model names, on the job (absent: the base). */
  const adapterOf = (t: Target) => (t.adapter ? { adapter: t.adapter } : {});

  app.post("/chat/completions", async (c) => {
    const body = await parseBody(c, ChatCompletionRequest);
    checkSchemaLimits(body, schemaLimits);
    const t = await route(c, body.model);
    requireTask(t, "generate");
    const messages = toMessages(body.messages);
    const params = toParams(body);
    checkPromptBound(
      t.bound,
      messages.map((m) => m.content),
      params.max_tokens,
      "messages",
    );
    return serveText(
      c,
      ctx,
      chatFormat,
      [
        {
          kind: "chat",
          request_id: c.get("requestId"),
          model: t.model,
          version: t.version,
          ...adapterOf(t),
          messages,
          params,
          ...(body.tools?.length
            ? {
                tools: body.tools,
                tool_choice: body.tool_choice ?? undefined,
                parallel_tool_calls: body.parallel_tool_calls ?? undefined,
              }
            : {}),
        },
      ],
      {
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        label: body.model,
        target: t,
        n: body.n ?? 1,
      },
    );
  });

  app.post("/completions", async (c) => {
    const body = await parseBody(c, CompletionRequest);
    checkSchemaLimits(body, schemaLimits);
    const t = await route(c, body.model);
    requireTask(t, "generate");
    const prompts = promptsOf(body.prompt);
    const params = toParams(body);
    // Each prompt is a job of its own: each must fit the window.
    for (const { prompt, path } of prompts) checkPromptBound(t.bound, [prompt], params.max_tokens, "prompt", path);
    return serveText(
      c,
      ctx,
      completionFormat,
      prompts.map(({ prompt }) => ({
        kind: "completion" as const,
        request_id: c.get("requestId"),
        model: t.model,
        version: t.version,
        ...adapterOf(t),
        prompt,
        params,
      })),
      {
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        label: body.model,
        target: t,
        n: body.n ?? 1,
        paths: prompts.map(({ path }) => path),
      },
    );
  });

  app.post("/inference/:model/generate", async (c) => {
    const body = await parseBody(c, GenerateRequest);
    checkSchemaLimits(body, schemaLimits);
    const name = c.req.param("model");
    const t = await route(c, name);
    requireTask(t, "generate");
    const params = toParams(body);
    checkPromptBound(t.bound, [body.prompt], params.max_tokens, "prompt");
    return serveText(
      c,
      ctx,
      generateFormat,
      [
        {
          kind: "generate",
          request_id: c.get("requestId"),
          model: t.model,
          version: t.version,
          ...adapterOf(t),
          prompt: body.prompt,
          params,
        },
      ],
      {
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        label: name,
        target: t,
      },
    );
  });

  app.post("/embeddings", async (c) => {
    const body = await parseBody(c, EmbeddingRequest);
    const t = await route(c, body.model);
    requireTask(t, "embed");
    if (t.adapter)
      throw new PlatformError(
        400,
        "invalid_request",
        "LoRA adapters apply to text generation (chat, completions), not to embeddings; name the endpoint alone",
        "model",
      );
    const input = embeddingItems(body.input);
    checkEmbeddingBound(t.bound, input);
    const serving = await serve(
      c,
      ctx,
      [{ kind: "embedding", request_id: c.get("requestId"), model: t.model, version: t.version, input }],
      { target: t },
    );
    const [first] = serving.firsts;
    if (first?.type !== "done" || first.result.type !== "embedding")
      throw new PlatformError(500, "internal_error", "worker sent no embeddings");
    const { embeddings, usage, queued_ms } = first.result;
    // Nothing is generated: the prompt is the whole of what an embedding uses.
    const used = { prompt_tokens: usage.prompt_tokens, completion_tokens: 0, total_tokens: usage.prompt_tokens };
    serving.answered({ usage: used, finish_reason: "stop", e2eSeconds: serving.elapsed(), queuedMs: queued_ms });
    return c.json(embeddingList(body.model, embeddings, used.prompt_tokens, body.encoding_format));
  });

  app.get("/models", async (c) => {
    const viewer = callerOf(c).viewer;
    const endpoints = await router.endpoints();
    // What another organization made is not listed (src/registry/owners.ts).
    const visible: typeof endpoints = [];
    for (const e of endpoints) if (!e.variant_of && (await router.visible(e, viewer))) visible.push(e);
    // A/B variants are versions of an endpoint, not models of their own: `name@version` reaches them.
    const list: ModelList = {
      object: "list",
      data: [
        ...visible.map((e) => modelEntry(e.name, e.created)),
        // Each endpoint's adapters, as clients name them (docs/adapters.md).
        ...(await router.adapterEntries(viewer)).map((a) => modelEntry(a.id, a.created * 1000)),
      ],
    };
    return c.json(list);
  });

  app.get("/models/:id", async (c) => {
    const id = c.req.param("id");
    const caller = callerOf(c);
    const t = await router.resolve(id, caller);
    if (!t.adapter) return c.json(modelEntry(id, t.endpoint.created));
    const created = (await router.adapterEntries(caller.viewer)).find((a) => a.id === id)?.created;
    return c.json(modelEntry(id, (created ?? Math.floor(t.endpoint.created / 1000)) * 1000));
  });

  return app;
}

/** The caller as sticky A/B tests see it. */
export function callerOf(c: Context<GatewayEnv>): Caller {
  const who = c.get("caller");
  return { keyId: who?.id, header: (name) => c.req.header(name), viewer: who && { org: who.org, role: who.role } };
}
