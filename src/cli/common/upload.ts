/** A local file sent to the gateway as /v1/files: batch inputs, evaluation and fine-tuning datasets. */
import { openAsBlob } from "node:fs";
import { basename } from "node:path";
import type { ApiClient } from "../../client/api.ts";
import { CliError } from "./errors.ts";

/** Uploads `path` and resolves its file id; `what` (the flag and its value) names it in the error. */
export async function uploadFile(
  api: ApiClient,
  path: string,
  purpose: "batch" | "fine-tune",
  what: string,
): Promise<string> {
  const form = new FormData();
  form.set("purpose", purpose);
  form.set("file", await openAsBlob(path), basename(path));
  const res = await api.send("POST", "/v1/files", { body: form });
  const body = (await res.json().catch(() => ({}))) as { id?: string; error?: { message?: string; code?: string } };
  if (!res.ok || !body.id)
    throw new CliError(
      `${what}: upload failed: ${body.error?.message ?? `HTTP ${res.status}`}${body.error?.code ? ` (${body.error.code})` : ""}`,
    );
  return body.id;
}
