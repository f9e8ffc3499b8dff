/**
 * The OpenAI Batch API shape, mounted at /v1 (any caller; as for batch jobs, a
 * user sees its own batches, an organization's admin its organization's, an
 * operator all); the files they read and write are /v1/files (routes/files.ts):
 *
 *   POST /batches {input_file_id, endpoint, completion_window: "24h", metadata?}
 *   GET /batches   GET /batches/:id   POST /batches/:id/cancel
 *
 * A batch is an ordinary batch job (src/batch) whose lines are OpenAI
 * requests; all requests of a file must name the same model (an endpoint, as
 * in /v1/chat/completions). As on OpenAI, answers go to the output file and
 * failures to the error file (src/batch/openai-lines.ts), each in input
 * order; both are files of the batch's key, like its input.
 */
import type { Readable } from "node:stream";
import { Hono } from "hono";
import { z } from "zod";
import { type BatchResultFiles, FILES_PREFIX, Files } from "../../files/store.ts";
import { isBlank, readLines } from "../../files/jsonl.ts";
import { BatchJobs } from "../../batch/jobs.ts";
import type { OpenAiSpec } from "../../batch/store.ts";
import type { BatchJob } from "../../batch/record.ts";
import { servingQueue } from "../../endpoints/rollout.ts";
import { getEndpoint } from "../../endpoints/store.ts";
import { NAME_PATTERN } from "../../contracts/deployment.ts";
import { pickAdapterVersion } from "../../models/adapter-register.ts";
import { listModelVersions } from "../../models/versions.ts";
import type { Control } from "../../redis/connection.ts";
import { PlatformError } from "../../contracts/errors.ts";
import type { ObjectStore } from "../../storage/index.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody } from "../errors.ts";

export const CreateBatch = z.object({
  input_file_id: z.string().min(1),
  endpoint: z.enum(["/v1/completions", "/v1/chat/completions", "/v1/responses"], {
    message: 'expected "/v1/chat/completions", "/v1/completions" or "/v1/responses"',
  }),
  completion_window: z.literal("24h", { message: 'only "24h" is supported' }).default("24h"),
  metadata: z.record(z.string(), z.string()).nullish(),
});

const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().min(1).optional(),
});

const STATUS = {
  queued: "validating",
  running: "in_progress",
  cancelling: "cancelling",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
} as const;

export type OpenAiBatchDeps = {
  ctl: Control;
  artifacts: ObjectStore;
  jobs?: BatchJobs;
};

export function openAiBatchRoutes(deps: OpenAiBatchDeps) {
  const jobs = deps.jobs ?? new BatchJobs(deps.ctl);
  const files = new Files(deps.ctl, deps.artifacts);
  const app = new Hono<GatewayEnv>();

  // The coordinator records the files as the batch ends; a batch that ended before error files
  // existed has one result holding every line, shown as its output file.
  const present = async (record: BatchJob, openai: OpenAiSpec, ended: BatchResultFiles | undefined) => {
    let shown: BatchResultFiles = ended ?? { output_file_id: null, error_file_id: null };
    if (!ended && record.output_file && (record.state === "completed" || record.state === "cancelled")) {
      shown = {
        output_file_id: await files.registerOutput(
          record.id,
          `${FILES_PREFIX}/${record.id}.jsonl`,
          { id: record.created_by, org: record.org },
          record.finished ?? Date.now(),
        ),
        error_file_id: null,
      };
    }
    return toOpenAiBatch(record, openai, shown);
  };

  app.post("/batches", async (c) => {
    const body = await parseBody(c, CreateBatch);
    const who = c.get("caller");
    const input = await files.uri(body.input_file_id, who);
    const served = await firstModel(await files.content(body.input_file_id, who));
    if (served === undefined) {
      throw new PlatformError(
        400,
        "invalid_request",
        `file ${body.input_file_id}: its first request has no body.model; every line is {"custom_id", "method": "POST", "url", "body": {"model", ...}}`,
        "input_file_id",
      );
    }
    // `<endpoint>:<adapter>` (docs/adapters.md): the endpoint's version, each record with the adapter.
    const colon = served.indexOf(":");
    // Another organization's model or adapter is the same 404 as one that does not exist (src/models/owners.ts).
    const endpoint = await getEndpoint(deps.ctl, colon < 0 ? served : served.slice(0, colon), who);
    const adapterName = served.slice(colon + 1);
    const adapter =
      colon < 0
        ? undefined
        : pickAdapterVersion(
            // A name that cannot be registered is not looked up (it would become a Redis key).
            NAME_PATTERN.test(adapterName) ? await listModelVersions(deps.ctl, adapterName, who) : [],
            adapterName,
            { name: endpoint.config.model.name, version: endpoint.version },
            endpoint.name,
          );
    const openai: OpenAiSpec = {
      endpoint: body.endpoint,
      served_model: served,
      input_file_id: body.input_file_id,
      completion_window: body.completion_window,
      metadata: body.metadata ?? null,
    };
    // Both locations are the platform's own (the file store), not client-named: shown by file id and "files/".
    const output = files.outputPrefix;
    const record = await jobs.create(
      { model: endpoint.config.model.name, version: endpoint.version, input, output },
      who,
      {
        queue: servingQueue(endpoint),
        ...(adapter ? { adapter: `${adapter.name}@${adapter.version}` } : {}),
        openai,
        internal: {
          input: { uri: input, given: body.input_file_id, shown: body.input_file_id, confined: false },
          output: { uri: output, given: "files/", shown: "files/", confined: false },
        },
      },
    );
    return c.json(await present(record, openai, undefined));
  });

  app.get("/batches", async (c) => {
    const query = ListQuery.parse(c.req.query());
    const who = c.get("caller");
    const data: unknown[] = [];
    let after = query.after;
    // Batch jobs made another way (platform JSONL) are not batches in this shape: skip them.
    for (;;) {
      const page = await jobs.list({ limit: 100, after }, who);
      for (const record of page.data) {
        const { openai, files: ended } = await jobs.getWithOpenAi(record.id, who);
        if (openai) data.push(await present(record, openai, ended));
        if (data.length > query.limit) break;
      }
      if (data.length > query.limit || !page.has_more) break;
      after = page.data.at(-1)?.id;
    }
    const shown = data.slice(0, query.limit) as { id: string }[];
    return c.json({
      object: "list",
      data: shown,
      first_id: shown[0]?.id ?? null,
      last_id: shown.at(-1)?.id ?? null,
      has_more: data.length > query.limit,
    });
  });

  app.get("/batches/:id", async (c) => {
    const { record, openai, files: ended } = await jobs.getWithOpenAi(c.req.param("id"), c.get("caller"));
    if (!openai) throw notABatch(record.id);
    return c.json(await present(record, openai, ended));
  });

  app.post("/batches/:id/cancel", async (c) => {
    const who = c.get("caller");
    const { openai } = await jobs.getWithOpenAi(c.req.param("id"), who);
    if (!openai) throw notABatch(c.req.param("id"));
    const record = await jobs.cancel(c.req.param("id"), who);
    // A batch cancelled before it ran ends here, with no files; one that ran ends in its coordinator.
    return c.json(await present(record, openai, (await jobs.getWithOpenAi(record.id, who)).files));
  });

  return app;
}

function notABatch(id: string): PlatformError {
  return new PlatformError(
    404,
    "batch_not_found",
    `"${id}" is a platform batch job, not an OpenAI-style batch: GET /v1/batch-jobs/${id} shows it`,
    "batch_id",
  );
}

/** The model the file's first request names. */
async function firstModel(stream: Readable): Promise<string | undefined> {
  try {
    for await (const line of readLines(stream)) {
      if (isBlank(line)) continue;
      const model = (() => {
        try {
          return (JSON.parse(line.text ?? "") as { body?: { model?: unknown } }).body?.model;
        } catch {
          return undefined;
        }
      })();
      return typeof model === "string" && model.length > 0 ? model : undefined;
    }
    return undefined;
  } finally {
    stream.destroy();
  }
}

function toOpenAiBatch(record: BatchJob, openai: OpenAiSpec, files: BatchResultFiles) {
  const s = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));
  const created = Math.floor(record.created / 1000);
  const ended = (state: string) => (record.state === state ? s(record.finished) : null);
  return {
    id: record.id,
    object: "batch",
    endpoint: openai.endpoint,
    errors: record.error
      ? { object: "list", data: [{ code: record.error.code, message: record.error.message, param: null, line: null }] }
      : null,
    input_file_id: openai.input_file_id,
    completion_window: openai.completion_window,
    status: STATUS[record.state],
    output_file_id: files.output_file_id,
    error_file_id: files.error_file_id,
    created_at: created,
    in_progress_at: s(record.started),
    expires_at: created + 24 * 3600,
    finalizing_at: null,
    completed_at: ended("completed"),
    failed_at: ended("failed"),
    expired_at: null,
    cancelling_at: null,
    cancelled_at: ended("cancelled"),
    request_counts: { total: record.counts.total, completed: record.counts.succeeded, failed: record.counts.failed },
    metadata: openai.metadata,
  };
}
