/**
 * OpenAI's Responses API, the answer side: the response object, its output items, its input
 * items as GET /v1/responses/{id}/input_items lists them, and the typed stream events, shaped
 * as openai's `Response`, `ResponseOutputItem` and `ResponseStreamEvent` types have them (the
 * SDKs' `output_text` is built from these shapes, so they are exact). Built from a chat job's
 * result (job.ts TextResult); the request side is responses.ts.
 */
import type { FinishReason, ToolCall, Usage } from "../job.ts";
import type { InputItem, ResponseCreateRequest, ResponseTextFormat } from "./responses.ts";

type Status = "in_progress" | "completed" | "incomplete" | "failed";
type OutputText = { type: "output_text"; text: string; annotations: never[]; logprobs: never[] };
export type OutputMessage = {
  type: "message";
  id: string;
  status: Exclude<Status, "failed">;
  role: "assistant";
  content: OutputText[];
};
export type FunctionCallOutput = {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: Exclude<Status, "failed">;
};
export type OutputItem = OutputMessage | FunctionCallOutput;

export type ResponseUsage = {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
};

type EchoedTool = {
  type: "function";
  name: string;
  description: string | null;
  parameters: Record<string, unknown> | null;
  strict: boolean | null;
};

export type ResponseObject = {
  id: string;
  object: "response";
  created_at: number;
  status: Status;
  background: false;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: "max_output_tokens" } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  reasoning: { effort: null; summary: null };
  store: boolean;
  temperature: number | null;
  text: { format: ResponseTextFormat };
  tool_choice: NonNullable<ResponseCreateRequest["tool_choice"]>;
  tools: EchoedTool[];
  top_p: number | null;
  truncation: "disabled";
  usage: ResponseUsage | null;
  user: string | null;
  metadata: Record<string, string>;
};

/** An input item as stored and listed: with its id (`msg_…`, `fc_…`, `fco_…`) and status. */
export type ListedItem = InputItem & { id: string; status: "completed" };

/** Fresh ids for a response and its items: the caller's to make (random hex). */
export type NewId = (prefix: "resp_" | "msg_" | "fc_" | "fco_") => string;

/**
 * The response before anything is generated, as the request set it; `store` whether it is kept.
 * The SDKs read `model`, `status`, `output` and `usage`; the rest echoes the request, as OpenAI's.
 */
export function responseShell(
  body: ResponseCreateRequest,
  id: string,
  createdAt: number,
  store: boolean,
): ResponseObject {
  return {
    id,
    object: "response",
    created_at: createdAt,
    status: "in_progress",
    background: false,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: body.model,
    output: [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store,
    temperature: body.temperature ?? null,
    text: { format: body.text?.format ?? { type: "text" } },
    tool_choice: body.tool_choice ?? "auto",
    tools: (body.tools ?? []).map((t) => ({
      type: "function",
      name: t.name,
      description: t.description ?? null,
      parameters: t.parameters ?? null,
      strict: t.strict ?? null,
    })),
    top_p: body.top_p ?? null,
    truncation: "disabled",
    usage: null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  };
}

/**
 * A chat job's usage in the Responses API's words. `cached_tokens`: the prompt tokens a replica
 * found in its prompt cache, where its result reports them (0 where it does not).
 */
export function responseUsage(usage: Usage): ResponseUsage {
  const details = (usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details;
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: details?.cached_tokens ?? 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
  };
}

export const outputText = (text: string): OutputText => ({ type: "output_text", text, annotations: [], logprobs: [] });

export function messageItem(id: string, text: string, status: OutputMessage["status"]): OutputMessage {
  return { type: "message", id, status, role: "assistant", content: [outputText(text)] };
}

export function functionCallItem(id: string, call: ToolCall, status: FunctionCallOutput["status"]): FunctionCallOutput {
  return {
    type: "function_call",
    id,
    call_id: call.id,
    name: call.function.name,
    arguments: call.function.arguments,
    status,
  };
}

/** What an answer's output is: its text as a message (unless it only called tools), then each call. */
export type Answered = { text: string; finish_reason: FinishReason; tool_calls?: ToolCall[]; usage: Usage };

/** The finished response: the shell with its output, status and usage. */
export function completedResponse(shell: ResponseObject, output: OutputItem[], answer: Answered): ResponseObject {
  const cut = answer.finish_reason === "length";
  return {
    ...shell,
    status: cut ? "incomplete" : "completed",
    incomplete_details: cut ? { reason: "max_output_tokens" } : null,
    output,
    usage: responseUsage(answer.usage),
  };
}

/** The output items of an answer, with fresh ids. */
export function outputItems(answer: Answered, newId: NewId): OutputItem[] {
  const status = answer.finish_reason === "length" ? "incomplete" : "completed";
  const calls = answer.tool_calls ?? [];
  return [
    ...(answer.text !== "" || calls.length === 0 ? [messageItem(newId("msg_"), answer.text, status)] : []),
    ...calls.map((call) => functionCallItem(newId("fc_"), call, status)),
  ];
}

/** The request's input items as listed and carried on: each with an id. */
export function listedItems(items: InputItem[], newId: NewId): ListedItem[] {
  return items.map((item) => {
    const prefix = item.type === "message" ? "msg_" : item.type === "function_call" ? "fc_" : "fco_";
    const content =
      item.type === "message" && typeof item.content === "string"
        ? { content: [{ type: item.role === "assistant" ? "output_text" : "input_text", text: item.content }] }
        : {};
    return { ...item, ...content, id: item.id ?? newId(prefix), status: "completed" } as ListedItem;
  });
}

/** An output item carried into the next turn's conversation (previous_response_id) as an input item. */
export function asInputItem(item: OutputItem): InputItem {
  return item.type === "message"
    ? { type: "message", id: item.id, role: "assistant", content: item.content }
    : {
        type: "function_call",
        id: item.id,
        call_id: item.call_id,
        name: item.name,
        arguments: item.arguments,
      };
}

/** GET /v1/responses/{id}/input_items, OpenAI's cursor list. */
export type ItemList = {
  object: "list";
  data: ListedItem[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
};

export function itemList(
  items: ListedItem[],
  options: { order: "asc" | "desc"; limit: number; after?: string },
): ItemList {
  let ordered = options.order === "desc" ? [...items].reverse() : items;
  if (options.after) {
    const at = ordered.findIndex((i) => i.id === options.after);
    ordered = at < 0 ? [] : ordered.slice(at + 1);
  }
  const data = ordered.slice(0, options.limit);
  return {
    object: "list",
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: ordered.length > data.length,
  };
}

/** One typed stream event: its `type`, its fields, and the `sequence_number` every event carries. */
export type StreamEvent = { type: string; sequence_number: number } & Record<string, unknown>;

/**
 * The stream's events, in OpenAI's order: created, in_progress, then per output item its added,
 * its content (text part and deltas, or a call's argument deltas), its done, and last completed,
 * incomplete or failed. Numbers them as they are made.
 */
export class ResponseEvents {
  private sequence = 0;
  private outputs: OutputItem[] = [];
  private message: { id: string; index: number; text: string } | undefined;
  private readonly newId: NewId;

  constructor(newId: NewId) {
    this.newId = newId;
  }

  private event(type: string, fields: Record<string, unknown>): StreamEvent {
    return { type, sequence_number: this.sequence++, ...fields };
  }

  /** What the stream has put out so far. */
  get output(): OutputItem[] {
    return this.outputs;
  }

  started(shell: ResponseObject): StreamEvent[] {
    return [
      this.event("response.created", { response: shell }),
      this.event("response.in_progress", { response: shell }),
    ];
  }

  /** A text delta; the first opens the message item and its output_text part. */
  text(delta: string): StreamEvent[] {
    const events: StreamEvent[] = [];
    if (!this.message) {
      this.message = { id: this.newId("msg_"), index: this.outputs.length, text: "" };
      const item = { type: "message", id: this.message.id, status: "in_progress", role: "assistant", content: [] };
      this.outputs.push(messageItem(this.message.id, "", "in_progress"));
      events.push(this.event("response.output_item.added", { output_index: this.message.index, item }));
      events.push(
        this.event("response.content_part.added", {
          item_id: this.message.id,
          output_index: this.message.index,
          content_index: 0,
          part: outputText(""),
        }),
      );
    }
    if (delta === "") return events;
    this.message.text += delta;
    events.push(
      this.event("response.output_text.delta", {
        item_id: this.message.id,
        output_index: this.message.index,
        content_index: 0,
        delta,
        logprobs: [],
      }),
    );
    return events;
  }

  /**
   * The answer's end: the message closed with the text its deltas joined to, each tool call as an
   * item of its own (its arguments in one delta: the engine parses a call whole), then the final
   * event. Returns the finished response too.
   */
  finish(shell: ResponseObject, answer: Answered): { events: StreamEvent[]; response: ResponseObject } {
    const status = answer.finish_reason === "length" ? "incomplete" : "completed";
    const calls = answer.tool_calls ?? [];
    const events: StreamEvent[] = [];
    if (!this.message && calls.length === 0) events.push(...this.text(""));
    if (this.message) {
      const { id, index, text } = this.message;
      const item = messageItem(id, text, status);
      this.outputs[index] = item;
      const at = { item_id: id, output_index: index, content_index: 0 };
      events.push(this.event("response.output_text.done", { ...at, text, logprobs: [] }));
      events.push(this.event("response.content_part.done", { ...at, part: outputText(text) }));
      events.push(this.event("response.output_item.done", { output_index: index, item }));
    }
    for (const call of calls) {
      const index = this.outputs.length;
      const done = functionCallItem(this.newId("fc_"), call, status);
      this.outputs.push(done);
      const at = { item_id: done.id, output_index: index };
      events.push(
        this.event("response.output_item.added", {
          output_index: index,
          item: { ...done, arguments: "", status: "in_progress" },
        }),
      );
      events.push(this.event("response.function_call_arguments.delta", { ...at, delta: done.arguments }));
      events.push(
        this.event("response.function_call_arguments.done", { ...at, name: done.name, arguments: done.arguments }),
      );
      events.push(this.event("response.output_item.done", { output_index: index, item: done }));
    }
    const response = completedResponse(shell, this.outputs, answer);
    events.push(
      this.event(response.status === "incomplete" ? "response.incomplete" : "response.completed", { response }),
    );
    return { events, response };
  }

  /** A failure after the stream began: the response as far as it got, with the error. */
  failed(shell: ResponseObject, error: { code: string; message: string }): StreamEvent {
    return this.event("response.failed", {
      response: { ...shell, status: "failed", error, output: this.outputs },
    });
  }
}
