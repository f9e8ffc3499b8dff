/**
 * vLLM's (and llama.cpp server's) POST /tokenize and /detokenize, as the gateway serves them
 * (routes/tokenize.ts): `{model, prompt}` or `{model, messages}` (rendered by the model's chat
 * template, as a chat job's prompt is) → `{count, max_model_len, tokens}`; `{model, tokens}` →
 * `{prompt}`. Both become a `tokenize` job (job.ts). Fields vLLM has that this server cannot
 * honour are refused naming them, as on the OpenAI routes (vLLM serves them beside its OpenAI API).
 */
import { z } from "zod";
import { FunctionTool, MAX_TOKEN_ID, MAX_TOOLS, type TokenizeJob } from "../job.ts";
import { ChatRequestMessage, toMessages } from "./chat.ts";
import { openAiBody } from "./common.ts";

const DOC = "docs/http-api.md, Tokenize";

const PromptForm = openAiBody(
  { model: z.string().min(1), prompt: z.string(), add_special_tokens: z.boolean().nullish() },
  DOC,
);
const MessagesForm = openAiBody(
  {
    model: z.string().min(1),
    messages: z.array(ChatRequestMessage).min(1, "messages must contain at least one message"),
    tools: z.array(FunctionTool).max(MAX_TOOLS).nullish(),
    /** The chat is rendered as a chat job's prompt is: ready for the model's answer. */
    add_generation_prompt: z
      .literal(true, { error: () => "only true is supported: the chat is rendered as a chat request's prompt" })
      .nullish(),
  },
  DOC,
);

/** Which form a body takes is its `messages` or `prompt`; errors then name the fields of that form. */
export function tokenizeForm(body: unknown): typeof PromptForm | typeof MessagesForm {
  return body && typeof body === "object" && "messages" in body ? MessagesForm : PromptForm;
}
export type TokenizeRequest = z.infer<typeof PromptForm> | z.infer<typeof MessagesForm>;

export const DetokenizeRequest = openAiBody(
  {
    model: z.string().min(1),
    tokens: z.array(z.number().int().min(0).max(MAX_TOKEN_ID)).max(1_000_000),
  },
  DOC,
);
export type DetokenizeRequest = z.infer<typeof DetokenizeRequest>;

export function tokenizeInput(body: TokenizeRequest): TokenizeJob["input"] {
  if ("messages" in body)
    return { messages: toMessages(body.messages), ...(body.tools?.length ? { tools: body.tools } : {}) };
  return { prompt: body.prompt, ...(body.add_special_tokens === false ? { add_special_tokens: false } : {}) };
}

export type Tokenized = { count: number; max_model_len: number; tokens: number[] };
export type Detokenized = { prompt: string };
