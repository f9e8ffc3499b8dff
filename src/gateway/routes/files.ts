/**
 * Files, OpenAI's /v1/files, mounted at /v1 (any caller; a user sees its own files, an
 * organization's admin its organization's, an operator all): batch inputs and fine-tuning
 * datasets uploaded, batch jobs' output and error files (src/files/store.ts).
 *
 *   POST /files (multipart: file, purpose=batch|fine-tune)   GET /files   GET /files/:id
 *   GET /files/:id/content                                   DELETE /files/:id
 */
import { Readable } from "node:stream";
import { Hono } from "hono";
import { PlatformError } from "../../contracts/errors.ts";
import { type FileQuota, Files, quotaExceeded } from "../../files/store.ts";
import type { Control } from "../../redis/connection.ts";
import type { ObjectStore } from "../../storage/index.ts";
import type { GatewayEnv } from "../env.ts";
import { readMultipart } from "../multipart.ts";

/**
 * `maxFileBytes`: an upload's body limit (PLATFORM_MAX_FILE_BYTES), counted as it streams;
 * `quota`: what one organization's files may take; `fileTtlS`: an upload's life when it names no
 * `expires_after` (0 or absent: until deleted).
 */
export type FileDeps = {
  ctl: Control;
  artifacts: ObjectStore;
  maxFileBytes?: number;
  quota?: FileQuota;
  fileTtlS?: number;
};

/** OpenAI's bounds on `expires_after.seconds`: an hour to 30 days. */
const EXPIRY_SECONDS = { min: 3600, max: 30 * 24 * 3600 };

/** An upload's `expires_after` (multipart fields `expires_after[anchor]`, `expires_after[seconds]`), in seconds; undefined when absent. */
function expiryOf(fields: Record<string, string>): number | undefined {
  const anchor = fields["expires_after[anchor]"];
  const seconds = fields["expires_after[seconds]"];
  if (anchor === undefined && seconds === undefined) return undefined;
  if (anchor !== "created_at")
    throw new PlatformError(400, "invalid_request", 'expires_after.anchor: expected "created_at"', "expires_after");
  const n = Number(seconds);
  if (!/^\d+$/.test(seconds ?? "") || n < EXPIRY_SECONDS.min || n > EXPIRY_SECONDS.max)
    throw new PlatformError(
      400,
      "invalid_request",
      `expires_after.seconds: expected a whole number from ${EXPIRY_SECONDS.min} (an hour) to ${EXPIRY_SECONDS.max} (30 days)`,
      "expires_after",
    );
  return n;
}

export function fileRoutes(deps: FileDeps) {
  const files = new Files(deps.ctl, deps.artifacts);
  const app = new Hono<GatewayEnv>();

  // Streamed to the store as it arrives (gateway/multipart.ts); `purpose` may come before or after the file.
  // The organization's quota bounds the stream too: what is left of it, if less than the file limit.
  app.post("/files", async (c) => {
    const caller = c.get("caller");
    const quota = deps.quota;
    const usage = quota ? await files.usage(caller.org) : undefined;
    if (quota && usage && (usage.files >= quota.files || usage.bytes >= quota.bytes))
      throw quotaExceeded(caller.org, usage, quota);
    const maxFile = deps.maxFileBytes ?? Number.POSITIVE_INFINITY;
    // The multipart framing and fields around the file: a few KiB at most.
    const room = quota && usage ? quota.bytes - usage.bytes + 64 * 1024 : Number.POSITIVE_INFINITY;
    const form = await readMultipart(
      c.req.raw,
      {
        maxBytes: Math.min(maxFile, room),
        setting: "PLATFORM_MAX_FILE_BYTES",
        fileField: "file",
        ...(room < maxFile && quota && usage
          ? { refusal: () => quotaExceeded(caller.org, usage, quota, quota.bytes - usage.bytes + 1) }
          : {}),
      },
      (stream) => files.receive(stream),
      (received) => files.discard(received),
    );
    const { file, fields } = form;
    if (!file)
      throw new PlatformError(400, "invalid_request", "send the file as multipart/form-data field `file`", "file");
    try {
      // "fine-tune": a fine-tuning dataset (src/finetuning), checked when a job names it.
      const purpose = fields.purpose;
      if (purpose !== "batch" && purpose !== "fine-tune")
        throw new PlatformError(400, "invalid_request", 'purpose: expected "batch" or "fine-tune"', "purpose");
      const expiresAfter = expiryOf(fields) ?? (deps.fileTtlS || null);
      const recorded = await files.record(file.stored, file.name || "input.jsonl", purpose, caller, {
        expiresAfter,
        ...(quota ? { quota } : {}),
      });
      return c.json(recorded);
    } catch (e) {
      // A form refused after its file was stored keeps nothing of it.
      await files.discard(file.stored);
      throw e;
    }
  });

  app.get("/files", async (c) => {
    const data = await files.list(c.get("caller"));
    return c.json({
      object: "list",
      data,
      has_more: false,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
    });
  });

  app.get("/files/:id", async (c) => c.json(await files.get(c.req.param("id"), c.get("caller"))));

  app.get("/files/:id/content", async (c) => {
    const stream = await files.content(c.req.param("id"), c.get("caller"));
    return c.body(Readable.toWeb(stream) as ReadableStream, 200, { "content-type": "application/octet-stream" });
  });

  app.delete("/files/:id", async (c) => {
    const id = c.req.param("id");
    await files.delete(id, c.get("caller"));
    return c.json({ id, object: "file", deleted: true });
  });

  return app;
}
