/**
 * A stand-in for `vllm serve` where there is no GPU: the same command line,
 * the same OpenAI-compatible routes and vLLM's shapes for streams, usage and
 * errors, with deterministic text. Started through a `#!/usr/bin/env node`
 * launcher that test/integration/vllm-engine.test.ts writes into a temp dir and runs `main`.
 *
 * Environment:
 *   FAKE_VLLM_RECORD        file receiving {argv, pid, malloc: its MALLOC_* variables} at start; requests are appended to `<file>.requests.jsonl`
 *   FAKE_VLLM_EXIT          print this as a Python error on stderr and exit 1 before listening
 *   FAKE_VLLM_NEVER_HEALTHY /health always answers 503
 *   FAKE_VLLM_IGNORE_TERM   survive SIGTERM (only SIGKILL stops it)
 *   FAKE_VLLM_NO_TEMPLATE   /v1/chat/completions fails as for a tokenizer without a chat template
 *   FAKE_VLLM_RUNNER        "generate" (default) or "pooling": the other kind's routes answer vLLM's 501
 *   VLLM_ALLOW_RUNTIME_LORA_UPDATING  with --enable-lora, "True" turns on /v1/load_lora_adapter and /v1/unload_lora_adapter (as vLLM)
 *
 * With --enable-lora, adapters loaded through the API answer as models of their own name, their
 * text prefixed with "[<lora name>]"; more than --max-loras at once is fine (vLLM swaps them).
 *
 * Tokens, as vLLM's tokenizer would give them: a text is its words, each with the whitespace before
 * it (`fakePieces`), after a BOS token `<s>` (id 1) that a text prompt gets and token ids do not
 * (usage counts it); token id `i` reads as `i`. A prompt token's score is `fakeLogprob(piece)`.
 * `/tokenize` answers vLLM's TokenizeResponse. A non-streamed /v1/completions (`stream` false)
 * answers vLLM's CompletionResponse, and there `echo` is vLLM's (serving_completion.py): the
 * prompt first in `text` and in the legacy logprobs arrays (the first token null; each map
 * holding the token beside the `logprobs` best, at most logprobs + 1 entries), `prompt_logprobs`
 * beside them, and with `max_tokens: 0` the prompt alone, though one token is sampled and counted
 * in usage. Streamed requests ignore `echo`, and generated tokens carry no logprobs.
 */
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { chmod, writeFile } from "node:fs/promises";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";

/** What every completion says, one token per piece. */
export const STORY = [
  "Once",
  " upon",
  " a",
  " time",
  " there",
  " was",
  " a",
  " little",
  " fox",
  " who",
  " loved",
  " to",
  " run",
  " through",
  " the",
  " quiet",
  " green",
  " woods",
  " every",
  " day",
  ".",
];
export const CHAT_REPLY = ["Hello", "!", " How", " can", " I", " help", "?"];
/** /health answers 503 this many times before 200, as vLLM does while its engine starts. */
export const UNHEALTHY_POLLS = 2;
export const TOO_LONG_MESSAGE =
  "This model's maximum context length is 64 tokens. However, you requested 1010 tokens (1000 in the messages, 10 in the completion). Please reduce the length of the messages or completion.";
export const NO_TEMPLATE_MESSAGE =
  "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.";

/** Token ids from here on are past the fake's vocabulary: vLLM refuses them. */
export const VOCABULARY_SIZE = 32_000;

/** Tokens as the fake counts them: whitespace-separated words (token ids: one each). */
export function countTokens(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}

export const BOS = { id: 1, text: "<s>" };

/** A text's tokens (without BOS): each word with the whitespace before it, so they concatenate to the text. */
export function fakePieces(text: string): string[] {
  return text.match(/\s*\S+/g) ?? [];
}

/** The fake model's log-probability of a prompt token given the ones before it (a BOS-first token included). */
export function fakeLogprob(piece: string): number {
  return -(0.25 + 0.125 * (piece.trim().length % 8));
}

/** The likeliest alternatives after any token, best first, all less likely than the token itself. */
const ALTERNATIVES = Array.from({ length: 20 }, (_, r): [string, number] => [`<alt${r}>`, -3 - 0.1 * r]);

function fakeId(piece: string): number {
  let h = 7;
  for (const c of piece) h = (h * 31 + (c.codePointAt(0) ?? 0)) % (VOCABULARY_SIZE - 100);
  return 100 + h;
}

/** The prompt vLLM would build from chat messages; only its token count matters here. */
export function renderChat(messages: { role: string; content: string }[]): string {
  return `${messages.map((m) => `<|${m.role}|> ${m.content}`).join(" ")} <|assistant|>`;
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

/**
 * Writes `<dir>/vllm`, an executable that runs this fake as `vllm serve` would run: the `bin` a
 * test's vLLM engine launches. Its path.
 */
export async function writeFakeVllmBin(dir: string): Promise<string> {
  const bin = join(dir, "vllm");
  const source = fileURLToPath(import.meta.url);
  await writeFile(bin, `#!/usr/bin/env node\nimport { main } from ${JSON.stringify(source)};\nmain();\n`);
  await chmod(bin, 0o755);
  return bin;
}

/** The launcher's `#!/usr/bin/env node` must find this Node (type stripping), not an older one on PATH. */
export function fakeVllmPath(): string {
  return `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`;
}

export function main(): void {
  const argv = process.argv.slice(2);
  const record = process.env.FAKE_VLLM_RECORD;
  if (record)
    writeFileSync(
      record,
      JSON.stringify({
        argv,
        pid: process.pid,
        malloc: Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("MALLOC_"))),
        loraUpdating: process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? null,
      }),
    );
  const log = (entry: unknown) => {
    if (record) appendFileSync(`${record}.requests.jsonl`, `${JSON.stringify(entry)}\n`);
  };
  if (process.env.FAKE_VLLM_EXIT) {
    process.stderr.write(
      `Traceback (most recent call last):\n  File "vllm/entrypoints/cli/main.py", line 1\nValueError: ${process.env.FAKE_VLLM_EXIT}\n`,
    );
    process.exit(1);
  }
  if (process.env.FAKE_VLLM_IGNORE_TERM) process.on("SIGTERM", () => undefined);
  const port = Number(flag(argv, "--port") ?? 8000);
  if (argv[0] !== "serve") throw new Error(`fake vllm: expected "vllm serve <model> ...", got ${argv.join(" ")}`);
  const served = flag(argv, "--served-model-name") ?? argv[1] ?? "model";
  let healthPolls = 0;
  const lora = argv.includes("--enable-lora") && process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING === "True";
  /** Adapters loaded through the API: name → path. */
  const adapters = new Map<string, string>();
  /** The pieces /tokenize has made, by id, for /detokenize (the fake's ids are hashes). */
  const spoken = new Map<number, string>();

  const server = createServer(async (req, res) => {
    const body = req.method === "POST" ? await readJson(req) : undefined;
    log({ method: req.method, path: req.url, body });
    if (req.url === "/health") {
      healthPolls++;
      const ok = !process.env.FAKE_VLLM_NEVER_HEALTHY && healthPolls > UNHEALTHY_POLLS;
      res.writeHead(ok ? 200 : 503).end();
      return;
    }
    if (req.url === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }).end(metricsText(served));
      return;
    }
    // vLLM's --api-key (VLLM_API_KEY): every /v1 route wants it as a bearer token.
    const apiKey = process.env.VLLM_API_KEY;
    if (apiKey && req.url?.startsWith("/v1") && req.headers.authorization !== `Bearer ${apiKey}`) {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ error: "Unauthorized" }));
      return;
    }
    if (
      lora &&
      req.method === "POST" &&
      (req.url === "/v1/load_lora_adapter" || req.url === "/v1/unload_lora_adapter")
    ) {
      const { lora_name: name, lora_path: path } = (body ?? {}) as { lora_name?: string; lora_path?: string };
      if (typeof name !== "string") return sendError(res, 400, "BadRequestError", "lora_name is required");
      if (req.url === "/v1/unload_lora_adapter") {
        if (!adapters.delete(name))
          return sendError(res, 404, "NotFoundError", `The lora adapter '${name}' cannot be found.`);
        res.writeHead(200).end(`Success: LoRA adapter '${name}' removed successfully.`);
        return;
      }
      if (adapters.has(name))
        return sendError(res, 400, "BadRequestError", `The lora adapter '${name}' has already been loaded.`);
      if (typeof path !== "string" || !existsSync(join(path, "adapter_config.json")))
        return sendError(res, 404, "NotFoundError", `No adapter found for ${String(path)}`);
      adapters.set(name, path);
      res.writeHead(200).end(`Success: LoRA adapter '${name}' added successfully.`);
      return;
    }
    if (req.url === "/tokenize" && req.method === "POST") {
      const t = (body ?? {}) as { prompt?: unknown; messages?: unknown; add_special_tokens?: boolean };
      // A chat is rendered as /v1/chat/completions renders it (with the generation prompt).
      const text = Array.isArray(t.messages) ? renderChat(t.messages) : t.prompt;
      if (typeof text !== "string") return sendError(res, 400, "BadRequestError", "prompt: Field required");
      const pieces = fakePieces(text);
      for (const piece of pieces) spoken.set(fakeId(piece), piece);
      const tokens = [...(t.add_special_tokens === false ? [] : [BOS.id]), ...pieces.map(fakeId)];
      sendJson(res, 200, { count: tokens.length, max_model_len: 2048, tokens, token_strs: null });
      return;
    }
    if (req.url === "/detokenize" && req.method === "POST") {
      const ids = ((body ?? {}) as { tokens?: number[] }).tokens ?? [];
      sendJson(res, 200, {
        prompt: ids.map((id) => (id === BOS.id ? BOS.text : (spoken.get(id) ?? "<unk>"))).join(""),
      });
      return;
    }
    const route = req.url === "/v1/completions" || req.url === "/v1/chat/completions" || req.url === "/v1/embeddings";
    if (!route || req.method !== "POST") return sendError(res, 404, "NotFoundError", "Not Found");
    if (typeof body !== "object" || body === null) return sendError(res, 400, "BadRequestError", "invalid JSON");
    const b = body as Record<string, unknown>;
    if (b.model !== served && !adapters.has(String(b.model)))
      return sendError(res, 404, "NotFoundError", `The model \`${String(b.model)}\` does not exist.`);
    const pooling = process.env.FAKE_VLLM_RUNNER === "pooling";
    if (req.url === "/v1/embeddings") {
      return pooling
        ? embeddings(res, b)
        : sendError(res, 501, "NotImplementedError", "The model does not support Embeddings API");
    }
    if (pooling) {
      const api = req.url === "/v1/completions" ? "Completions" : "Chat Completions";
      return sendError(res, 501, "NotImplementedError", `The model does not support ${api} API`);
    }
    if (req.url === "/v1/chat/completions" && process.env.FAKE_VLLM_NO_TEMPLATE) {
      return sendError(res, 400, "BadRequestError", NO_TEMPLATE_MESSAGE);
    }
    const chat = req.url === "/v1/chat/completions";
    const ids = Array.isArray(b.prompt) ? (b.prompt as number[]) : undefined;
    const largest = Math.max(...(ids ?? []));
    if (largest >= VOCABULARY_SIZE)
      return sendError(res, 400, "BadRequestError", `Token id ${largest} is out of vocabulary`);
    const promptText = chat
      ? renderChat(b.messages as { role: string; content: string }[])
      : (ids?.join(" ") ?? String(b.prompt));
    if (promptText.includes("TOO_LONG")) return sendError(res, 400, "BadRequestError", TOO_LONG_MESSAGE);
    // vLLM's check (engine/processor.py): a priority needs --scheduling-policy priority.
    if (b.priority !== undefined && b.priority !== 0 && flag(argv, "--scheduling-policy") !== "priority")
      return sendError(
        res,
        400,
        "BadRequestError",
        `Got priority ${String(b.priority)} but Priority scheduling is not enabled.`,
      );
    if (b.max_tokens === 0 && !(b.echo === true && !chat))
      return sendError(res, 400, "BadRequestError", "max_tokens must be at least 1, got 0.");
    if (!chat && b.stream !== true) return completion(res, b, ids);
    await generate(res, b, chat, promptText, log);
  });
  // vLLM binds its port only once the model is loaded.
  setTimeout(() => server.listen(port, "127.0.0.1"), 200);
}

async function generate(
  res: ServerResponse,
  b: Record<string, unknown>,
  chat: boolean,
  promptText: string,
  log: (entry: unknown) => void,
): Promise<void> {
  // Like vLLM: an absent max_tokens is 16 on /v1/completions; null means up to the context window.
  const maxTokens =
    b.max_tokens === undefined ? (chat ? Infinity : 16) : b.max_tokens === null ? Infinity : Number(b.max_tokens);
  const options = (b.stream_options ?? {}) as { include_usage?: boolean; continuous_usage_stats?: boolean };
  // A text prompt's BOS counts, as in vLLM; a chat's template is taken to hold its own.
  const promptTokens = countTokens(promptText) + (!chat && typeof b.prompt === "string" ? 1 : 0);
  const usageAt = (completion: number) => ({
    prompt_tokens: promptTokens,
    completion_tokens: completion,
    total_tokens: promptTokens + completion,
  });
  const object = chat ? "chat.completion.chunk" : "text_completion";
  const base = { id: "cmpl-fake", object, created: Math.floor(Date.now() / 1000), model: b.model };
  // vLLM's stop_reason: the stop string that ended it, on the last chunk.
  const choice = (piece: string, finish: string | null, stopReason: string | null = null) =>
    chat
      ? { index: 0, delta: { content: piece }, logprobs: null, finish_reason: finish, stop_reason: stopReason }
      : { index: 0, text: piece, logprobs: null, finish_reason: finish, stop_reason: stopReason };
  const send = (obj: unknown) => res.write(`data: ${JSON.stringify(obj)}\n\n`);

  let closed = false;
  res.on("close", () => {
    if (!res.writableFinished) {
      closed = true;
      log({ event: "client_closed" });
    }
  });
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  if (chat) send({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });

  // A LoRA adapter's answer says whose it is (the served model's name is a flag the fake knows; an adapter's is not it).
  const story = chat ? CHAT_REPLY : STORY;
  const own = typeof b.model === "string" && b.model.includes("@") ? [`[${b.model}]`, ...story] : story;
  const { pieces, finish, stopReason } = promptText.includes("SLOW")
    ? { pieces: endless(maxTokens), finish: "length", stopReason: null }
    : planned(own, maxTokens, b.stop);
  let produced = 0;
  for (const [piece, last] of pieces) {
    if (closed) return;
    produced++;
    send({
      ...base,
      choices: [choice(piece, last ? finish : null, last ? stopReason : null)],
      usage: options.continuous_usage_stats ? usageAt(produced) : null,
    });
    if (!last) await new Promise((r) => setTimeout(r, 10));
  }
  if (produced === 0) send({ ...base, choices: [choice("", finish, stopReason)] });
  if (options.include_usage) send({ ...base, choices: [], usage: usageAt(produced) });
  res.end("data: [DONE]\n\n");
}

/** A prompt's tokens as vLLM holds them: BOS and the text's pieces, or the ids as given. */
function promptTokens(b: Record<string, unknown>, ids: number[] | undefined): { id: number; text: string }[] {
  if (ids) return ids.map((id, i) => ({ id, text: i === 0 ? String(id) : ` ${id}` }));
  return [BOS, ...fakePieces(String(b.prompt)).map((text) => ({ id: fakeId(text), text }))];
}

/**
 * A non-streamed /v1/completions answer (vLLM's CompletionResponse, request_output_to_completion_response):
 * the story up to max_tokens or a stop string; with `echo`, the prompt first.
 */
function completion(res: ServerResponse, b: Record<string, unknown>, ids: number[] | undefined): void {
  const prompt = promptTokens(b, ids);
  const echo = b.echo === true;
  const top = typeof b.logprobs === "number" ? b.logprobs : null;
  const maxTokens = b.max_tokens === undefined ? 16 : b.max_tokens === null ? Infinity : Number(b.max_tokens);
  const story = typeof b.model === "string" && b.model.includes("@") ? [`[${b.model}]`, ...STORY] : STORY;
  // echo without generation: vLLM samples one token (max_tokens 1) and returns the prompt alone.
  const { pieces, finish, stopReason } = planned(story, maxTokens === 0 ? 1 : maxTokens, b.stop);
  const generated = pieces.map(([text]) => text);
  // The prompt's scores: none for the first token (nothing before it), then each given the ones before.
  const promptScores = prompt.map((t, i) => (i === 0 ? null : fakeLogprob(t.text)));
  const promptText = ids ? prompt.map((t) => t.text).join("") : String(b.prompt);
  const shown = echo && maxTokens === 0 ? [] : generated;
  const tokens = [...(echo ? prompt.map((t) => t.text) : []), ...shown];
  const scores = [...(echo ? promptScores : []), ...shown.map(fakeLogprob)];
  let offset = 0;
  const logprobs =
    top === null
      ? null
      : {
          text_offset: tokens.map((t) => {
            const at = offset;
            offset += t.length;
            return at;
          }),
          token_logprobs: scores,
          tokens,
          top_logprobs: tokens.map((t, i) => (scores[i] === null ? null : topMap(t, scores[i] as number, top))),
        };
  const usage = { prompt_tokens: prompt.length, completion_tokens: generated.length };
  sendJson(res, 200, {
    id: "cmpl-fake",
    object: "text_completion",
    created: Math.floor(Date.now() / 1000),
    model: b.model,
    choices: [
      {
        index: 0,
        text: (echo ? promptText : "") + shown.join(""),
        logprobs,
        finish_reason: finish,
        stop_reason: stopReason,
        token_ids: null,
        // vLLM's own field: per prompt token, null or {token id: {logprob, rank, decoded_token}}.
        prompt_logprobs:
          echo && top !== null
            ? prompt.map((t, i) =>
                i === 0 ? null : { [t.id]: { logprob: promptScores[i], rank: 1, decoded_token: t.text } },
              )
            : null,
        prompt_token_ids: null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens, prompt_tokens_details: null },
    kv_transfer_params: null,
  });
}

/**
 * vLLM's legacy top_logprobs map for one token: the token itself, then the `top` best (the token
 * ranks first here), keyed by text (so a repeat collapses), the first top + 1 entries.
 */
function topMap(token: string, logprob: number, top: number): Record<string, number> {
  const ranked: [string, number][] = [[token, logprob], ...ALTERNATIVES];
  const map = new Map<string, number>();
  for (const [t, v] of [[token, logprob] as [string, number], ...ranked.slice(0, top)]) map.set(t, v);
  return Object.fromEntries([...map.entries()].slice(0, top + 1));
}

/** The pieces of `source` up to max_tokens or a stop string, each with whether it is the last. */
function planned(
  source: string[],
  maxTokens: number,
  stop: unknown,
): { pieces: [string, boolean][]; finish: string; stopReason: string | null } {
  const stops = Array.isArray(stop) ? (stop as string[]) : [];
  const out: string[] = [];
  let text = "";
  for (const piece of source) {
    if (out.length >= maxTokens) return { pieces: withLast(out), finish: "length", stopReason: null };
    const matched = stops.find((s) => (text + piece).includes(s));
    if (matched !== undefined) return { pieces: withLast(out), finish: "stop", stopReason: matched };
    out.push(piece);
    text += piece;
  }
  return { pieces: withLast(out), finish: "stop", stopReason: null };
}

function withLast(pieces: string[]): [string, boolean][] {
  return pieces.map((p, i) => [p, i === pieces.length - 1]);
}

/** The story over and over, until max_tokens or the client hangs up. */
function* endless(maxTokens: number): Generator<[string, boolean]> {
  for (let i = 0; i < maxTokens; i++) yield [STORY[i % STORY.length] as string, i === maxTokens - 1];
}

/**
 * A few of vLLM's own metrics as its /metrics writes them (prometheus_client's text format,
 * `_created` series included): engine gauges the platform cannot measure itself, and a request
 * histogram and counter under names the replica also exports.
 */
export function metricsText(served: string): string {
  const l = `engine="0",model_name="${served}"`;
  return [
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
    "# TYPE vllm:kv_cache_usage_perc gauge",
    `vllm:kv_cache_usage_perc{${l}} ${KV_CACHE_USAGE}`,
    "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
    "# TYPE vllm:num_preemptions_total counter",
    `vllm:num_preemptions_total{${l}} 3.0`,
    `vllm:num_preemptions_created{${l}} 1.7e+09`,
    "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
    "# TYPE vllm:e2e_request_latency_seconds histogram",
    `vllm:e2e_request_latency_seconds_bucket{${l},le="1.0"} 9.0`,
    `vllm:e2e_request_latency_seconds_bucket{${l},le="+Inf"} 9.0`,
    `vllm:e2e_request_latency_seconds_count{${l}} 9.0`,
    `vllm:e2e_request_latency_seconds_sum{${l}} 0.5`,
    "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
    "# TYPE vllm:prompt_tokens_total counter",
    `vllm:prompt_tokens_total{${l}} 99.0`,
    `vllm:prompt_tokens_created{${l}} 1.7e+09`,
    "",
  ].join("\n");
}
export const KV_CACHE_USAGE = 0.25;

function embeddings(res: ServerResponse, b: Record<string, unknown>): void {
  const inputs = typeof b.input === "string" ? [b.input] : (b.input as string[]);
  const data = inputs.map((input, index) => ({
    object: "embedding",
    index,
    embedding: [input.length, countTokens(input), 1],
  }));
  const tokens = inputs.reduce((n, input) => n + countTokens(input), 0);
  // Out of order on purpose: clients must use `index`.
  sendJson(res, 200, {
    object: "list",
    data: data.reverse(),
    model: b.model,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  });
}

function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  sendJson(res, status, { error: { message, type, param: null, code: status } });
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  let raw = "";
  for await (const chunk of req) raw += chunk;
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}
