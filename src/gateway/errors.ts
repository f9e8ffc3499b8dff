/** Every error the gateway returns, in the OpenAI error envelope (contracts/errors.ts; docs/http-api.md), or Anthropic's on its routes. */
import type { Context } from "hono";
import { z } from "zod";
import { anthropicError, anthropicStatus, isMessagesPath } from "../contracts/anthropic.ts";
import { describeIssues } from "../contracts/issues.ts";
import { detailOf, errorEnvelope, PlatformError } from "../contracts/errors.ts";
import { causeFields, logger } from "../telemetry/log.ts";

const log = logger("gateway");

/** Any thrown value as the PlatformError the client should see. */
export function asPlatformError(e: unknown): PlatformError {
  if (e instanceof PlatformError) return e;
  if (e instanceof z.ZodError) {
    const first = e.issues[0];
    return new PlatformError(400, "invalid_request", describeIssues(e), first ? first.path.join(".") || null : null);
  }
  if (e instanceof SyntaxError)
    return new PlatformError(400, "invalid_json", `request body is not valid JSON: ${e.message}`);
  return new PlatformError(500, "internal_error", "internal error; the gateway log has the details");
}

/** The error as sent to the client: a hidden detail is logged with the request id, and the message points there. */
export function clientError(c: Context, e: unknown): PlatformError {
  const err = asPlatformError(e);
  const hidden = detailOf(err) ?? (err.status >= 500 && !(e instanceof PlatformError) ? { detail: e } : undefined);
  if (!hidden) return err;
  const detail = hidden.detail;
  const requestId = (c.get("requestId") as string | undefined) ?? "(none)";
  log.error(
    {
      request_id: requestId,
      method: c.req.method,
      path: c.req.path,
      code: err.code,
      status: err.status,
      ...causeFields(detail),
    },
    `${c.req.method} ${c.req.path}: ${err.code}`,
  );
  const base = e instanceof PlatformError ? err.message : "internal error";
  return new PlatformError(
    err.status,
    err.code,
    `${base}; request id ${requestId}, the gateway log has the details`,
    err.param,
    err.retryAfter,
  );
}

/** In OpenAI's envelope, or Anthropic's on the Messages API's routes (contracts/anthropic.ts). */
export function errorResponse(c: Context, e: unknown): Response {
  const err = clientError(c, e);
  if (err.retryAfter !== undefined) c.header("Retry-After", String(err.retryAfter));
  if (isMessagesPath(c.req.path)) return c.json(anthropicError(err), anthropicStatus(err) as 400);
  return c.json(errorEnvelope(err), err.status as 400);
}

/**
 * The request's JSON body, not yet checked: the one way a route reads one. Not JSON: a 400
 * `invalid_json`, saying what to send (`expected`).
 */
export async function readJson(
  c: Context,
  expected = "send Content-Type: application/json with a JSON object",
): Promise<unknown> {
  try {
    return await c.req.json();
  } catch (e) {
    throw new PlatformError(
      400,
      "invalid_json",
      `request body is not valid JSON (${(e as Error).message}); ${expected}`,
    );
  }
}

/** Parse a JSON body with a zod schema; errors name the field. */
export async function parseBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  return schema.parse(await readJson(c));
}

/**
 * A path parameter checked against its schema: a name that could never be stored is a 400
 * naming the parameter and the form it must take, before any lookup.
 */
export function pathParam<T extends z.ZodType>(c: Context, name: string, schema: T): z.infer<T> {
  const parsed = schema.safeParse(c.req.param(name));
  if (!parsed.success)
    throw new PlatformError(
      400,
      "invalid_request",
      `path parameter ${name}: ${parsed.error.issues[0]?.message ?? "invalid"}`,
      name,
    );
  return parsed.data;
}
