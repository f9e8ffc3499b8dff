/**
 * What llama.cpp evaluates for a request: a raw prompt's tokens, a client's token ids (checked
 * against the vocabulary), or a chat rendered by the model's own template (its native tool syntax
 * where it has one, the generic tool format otherwise; no template: the plain fallback).
 */
import {
  type ChatWrapperGeneratedContextState,
  JinjaTemplateChatWrapper,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import type { ChatMessage } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { plainChatPrompt, type TextRequest } from "./engine.ts";
import { type CallSyntax, callSyntaxOf, nativeHistory } from "./llamacpp-native-tools.ts";
import { toolPromptMessages } from "./tool-format.ts";

/** `asGiven`: token ids from the client, to evaluate without the BOS token. */
export type Rendered = { tokens: Token[]; stopTriggers: string[]; asGiven?: boolean };

export class PromptRenderer {
  readonly chatTemplate: JinjaTemplateChatWrapper | undefined;
  /** The template's own tool-call syntax; without one, tools use the generic format (tool-format.ts). */
  readonly callSyntax: CallSyntax | undefined;
  /** The token the engine puts first (null: none), as LlamaCompletion would: counted so usage is exact. */
  readonly bos: Token | null;
  readonly vocabularySize: number;
  private readonly model: LlamaModel;

  constructor(model: LlamaModel) {
    this.model = model;
    const template = model.fileInfo.metadata.tokenizer?.chat_template;
    this.chatTemplate =
      typeof template === "string" && template.length > 0 ? new JinjaTemplateChatWrapper({ template }) : undefined;
    this.callSyntax = callSyntaxOf(this.chatTemplate);
    const wantsBos = model.vocabularyType === "wpm" || model.tokens.shouldPrependBosToken;
    this.bos = wantsBos && model.vocabularyType !== "rwkv" && model.vocabularyType !== "ugm" ? model.tokens.bos : null;
    const vocabulary = model.fileInfo.metadata.tokenizer?.ggml?.tokens;
    this.vocabularySize = Array.isArray(vocabulary) ? vocabulary.length : 0;
  }

  render(request: TextRequest): Rendered {
    // A raw prompt is tokenized as llama.cpp's server and the checkpoint's own (transformers) tokenizer do: a
    // SentencePiece vocabulary that prefixes a space ("▁Once") keeps it, so a converted checkpoint continues
    // a prompt exactly as transformers does (test/e2e/model-directories.test.ts).
    if (request.kind === "prompt")
      return typeof request.prompt === "string"
        ? { tokens: this.model.tokenize(request.prompt, false), stopTriggers: [] }
        : { tokens: this.checkedTokenIds(request.prompt, "prompt", "prompt"), stopTriggers: [], asGiven: true };
    const tokenizeOptions = this.bos === null ? undefined : ("trimLeadingSpace" as const);
    // Earlier calls and results: in the template's own syntax where it has one, in the generic format otherwise.
    if (this.chatTemplate && this.callSyntax)
      return this.tokensOf(
        this.chatTemplate.generateContextState({
          chatHistory: [...nativeHistory(request.messages), { type: "model", response: [] }],
        }),
      );
    const messages = toolPromptMessages(request.messages, request.tools);
    if (!this.chatTemplate) {
      return { tokens: this.model.tokenize(plainChatPrompt(messages), false, tokenizeOptions), stopTriggers: [] };
    }
    return this.tokensOf(
      this.chatTemplate.generateContextState({
        chatHistory: [...messages.map(toHistoryItem), { type: "model", response: [] }],
      }),
    );
  }

  /** A rendered chat as tokens, and the template's stop texts. */
  tokensOf(state: ChatWrapperGeneratedContextState): { tokens: Token[]; stopTriggers: string[] } {
    const tokenizeOptions = this.bos === null ? undefined : ("trimLeadingSpace" as const);
    let tokens = state.contextText.tokenize(this.model.tokenizer, tokenizeOptions);
    // Templates usually render the BOS token themselves; decode() prepends one too.
    if (this.bos !== null && tokens[0] === this.bos) tokens = tokens.slice(1);
    const stopTriggers = state.stopGenerationTriggers.map((t) => t.toString()).filter((t) => t.length > 0);
    return { tokens, stopTriggers };
  }

  /** What is evaluated: the BOS token first, unless the client's token ids are to be taken as given. */
  evaluated(tokens: Token[], asGiven?: boolean): Token[] {
    return this.bos === null || asGiven ? tokens : [this.bos, ...tokens];
  }

  /**
   * Token ids from a client, at `path` of the field `param`: one outside the vocabulary would make
   * llama.cpp read past its tables.
   */
  checkedTokenIds(ids: number[], path: string, param: string): Token[] {
    const bad = ids.findIndex((id) => id >= this.vocabularySize);
    if (bad >= 0)
      throw new PlatformError(
        400,
        "invalid_request",
        `${path}[${bad}]: token ${ids[bad]} is not in this model's vocabulary (${this.vocabularySize} tokens)`,
        param,
      );
    return ids as Token[];
  }
}

function toHistoryItem(m: ChatMessage) {
  if (m.role === "system") return { type: "system" as const, text: m.content };
  if (m.role === "user" || m.role === "tool") return { type: "user" as const, text: m.content };
  return { type: "model" as const, response: [m.content] };
}
