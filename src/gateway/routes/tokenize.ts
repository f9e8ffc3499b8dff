/**
 * POST /tokenize and /detokenize, vLLM's shapes (src/contracts/openai/tokenize.ts), mounted at the root
 * as vLLM and llama.cpp's server have them and under /v1: a `tokenize` job on the model's replicas
 * (their own tokenizer and chat template), through the same routing, keys and limits as chat.
 */
import { type Context, Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import type { TokenizeJob, TokensResult } from "../../contracts/job.ts";
import {
  DetokenizeRequest,
  type Detokenized,
  type Tokenized,
  tokenizeForm,
  tokenizeInput,
} from "../../contracts/openai/tokenize.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, readJson } from "../errors.ts";
import { type Router, requireTask, type Target } from "../routing.ts";
import { serve, type ServeContext } from "../serve.ts";
import { routeModel } from "./openai.ts";

/** A tokenize job's result, its request recorded (metrics, usage: the tokens read); the Messages API counts with it too. */
export async function tokenizeJob(
  ctx: ServeContext,
  c: Context<GatewayEnv>,
  t: Target,
  input: TokenizeJob["input"],
): Promise<TokensResult> {
  const serving = await serve(
    c,
    ctx,
    [{ kind: "tokenize", request_id: c.get("requestId"), model: t.model, version: t.version, input }],
    { target: t },
  );
  const [first] = serving.firsts;
  if (first?.type !== "done" || first.result.type !== "tokens")
    throw new PlatformError(500, "internal_error", "worker sent no tokens");
  const result = first.result;
  serving.answered({
    usage: result.usage,
    finish_reason: "stop",
    e2eSeconds: serving.elapsed(),
    queuedMs: result.queued_ms,
  });
  return result;
}

export function tokenizeRoutes(router: Router, ctx: ServeContext) {
  const app = new Hono<GatewayEnv>();
  const target = async (c: Context<GatewayEnv>, model: string) => {
    const t = await routeModel(router, ctx, c, model);
    requireTask(t, "generate");
    return t;
  };

  app.post("/tokenize", async (c) => {
    const raw = await readJson(c);
    const body = tokenizeForm(raw).parse(raw);
    const result = await tokenizeJob(ctx, c, await target(c, body.model), tokenizeInput(body));
    const answer: Tokenized = {
      count: result.tokens.length,
      max_model_len: result.max_model_len,
      tokens: result.tokens,
    };
    return c.json(answer);
  });

  app.post("/detokenize", async (c) => {
    const body = await parseBody(c, DetokenizeRequest);
    const result = await tokenizeJob(ctx, c, await target(c, body.model), { tokens: body.tokens });
    const answer: Detokenized = { prompt: result.text };
    return c.json(answer);
  });

  return app;
}
