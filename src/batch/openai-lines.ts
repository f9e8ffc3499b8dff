/**
 * OpenAI batch lines. Input: `{custom_id, method: "POST", url, body}` with the
 * body of a /v1/completions or /v1/chat/completions request. Output, one
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
import { errorTypeFor } from "../errors.ts";
import { ChatCompletionRequest, CompletionRequest, toMessages, toParams } from "../gateway/schemas.ts";
import type { LineFormat } from "./formats.ts";
import { failure, idOf, type InputLine, jsonObject, type ParsedRecord } from "./input.ts";
import type { Outcome } from "./output.ts";
import type { BatchSpec, OpenAiSpec } from "./records.ts";

/** What the split needs of a line already written (our own, read back from storage). */
const WrittenLine = z.object({
  response: z.object({ status_code: z.number().int() }).nullable(),
  error: z.unknown(),
});

const RequestLine = z.object({
  custom_id: z.string().min(1).max(512),
  method: z.literal("POST", { message: 'only "POST" is supported' }),
  url: z.string(),
});

export function openAiFormat(spec: BatchSpec, openai: OpenAiSpec): LineFormat {
  const created = Math.floor(spec.created / 1000);
  // Stable per job and line, so a batch redone after a crash writes the same bytes.
  const token = (line: number, kind: string) => createHash("sha256").update(`${spec.id}:${line}:${kind}`).digest("hex").slice(0, 24);
  const chat = openai.endpoint === "/v1/chat/completions";

  const parse = (line: InputLine): ParsedRecord => {
    const n = line.lineNumber;
    const object = jsonObject(line, '{"custom_id", "method", "url", "body"}');
    if ("failure" in object) return object.failure;
    const value = object.value;
    const id = idOf(value.custom_id, n);
    const head = RequestLine.safeParse(value);
    if (!head.success) return failure(n, id, "invalid_request", describeIssues(head.error));
    // The expected values, never the line's own: error lines must not copy input into the output.
    if (head.data.url !== openai.endpoint) return failure(n, id, "invalid_request", `url: expected "${openai.endpoint}", the batch's endpoint`);
    const body = (chat ? ChatCompletionRequest : CompletionRequest).safeParse(value.body);
    if (!body.success) return failure(n, id, "invalid_request", describeIssues(body.error).replace(/^|; /g, (m) => `${m}body.`));
    if (body.data.model !== openai.served_model) {
      return failure(n, id, "invalid_request", `body.model: expected "${openai.served_model}", the model of the batch's first request (one model per batch)`);
    }
    if (body.data.stream) return failure(n, id, "invalid_request", "body.stream: streaming is not available in a batch");
    // A record's answer is one text: what needs more than that is refused, never dropped.
    const fields = body.data as { tools?: unknown[] | null; logprobs?: unknown; n?: number | null };
    const unavailable = fields.tools?.length ? "tools" : fields.logprobs != null && fields.logprobs !== false ? "logprobs" : (fields.n ?? 1) > 1 ? "n" : undefined;
    if (unavailable) return failure(n, id, "invalid_request", `body.${unavailable}: not available in a batch (one text answer per line); send the request online`);
    const params = toParams(body.data);
    const work =
      "messages" in body.data
        ? { kind: "chat" as const, messages: toMessages(body.data.messages) }
        : { kind: "prompt" as const, prompt: typeof body.data.prompt === "string" ? body.data.prompt : (body.data.prompt[0] ?? "") };
    return { ok: true, line: n, id, work, params: Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) };
  };

  const render = (record: { line: number; id: string }, outcome: Outcome): string => {
    const id = `batch_req_${token(record.line, "line")}`;
    const requestId = `req_${token(record.line, "request")}`;
    // A failure without an HTTP error status is not an HTTP response: it must not read as an answer in the split.
    if (!outcome.ok && (outcome.status === undefined || outcome.status < 400)) {
      return JSON.stringify({ id, custom_id: record.id, response: null, error: { code: outcome.code, message: outcome.message } });
    }
    let body: unknown;
    if (outcome.ok) {
      const finish = outcome.finish_reason === "length" ? "length" : "stop";
      const usage = { prompt_tokens: outcome.prompt_tokens ?? 0, completion_tokens: outcome.completion_tokens ?? 0, total_tokens: outcome.tokens };
      const responseId = `${chat ? "chatcmpl-" : "cmpl-"}${token(record.line, "response")}`;
      body = chat
        ? { id: responseId, object: "chat.completion", created, model: openai.served_model, choices: [{ index: 0, message: { role: "assistant", content: outcome.text }, logprobs: null, finish_reason: finish }], usage }
        : { id: responseId, object: "text_completion", created, model: openai.served_model, choices: [{ index: 0, text: outcome.text, logprobs: null, finish_reason: finish }], usage };
    } else {
      const status = outcome.status as number;
      body = { error: { message: outcome.message, type: errorTypeFor(status), param: outcome.param ?? null, code: outcome.code } };
    }
    const status = outcome.ok ? 200 : (outcome.status as number);
    return JSON.stringify({ id, custom_id: record.id, response: { status_code: status, request_id: requestId, body }, error: null });
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
