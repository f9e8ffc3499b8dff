/**
 * POST /v1/images/generations, as OpenAI's (src/contracts/openai/images.ts; docs/images.md): one
 * image job per image through the fabric (serve.ts: rate limits, admission, cancellation, usage,
 * A/B outcomes), the PNGs read from the artifact store where the replicas wrote them, answered as
 * base64 (and deleted) or kept behind an expiring URL: GET /v1/images/files/<id>.png, served to
 * the key that made it (src/pictures/urls.ts).
 */
import { Readable } from "node:stream";
import { type Context, Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import type { ImageResult } from "../../contracts/job.ts";
import {
  type ImageData,
  ImageGenerationRequest,
  type ImagesResponse,
  imageJobFields,
  imageSize,
} from "../../contracts/openai/images.ts";
import { keepForUrl, openPicture, readPicture, sweepPictures } from "../../pictures/urls.ts";
import type { Control } from "../../redis/connection.ts";
import type { ObjectStore } from "../../storage/store.ts";
import { logger } from "../../telemetry/log.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";
import { type Router, requireTask } from "../routing.ts";
import { serve, type ServeContext } from "../serve.ts";
import { callerOf } from "./openai.ts";

export type PictureRouteDeps = { ctl: Control; artifacts: ObjectStore; urlTtlMs: number };

/** Images nobody took are swept at most this often (the first `url` answer after it runs the sweep). */
const SWEEP_EVERY_MS = 10 * 60_000;

export function openAiImageRoutes(router: Router, ctx: ServeContext, deps: PictureRouteDeps) {
  const app = new Hono<GatewayEnv>();
  let swept = 0;
  const sweep = () => {
    if (Date.now() - swept < SWEEP_EVERY_MS) return;
    swept = Date.now();
    void sweepPictures(deps.artifacts, deps.urlTtlMs).catch((e: unknown) =>
      logger("gateway").warn({ err: e }, "sweeping old generated images failed"),
    );
  };

  app.post("/images/generations", async (c) => {
    const body = await parseBody(c, ImageGenerationRequest);
    const t = await router.resolve(body.model, callerOf(c));
    ctx.metrics.routed(c.req.raw, { model_name: t.label, version: t.version });
    requireTask(t, "image");
    if (t.adapter)
      throw new PlatformError(400, "invalid_request", "LoRA adapters apply to text generation, not images", "model");
    const size = imageSize(body.size, t.pipeline);
    const n = body.n ?? 1;
    const serving = await serve(
      c,
      ctx,
      [{ request_id: c.get("requestId"), model: t.model, version: t.version, ...imageJobFields(body, size) }],
      { target: t, n },
    );
    const results = serving.firsts.map((f) => {
      if (f.type !== "done" || f.result.type !== "image")
        throw new PlatformError(500, "internal_error", "worker sent no image");
      return f.result;
    });
    const data = await answerWith(c, deps, results, body.response_format ?? "b64_json");
    if (body.response_format === "url") sweep();
    const usage = results.reduce(
      (u, r) => ({
        prompt_tokens: u.prompt_tokens + r.usage.prompt_tokens,
        completion_tokens: 0,
        total_tokens: u.total_tokens + r.usage.prompt_tokens,
        images: (u.images ?? 0) + 1,
        steps: (u.steps ?? 0) + r.steps,
      }),
      { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, images: 0, steps: 0 },
    );
    for (const r of results) ctx.metrics.images.observe(serving.served, (r.generation_ms ?? 0) / 1000, r.steps);
    serving.answered({
      usage,
      finish_reason: "stop",
      e2eSeconds: serving.elapsed(),
      queuedMs: results[0]?.queued_ms,
    });
    const response: ImagesResponse = {
      created: Math.floor(Date.now() / 1000),
      data,
      usage: {
        input_tokens: usage.prompt_tokens,
        output_tokens: 0,
        total_tokens: usage.prompt_tokens,
        input_tokens_details: { text_tokens: usage.prompt_tokens, image_tokens: 0 },
        images: usage.images,
        steps: usage.steps,
      },
    };
    return c.json(response);
  });

  app.get("/images/files/:file", async (c) => {
    const file = c.req.param("file");
    const id = file.endsWith(".png") ? file.slice(0, -".png".length) : file;
    const stream = await openPicture(deps.ctl, deps.artifacts, id, c.get("caller"));
    return c.body(Readable.toWeb(stream) as ReadableStream, 200, {
      "content-type": "image/png",
      "cache-control": "private, no-store",
    });
  });

  return app;
}

/** Each image as the client asked: its bytes in base64 (then removed from the store), or a URL to them. */
async function answerWith(
  c: Context<GatewayEnv>,
  deps: PictureRouteDeps,
  results: ImageResult[],
  format: "b64_json" | "url",
): Promise<ImageData[]> {
  return Promise.all(
    results.map(async (r) => {
      if (format === "url") {
        const { id } = await keepForUrl(deps.ctl, { key: r.image.key, owner: c.get("caller") }, deps.urlTtlMs);
        return { url: new URL(`/v1/images/files/${id}.png`, c.req.url).toString(), seed: r.seed };
      }
      const png = await readPicture(deps.artifacts, r.image.key);
      await deps.artifacts.delete(r.image.key).catch(() => undefined);
      return { b64_json: png.toString("base64"), seed: r.seed };
    }),
  );
}
