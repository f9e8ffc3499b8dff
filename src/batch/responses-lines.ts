/**
 * A /v1/responses batch line's body (openai-lines.ts): the Responses request as the online route
 * reads it (src/contracts/openai/responses.ts), as the chat record it becomes. A record's answer
 * is one text, never stored, so what needs more is refused naming the field: tools, streaming,
 * previous_response_id (a batch line stands alone).
 */
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import {
  inputItems,
  ResponseCreateRequest,
  responsesParam,
  toChatMessages,
  toParams,
  withInstructions,
} from "../contracts/openai/responses.ts";
import { type SchemaLimits, schemaLimitError } from "../contracts/schema-limits.ts";
import { failedEntry } from "./input.ts";
import type { ParsedEntry } from "./lines.ts";

export function parseResponsesLine(
  n: number,
  id: string,
  raw: unknown,
  servedModel: string,
  schemaLimits: SchemaLimits,
): ParsedEntry {
  const body = ResponseCreateRequest.safeParse(raw);
  if (!body.success) {
    const inLine = new z.ZodError(body.error.issues.map((issue) => ({ ...issue, path: ["body", ...issue.path] })));
    return failedEntry(n, id, "invalid_request", describeIssues(inLine));
  }
  const request = body.data;
  if (request.model !== servedModel)
    return failedEntry(
      n,
      id,
      "invalid_request",
      `body.model: expected "${servedModel}", the model of the batch's first request (one model per batch)`,
    );
  const unavailable = request.stream
    ? "stream"
    : request.tools?.length
      ? "tools"
      : request.previous_response_id
        ? "previous_response_id"
        : undefined;
  if (unavailable)
    return failedEntry(
      n,
      id,
      "invalid_request",
      `body.${unavailable}: not available in a batch (one text answer per line, each standing alone); send the request online`,
    );
  const messages = withInstructions(request.instructions, toChatMessages(inputItems(request.input)));
  if (messages.length === 0) return failedEntry(n, id, "invalid_request", "body.input: send at least one input item");
  const params = toParams(request);
  const overLimit = schemaLimitError({ response_format: params.response_format }, schemaLimits);
  if (overLimit) return failedEntry(n, id, overLimit.code, `body.${responsesParam(overLimit.message)}`);
  return { ok: true, line: n, id, work: { kind: "chat", messages }, params };
}
