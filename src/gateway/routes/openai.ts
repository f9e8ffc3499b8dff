/** The OpenAI-compatible routes and the platform's own generate route, all under /v1 (the protocol: src/contracts/openai/). */
import { type Context, Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import {
  adapterRefusal,
  type ChatMessage,
  type FunctionTool,
  type SamplingParams,
  type ToolChoice,
} from "../../contracts/job.ts";
import type { Submission } from "../../queue/dispatcher.ts";
import { checkSchemaLimits, type SchemaLimits } from "../../contracts/schema-limits.ts";
import { ChatCompletionRequest, chatFormat, toMessages } from "../../contracts/openai/chat.ts";
import { toParams } from "../../contracts/openai/common.ts";
import {
  CompletionRequest,
  completionFormat,
  GenerateRequest,
  generateFormat,
  promptsOf,
} from "../../contracts/openai/completions.ts";
import { EmbeddingRequest, embeddingItems, embeddingList } from "../../contracts/openai/embeddings.ts";
import { type ModelList, modelEntry } from "../../contracts/openai/models.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";
import { checkEmbeddingBound, checkPromptBound } from "../input-bounds.ts";
import { type Caller, type Router, requireTask, type Target } from "../routing.ts";
import { serve, type ServeContext } from "../serve.ts";
import { serveText } from "../serve-text.ts";

/** `schemaLimits`: the bounds on a request's JSON schemas, checked before anything is routed or queued. */
export function openAiRoutes(router: Router, ctx: ServeContext, schemaLimits: SchemaLimits) {
  const app = new Hono<GatewayEnv>();
  const route = (c: Context<GatewayEnv>, model: string) => routeModel(router, ctx, c, model);

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
          ...chatSubmission(c, t, messages, params, {
            tools: body.tools ?? undefined,
            tool_choice: body.tool_choice ?? undefined,
            parallel_tool_calls: body.parallel_tool_calls ?? undefined,
          }),
          ...priorityOf(body),
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
        ...priorityOf(body),
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
        `${adapterRefusal("embedding")}; name the endpoint alone`,
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
    // What another organization made is not listed (src/models/owners.ts).
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

/** Routing, remembered for metrics: an error from here on counts under this endpoint and version. */
export async function routeModel(
  router: Router,
  ctx: ServeContext,
  c: Context<GatewayEnv>,
  model: string,
): Promise<Target> {
  const t = await router.resolve(model, callerOf(c));
  ctx.metrics.routed(c.req.raw, { model_name: t.label, version: t.version });
  return t;
}

/** The request's priority band, on the job (absent: its key's default band, src/gateway/serve.ts). */
const priorityOf = (body: { priority?: number | null }) => (body.priority != null ? { priority: body.priority } : {});

/** The adapter a `<endpoint>:<adapter>` model names, on the job (absent: the base). */
export const adapterOf = (t: Target) => (t.adapter ? { adapter: t.adapter } : {});

/**
 * The chat job of a request routed to `t`, whichever API it came in (chat completions, the
 * Responses and Messages APIs): the tools only where there are some.
 */
export function chatSubmission(
  c: Context<GatewayEnv>,
  t: Target,
  messages: ChatMessage[],
  params: SamplingParams,
  tools: { tools?: FunctionTool[]; tool_choice?: ToolChoice; parallel_tool_calls?: boolean },
): Submission {
  return {
    kind: "chat",
    request_id: c.get("requestId"),
    model: t.model,
    version: t.version,
    ...adapterOf(t),
    messages,
    params,
    ...(tools.tools?.length
      ? { tools: tools.tools, tool_choice: tools.tool_choice, parallel_tool_calls: tools.parallel_tool_calls }
      : {}),
  };
}

/** The caller as sticky A/B tests see it. */
export function callerOf(c: Context<GatewayEnv>): Caller {
  const who = c.get("caller");
  return { keyId: who?.id, header: (name) => c.req.header(name), viewer: who && { org: who.org, role: who.role } };
}
