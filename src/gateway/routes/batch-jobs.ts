/**
 * Batch job routes, mounted at /v1/batch-jobs (any caller; a user sees the jobs
 * it created, an organization's admin its organization's, an operator all):
 *
 *   POST /                 create  (body: CreateBatchRequest)  → 201 batch_job
 *   GET  /?limit&after     list, newest first                  → {object: "list", data, has_more}
 *   GET  /:id              get                                 → batch_job
 *   POST /:id/cancel       cancel                              → batch_job
 *   POST /:id/resume       a failed job back to the queue      → batch_job (409 when resuming cannot help)
 *   GET  /:id/output       the result, or the parts written so far, as JSONL
 *   GET  /:id/output/<d>/<f>.png  an image job's PNG, by the name its output line gives
 *
 * Input and output URIs are confined to the key's storage areas (GET /v1/storage).
 * A job whose input is an uploaded file may name no output: the server keeps
 * the result, and only /:id/output (creator or admin) serves it.
 */
import { Readable } from "node:stream";
import { Hono } from "hono";
import { z } from "zod";
import { BatchJobs } from "../../batch/index.ts";
import { CreateBatchRequest } from "../../batch/record.ts";
import type { Control } from "../../redis/connection.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";

const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().min(1).optional(),
});

export type BatchRouteDeps = { ctl: Control } | { jobs: BatchJobs };

export function batchRoutes(deps: BatchRouteDeps) {
  const jobs = "jobs" in deps ? deps.jobs : new BatchJobs(deps.ctl);
  const app = new Hono<GatewayEnv>();

  app.post("/", async (c) => {
    const body = await parseBody(c, CreateBatchRequest);
    return c.json(await jobs.create(body, c.get("caller")), 201);
  });

  app.get("/", async (c) => {
    const query = ListQuery.parse(c.req.query());
    return c.json(await jobs.list(query, c.get("caller")));
  });

  app.get("/:id", async (c) => c.json(await jobs.get(c.req.param("id"), c.get("caller"))));

  app.post("/:id/cancel", async (c) => c.json(await jobs.cancel(c.req.param("id"), c.get("caller"))));

  app.post("/:id/resume", async (c) => c.json(await jobs.resume(c.req.param("id"), c.get("caller"))));

  app.get("/:id/output", async (c) => {
    const stream = await jobs.output(c.req.param("id"), c.get("caller"));
    return c.body(Readable.toWeb(stream) as ReadableStream, 200, { "content-type": "application/x-ndjson" });
  });

  // An image job's PNG, by the name its output line gives (`<result's name>/<record id>.png`).
  app.get("/:id/output/:folder/:file", async (c) => {
    const name = `${c.req.param("folder")}/${c.req.param("file")}`;
    const stream = await jobs.picture(c.req.param("id"), name, c.get("caller"));
    return c.body(Readable.toWeb(stream) as ReadableStream, 200, {
      "content-type": "image/png",
      "cache-control": "private, no-store",
    });
  });

  return app;
}
