/**
 * OpenAI batch lines. Input: `{custom_id, method: "POST", url, body}` with the
 * body of a /v1/completions, /v1/chat/completions or /v1/responses request (the last as the chat
 * job it becomes online, never stored: responses.ts). Output, one
 * shape for both of OpenAI's files: `{id, custom_id, response: {status_code,
 * request_id, body}, error}`. A request the model answered has a `response`
 * (200 and the completion: the output file; 4xx/5xx and the error envelope:
 * the error file, with `error: null`, as OpenAI writes HTTP failures); a line
 * that could not be sent at all has `response: null` and `error: {code,
 * message}` (the error file; OpenAI keeps `error` for non-HTTP failures).
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { type ErrorEnvelope, errorEnvelope, PlatformError } from "../contracts/errors.ts";
import { type SchemaLimits, schemaLimitError } from "../contracts/schema-limits.ts";
import { ChatCompletionRequest, type ChatCompletion, chatFormat, toMessages } from "../contracts/openai/chat.ts";
import { toParams } from "../contracts/openai/common.ts";
import {
  CompletionRequest,
  completionFormat,
  promptsOf,
  type TextCompletion,
} from "../contracts/openai/completions.ts";
import type { Prompt } from "../contracts/job.ts";
import {
  completedResponse,
  type NewId,
  outputItems,
  type ResponseObject,
  responseShell,
} from "../contracts/openai/responses-output.ts";
import { parseResponsesLine } from "./responses-lines.ts";
import type { InputLine } from "../files/jsonl.ts";
import { failedEntry, idOf, jsonObject } from "./input.ts";
import type { LineFormat, Outcome, ParsedEntry } from "./lines.ts";
import type { BatchSpec, OpenAiSpec } from "./store.ts";

type ResponseBody = ChatCompletion | TextCompletion | ResponseObject | ErrorEnvelope;

/** A line of either file: an answer or an HTTP error (`response`), or a request that could not be sent (`error`). */
type OutputLine = {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: ResponseBody } | null;
  error: { code: string; message: string } | null;
};

/** What the split needs of a line already written (our own, read back from storage). */
const WrittenLine = z.object({
  response: z.object({ status_code: z.number().int() }).nullable(),
  error: z.unknown(),
});

export const RequestLine = z.object({
  custom_id: z.string().min(1).max(512),
  method: z.literal("POST", { message: 'only "POST" is supported' }),
  url: z.string(),
});

export function openAiFormat(spec: BatchSpec, openai: OpenAiSpec, schemaLimits: SchemaLimits): LineFormat {
  const created = Math.floor(spec.created / 1000);
  // Stable per job and line, so a batch redone after a crash writes the same bytes.
  const token = (line: number, kind: string) =>
    createHash("sha256").update(`${spec.id}:${line}:${kind}`).digest("hex").slice(0, 24);
  const chat = openai.endpoint === "/v1/chat/completions";
  const responses = openai.endpoint === "/v1/responses";
  const format = chat ? chatFormat : completionFormat;

  const parse = (line: InputLine): ParsedEntry => {
    const n = line.lineNumber;
    const object = jsonObject(line, '{"custom_id", "method", "url", "body"}');
    if ("failure" in object) return object.failure;
    const value = object.value;
    const id = idOf(value.custom_id, n);
    const head = RequestLine.safeParse(value);
    if (!head.success) return failedEntry(n, id, "invalid_request", describeIssues(head.error));
    // The expected values, never the line's own: error lines must not copy input into the output.
    if (head.data.url !== openai.endpoint)
      return failedEntry(n, id, "invalid_request", `url: expected "${openai.endpoint}", the batch's endpoint`);
    if (responses) return parseResponsesLine(n, id, value.body, openai.served_model, schemaLimits);
    const body = (chat ? ChatCompletionRequest : CompletionRequest).safeParse(value.body);
    if (!body.success) {
      // Named as fields of the line: `body.messages[0].role`.
      const inLine = new z.ZodError(body.error.issues.map((issue) => ({ ...issue, path: ["body", ...issue.path] })));
      return failedEntry(n, id, "invalid_request", describeIssues(inLine));
    }
    if (body.data.model !== openai.served_model) {
      return failedEntry(
        n,
        id,
        "invalid_request",
        `body.model: expected "${openai.served_model}", the model of the batch's first request (one model per batch)`,
      );
    }
    if (body.data.stream)
      return failedEntry(n, id, "invalid_request", "body.stream: streaming is not available in a batch");
    // A record's answer is one text: what needs more than that is refused, never dropped.
    const request = body.data;
    const tools = "tools" in request && request.tools?.length;
    const prompts = "prompt" in request ? promptsOf(request.prompt) : [];
    const unavailable = tools
      ? "tools"
      : request.logprobs != null && request.logprobs !== false
        ? "logprobs"
        : (request.n ?? 1) > 1
          ? "n"
          : "echo" in request && request.echo
            ? "echo"
            : undefined;
    if (unavailable)
      return failedEntry(
        n,
        id,
        "invalid_request",
        `body.${unavailable}: not available in a batch (one text answer per line); send the request online`,
      );
    if (prompts.length > 1)
      return failedEntry(
        n,
        id,
        "invalid_request",
        `body.prompt: ${prompts.length} prompts; a batch line answers one (one text answer per line): put each prompt on a line of its own`,
      );
    const overLimit = schemaLimitError(request, schemaLimits);
    if (overLimit) return failedEntry(n, id, overLimit.code, `body.${overLimit.message}`);
    const work =
      "messages" in request
        ? { kind: "chat" as const, messages: toMessages(request.messages) }
        : { kind: "prompt" as const, prompt: (prompts[0] as { prompt: Prompt }).prompt };
    return { ok: true, line: n, id, work, params: toParams(request) };
  };

  const render = (record: { line: number; id: string }, outcome: Outcome): string => {
    const id = `batch_req_${token(record.line, "line")}`;
    const requestId = `req_${token(record.line, "request")}`;
    // A failure without an HTTP error status is not an HTTP response: it must not read as an answer in the split.
    if (!outcome.ok && (outcome.status === undefined || outcome.status < 400)) {
      return JSON.stringify({
        id,
        custom_id: record.id,
        response: null,
        error: { code: outcome.code, message: outcome.message },
      } satisfies OutputLine);
    }
    let body: ResponseBody;
    if (outcome.ok && responses) {
      const answer = {
        text: outcome.text,
        finish_reason: outcome.finish_reason === "length" ? ("length" as const) : ("stop" as const),
        usage: {
          prompt_tokens: outcome.prompt_tokens ?? 0,
          completion_tokens: outcome.completion_tokens ?? 0,
          total_tokens: outcome.tokens,
        },
      };
      const newId: NewId = (prefix) => `${prefix}${token(record.line, prefix)}`;
      const shell = responseShell({ model: openai.served_model, input: "" }, newId("resp_"), created, false);
      body = completedResponse(shell, outputItems(answer, newId), answer);
    } else if (outcome.ok) {
      const usage = {
        prompt_tokens: outcome.prompt_tokens ?? 0,
        completion_tokens: outcome.completion_tokens ?? 0,
        total_tokens: outcome.tokens,
      };
      const base = {
        id: `${format.idPrefix}${token(record.line, "response")}`,
        created,
        model: openai.served_model,
        version: spec.version,
      };
      body = format.response(
        base,
        [{ text: outcome.text, finish_reason: outcome.finish_reason === "length" ? "length" : "stop" }],
        usage,
      );
    } else {
      body = errorEnvelope(
        new PlatformError(outcome.status as number, outcome.code, outcome.message, outcome.param ?? null),
      );
    }
    const status = outcome.ok ? 200 : (outcome.status as number);
    return JSON.stringify({
      id,
      custom_id: record.id,
      response: { status_code: status, request_id: requestId, body },
      error: null,
    } satisfies OutputLine);
  };

  // Whatever is not a 2xx answer is a failure: a line that does not read back (storage damage) stays
  // visible in the error file rather than being dropped or passed off as an answer.
  const failed = (text: string): boolean => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      console.error(`[batch ${spec.id}] a written line does not parse; it goes to the error file`);
      return true;
    }
    const line = WrittenLine.safeParse(value);
    if (!line.success) return true;
    const status = line.data.response?.status_code;
    return status === undefined || status < 200 || status >= 300 || line.data.error !== null;
  };

  return { parse, render, failed };
}
