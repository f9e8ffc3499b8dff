/**
 * OpenAI's Responses API under /v1 (the protocol: src/contracts/openai/responses.ts and
 * responses-output.ts): POST /responses becomes the chat job /v1/chat/completions makes, through
 * the same routing, limits, constrained decoding and tool calls; stored responses
 * (src/responses/store.ts) are the caller's organization's, retrieved, listed and deleted here.
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import {
  inputItems,
  MAX_INPUT_ITEMS,
  ResponseCreateRequest,
  responsesParam,
  toChatMessages,
  toChatToolChoice,
  toChatTools,
  toParams,
  withInstructions,
} from "../../contracts/openai/responses.ts";
import {
  asInputItem,
  completedResponse,
  itemList,
  listedItems,
  type NewId,
  outputItems,
  ResponseEvents,
  type ResponseObject,
  responseShell,
  type StreamEvent,
} from "../../contracts/openai/responses-output.ts";
import { checkSchemaLimits, type SchemaLimits } from "../../contracts/schema-limits.ts";
import type { ResponseStore } from "../../responses/store.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";
import { checkPromptBound } from "../input-bounds.ts";
import { randomHex } from "../random-id.ts";
import { type Router, requireTask } from "../routing.ts";
import type { ServeContext } from "../serve.ts";
import { serveEvents } from "../serve-events.ts";
import { chatSubmission, routeModel } from "./openai.ts";

const newId: NewId = (prefix) => `${prefix}${randomHex(24)}`;

const notFound = (id: string, param: string | null = null) =>
  new PlatformError(
    404,
    "not_found",
    `no response ${JSON.stringify(id)}: it was never stored (store: false), has expired or been deleted, or belongs to another organization`,
    param,
  );

const ItemsQuery = z.object({
  order: z.enum(["asc", "desc"]).default("desc"),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().max(128).optional(),
  include: z.unknown().optional(),
});

export function responsesRoutes(router: Router, ctx: ServeContext, schemaLimits: SchemaLimits, store: ResponseStore) {
  const app = new Hono<GatewayEnv>();
  const orgOf = (c: Context<GatewayEnv>) => c.get("caller").org;

  app.post("/responses", async (c) => {
    const body = await parseBody(c, ResponseCreateRequest);
    const org = orgOf(c);
    const previous = body.previous_response_id ? await store.get(org, body.previous_response_id) : undefined;
    if (body.previous_response_id && !previous) throw notFound(body.previous_response_id, "previous_response_id");
    const input = listedItems(inputItems(body.input), newId);
    const context = [...(previous?.context ?? []), ...input];
    if (context.length > MAX_INPUT_ITEMS)
      throw new PlatformError(
        400,
        "invalid_request",
        `the conversation has ${context.length} items with the previous responses'; at most ${MAX_INPUT_ITEMS}: start a new one`,
        "input",
      );
    const messages = withInstructions(body.instructions, toChatMessages(context));
    if (messages.length === 0)
      throw new PlatformError(400, "invalid_request", "send at least one input item or instructions", "input");
    const tools = toChatTools(body.tools);
    const params = toParams(body);
    try {
      checkSchemaLimits({ response_format: params.response_format, tools }, schemaLimits);
    } catch (e) {
      if (!(e instanceof PlatformError)) throw e;
      throw new PlatformError(e.status, e.code, responsesParam(e.message), responsesParam(e.param));
    }
    const t = await routeModel(router, ctx, c, body.model);
    requireTask(t, "generate");
    checkPromptBound(
      t.bound,
      messages.map((m) => m.content),
      params.max_tokens,
      "input",
    );
    const keep = body.store ?? true;
    const caller = c.get("caller");
    const shell = responseShell(body, newId("resp_"), Math.floor(Date.now() / 1000), keep);
    /** Kept before the client has it, so a retrieve right after finds it. */
    const finished = async (response: ResponseObject): Promise<ResponseObject> => {
      if (!keep) return response;
      const stored = await store.save(org, {
        response,
        input,
        context: [...context, ...response.output.map(asInputItem)],
        owner: caller.id,
      });
      // Larger than the organization may keep at all: answered, not kept, and said so.
      return stored ? response : { ...response, store: false };
    };
    return serveEvents(
      c,
      ctx,
      // tool_choice "none" with no tools asks for nothing: the job carries no tools then.
      chatSubmission(c, t, messages, params, {
        tools,
        tool_choice: toChatToolChoice(body.tool_choice),
        parallel_tool_calls: body.parallel_tool_calls ?? undefined,
      }),
      {
        stream: body.stream ?? false,
        target: t,
        whole: (result) => finished(completedResponse(shell, outputItems(result, newId), result)),
        events: () => {
          const events = new ResponseEvents(newId);
          return {
            started: () => events.started(shell),
            text: (delta) => events.text(delta),
            finish: async (result) => {
              const done = events.finish(shell, result);
              const response = await finished(done.response);
              const last = done.events.pop() as StreamEvent;
              return [...done.events, { ...last, response }];
            },
            failed: (err) => [events.failed(shell, { code: err.code, message: err.message })],
          };
        },
      },
    );
  });

  app.get("/responses/:id", async (c) => {
    const id = c.req.param("id");
    const stored = await store.get(orgOf(c), id);
    if (!stored) throw notFound(id);
    return c.json(stored.response);
  });

  app.delete("/responses/:id", async (c) => {
    const id = c.req.param("id");
    if (!(await store.delete(orgOf(c), id))) throw notFound(id);
    return c.json({ id, object: "response", deleted: true });
  });

  app.get("/responses/:id/input_items", async (c) => {
    const id = c.req.param("id");
    const query = ItemsQuery.parse(c.req.query());
    const stored = await store.get(orgOf(c), id);
    if (!stored) throw notFound(id);
    return c.json(itemList(stored.input, query));
  });

  app.post("/responses/:id/cancel", async (c) => {
    const id = c.req.param("id");
    if (!(await store.get(orgOf(c), id))) throw notFound(id);
    throw new PlatformError(
      400,
      "invalid_request",
      "only background responses can be cancelled, and this server runs none (background: false)",
    );
  });

  return app;
}
