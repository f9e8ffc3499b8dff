/**
 * llama-server as a CPU replica's decoder (PLATFORM_LLAMA_ENGINE=server): built from the llama.cpp
 * source node-llama-cpp ships, run as the worker's supervised child on a free port of 127.0.0.1
 * (vllm-process.ts's supervision, as vLLM runs), with one slot per sequence. The replica still
 * renders, tokenizes, builds grammars and chooses the slot (llamacpp-sequences.ts, by cached
 * prefix); this file sends the prompt's token ids to the chosen slot (`/completion`, `id_slot`,
 * `cache_prompt`) and reads the stream back. Why: llama-server's own loop decodes a batch of all
 * its slots per step in native code, which the binding's JavaScript loop does not match
 * (docs/performance.md, "Measured on the native build").
 */
import { randomBytes } from "node:crypto";
import { request } from "node:http";
import type { LlamaModel, Token } from "node-llama-cpp";
import type { TokenLogprob } from "../../src/contracts/job.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { freePort } from "../../src/process/free-port.ts";
import { withoutWorkerAllocator } from "../../src/process/worker-env.ts";
import { logger } from "../../src/telemetry/log.ts";
import {
  type Decoded,
  type DecodeOptions,
  grammarStops,
  IMPOSSIBLE_LOGPROB,
  tokenCandidate,
} from "./llamacpp-decode.ts";
import { SequencePool } from "./llamacpp-sequences.ts";
import { VllmProcess } from "./vllm-process.ts";

const log = logger("llama-server");

/** One of llama-server's slots and the tokens its cache holds (what was last evaluated on it). */
export type ServerSlot = { id: number; tokens: readonly Token[] };

export type LlamaServerOptions = {
  bin: string;
  modelPath: string;
  parallel: number;
  /** Tokens per slot. */
  contextSize: number;
  threads: number;
  float32?: boolean;
  /** Speculative decoding: llama-server's own draft model (`-md`), `tokens` per step. */
  draft?: { modelPath: string; tokens: number };
  startTimeoutMs?: number;
};

const NAMES = {
  engine: "llama-server",
  install:
    "Build it with `platform engine build --server` or set PLATFORM_LLAMA_SERVER_BIN to a llama-server executable.",
  timeoutSetting: "PLATFORM_LLAMA_SERVER_START_TIMEOUT_MS",
};
const DEFAULT_START_TIMEOUT_MS = 10 * 60_000;
const STOP_GRACE_MS = 10_000;

/** The decoding of one request: DecodeOptions with the sampling as plain values. */
export type ServerDecodeOptions = Omit<DecodeOptions, "sampling"> & {
  sampling: { temperature: number; topP: number; topK: number; minP: number; seed?: number };
  /** Token id → bias; -100 or less: never (OpenAI's meaning), checked against the vocabulary already. */
  logitBias?: Record<string, number>;
};

type StreamChunk = {
  content?: string;
  tokens?: number[];
  stop?: boolean;
  stop_type?: "none" | "eos" | "limit" | "word";
  stopping_word?: string;
  tokens_predicted?: number;
  timings?: { cache_n?: number; draft_n?: number; draft_n_accepted?: number };
  completion_probabilities?: {
    id: number;
    logprob: number;
    top_logprobs?: { id: number; logprob: number }[];
  }[];
};

export class LlamaServer {
  readonly slots: SequencePool<ServerSlot>;
  /** Settles, with why, if the child ends without `stop` (the replica is then lost: workers/worker.ts). */
  readonly lost: Promise<string>;
  private readonly child: VllmProcess;
  private readonly port: number;
  private readonly apiKey: string;
  private stopping = false;
  private drafted = { validated: 0, refuted: 0 };
  readonly speculates: boolean;

  private constructor(child: VllmProcess, port: number, apiKey: string, parallel: number, speculates: boolean) {
    this.child = child;
    this.port = port;
    this.apiKey = apiKey;
    this.speculates = speculates;
    const slots: ServerSlot[] = Array.from({ length: parallel }, (_, id) => ({ id, tokens: [] }));
    this.slots = new SequencePool(slots, (slot, prompt) => commonPrefix(slot.tokens, prompt));
    this.lost = child.exited.then(() => (this.stopping ? new Promise<string>(() => undefined) : child.describeExit()));
  }

  static async start(o: LlamaServerOptions): Promise<LlamaServer> {
    const port = await freePort();
    const apiKey = randomBytes(24).toString("base64url");
    const args = [
      ...["-m", o.modelPath, "--host", "127.0.0.1", "--port", String(port)],
      ...["--parallel", String(o.parallel), "-c", String(o.contextSize * o.parallel), "--no-kv-unified"],
      ...["-t", String(o.threads), "-tb", String(o.threads), "-ngl", "0", "--no-webui"],
      // The replica picks the slot (id_slot) by its cached prefix; llama-server's own pick is not consulted.
      ...["--slot-prompt-similarity", "0"],
      ...(o.float32 ? ["-ctk", "f32", "-ctv", "f32", "-fa", "off"] : []),
      ...(o.draft
        ? [
            "-md",
            o.draft.modelPath,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            String(o.draft.tokens),
            "--spec-draft-n-min",
            String(o.draft.tokens),
          ]
        : []),
    ];
    // The key is in the child's environment, not its command line (`ps` shows that): on loopback,
    // only this worker may call it (docs/security.md).
    const child = new VllmProcess(
      o.bin,
      args,
      { ...withoutWorkerAllocator(process.env), LLAMA_API_KEY: apiKey },
      (line) => log.debug(line),
      NAMES,
    );
    const server = new LlamaServer(child, port, apiKey, o.parallel, o.draft !== undefined);
    try {
      await child.waitHealthy(`http://127.0.0.1:${port}`, o.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
    } catch (e) {
      await server.stop();
      throw e;
    }
    log.info({ pid: child.pid, slots: o.parallel }, `llama-server (${o.bin}) decodes this replica's requests`);
    return server;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Draft tokens accepted and rejected so far (llama-server's per-request counts, summed). */
  speculation(): { validated: number; refuted: number } | undefined {
    return this.speculates ? { ...this.drafted } : undefined;
  }

  /**
   * One generation on `slot` of the tokens `prompt` (evaluated as given: the BOS token is already
   * first where the model wants one). The text comes back as llama-server decodes it (whole
   * characters, the stop strings held back and cut); the grammar's trailing whitespace is held
   * here until more text follows, as decode() does.
   */
  async decode(model: LlamaModel, slot: ServerSlot, prompt: Token[], o: ServerDecodeOptions): Promise<Decoded> {
    const stops = [...o.stopStrings, ...grammarStops(o.grammar)];
    const trim = o.grammar?.trimWhitespaceSuffix ?? false;
    const top = o.topLogprobs;
    const body = {
      prompt,
      n_predict: o.maxTokens,
      stream: true,
      return_tokens: true,
      cache_prompt: true,
      id_slot: slot.id,
      stop: stops,
      temperature: o.sampling.temperature,
      top_p: o.sampling.topP,
      top_k: o.sampling.topK,
      min_p: o.sampling.minP,
      // llama-server's other samplers off: the platform's sampling is OpenAI's (llamacpp-engine.ts).
      typical_p: 1,
      repeat_penalty: 1,
      dry_multiplier: 0,
      xtc_probability: 0,
      top_n_sigma: -1,
      mirostat: 0,
      // The penalties are on the generated tokens (OpenAI, decode()): a window as long as the answer.
      repeat_last_n: o.maxTokens,
      frequency_penalty: o.penalties?.frequencyPenalty ?? 0,
      presence_penalty: o.penalties?.presencePenalty ?? 0,
      ...(o.sampling.seed === undefined ? {} : { seed: o.sampling.seed }),
      ...(o.grammar ? { grammar: o.grammar.grammar } : {}),
      ...(top === undefined ? {} : { n_probs: Math.max(top, 1) }),
      ...(o.logitBias
        ? { logit_bias: Object.entries(o.logitBias).map(([id, v]) => [Number(id), v <= -100 ? false : v]) }
        : {}),
    };
    const generated: Token[] = [];
    const logprobs: TokenLogprob[] = [];
    let text = "";
    let held = "";
    let last: StreamChunk | undefined;
    /** Generated tokens whose text llama-server has sent: it sends none for half a UTF-8 character. */
    let sent = 0;
    const emit = (piece: string, entries: TokenLogprob[]) => {
      if (piece === "" && entries.length === 0) return;
      text += piece;
      if (top !== undefined) o.onText?.(piece, entries);
      else if (piece !== "") o.onText?.(piece);
    };
    const aborted = await this.stream(body, o.signal, (chunk) => {
      last = chunk;
      if (!chunk.stop) sent = chunk.tokens_predicted ?? sent;
      const entries = (chunk.completion_probabilities ?? []).map((p) => {
        const entry = logprobOf(model, p, generated.at(-1), top ?? 0);
        generated.push(p.id as Token);
        return entry;
      });
      if (!chunk.completion_probabilities) for (const t of chunk.tokens ?? []) generated.push(t as Token);
      logprobs.push(...entries);
      let content = chunk.content ?? "";
      // The answer's first word as decode() reads it (and transformers decodes it): a SentencePiece
      // word's space is dropped where nothing precedes it, which llama-server's text keeps.
      if (text === "" && held === "" && content.startsWith(" ") && chunk.tokens?.length) {
        if (!model.detokenize(chunk.tokens as Token[], false).startsWith(" ")) content = content.slice(1);
      }
      const buffer = held + content;
      const keep = trim && !chunk.stop ? buffer.length - buffer.trimEnd().length : 0;
      held = buffer.slice(buffer.length - keep);
      emit(buffer.slice(0, buffer.length - keep), entries);
    });
    const end = last;
    let stop: Decoded["stop"];
    let stoppedBy: string | undefined;
    if (aborted || !end?.stop) stop = "aborted";
    else if (end.stop_type === "word") {
      stop = "stop";
      stoppedBy = end.stopping_word;
    } else stop = end.stop_type === "limit" ? "length" : "eog";
    // Tokens that never completed a character: llama-server sends neither their text nor their ids,
    // only their count. Each reads as decode() reads a lone byte token, U+FFFD.
    const predicted = end?.stop ? (end.tokens_predicted ?? generated.length) : generated.length;
    const unsent = stop === "length" || stop === "eog" ? predicted - sent - (stop === "eog" ? 1 : 0) : 0;
    if (unsent > 0) held += "\uFFFD".repeat(unsent);
    if (stop !== "stop" && held !== "") emit(trim ? held.trimEnd() : held, []);
    // What the slot's cache holds, as far as the ids came back (the rest counts as a mismatch).
    slot.tokens = [...prompt, ...generated];
    const timings = end?.stop ? end.timings : undefined;
    if (timings?.draft_n !== undefined) {
      this.drafted.validated += timings.draft_n_accepted ?? 0;
      this.drafted.refuted += timings.draft_n - (timings.draft_n_accepted ?? 0);
    }
    return {
      text,
      // An end-of-generation token is counted by llama-server, not by node-llama-cpp (nor by OpenAI).
      completionTokens: stop === "eog" ? Math.max(0, predicted - 1) : predicted,
      cachedTokens: Math.min(timings?.cache_n ?? 0, prompt.length),
      stop,
      ...(stoppedBy === undefined ? {} : { stoppedBy }),
      ...(top === undefined ? {} : { logprobs }),
    };
  }

  /** POSTs a streamed /completion and hands each event over; true when `signal` ended it first. */
  private stream(body: unknown, signal: AbortSignal | undefined, onChunk: (c: StreamChunk) => void): Promise<boolean> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return resolve(true);
      const payload = JSON.stringify(body);
      // A connection of its own per request: llama-server's HTTP library closes a kept-alive
      // connection after a stream, and a request sent on it meanwhile would be reset.
      const req = request({
        host: "127.0.0.1",
        port: this.port,
        path: "/completion",
        method: "POST",
        agent: false,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(payload),
          authorization: `Bearer ${this.apiKey}`,
        },
      });
      let abortedHere = false;
      const onAbort = () => {
        abortedHere = true;
        // Closing the connection is how llama-server is told: it cancels the slot's task.
        req.destroy();
        resolve(true);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const done = () => signal?.removeEventListener("abort", onAbort);
      req.on("error", (e) => {
        done();
        if (abortedHere) return;
        reject(
          new PlatformError(
            503,
            "engine_unavailable",
            `llama-server did not answer (${e.message}): ${this.child.describeExit()}`,
          ),
        );
      });
      req.on("response", (res) => {
        res.setEncoding("utf8");
        let buffered = "";
        if (res.statusCode !== 200) {
          res.on("data", (d: string) => (buffered = (buffered + d).slice(0, 4000)));
          res.on("end", () => {
            done();
            reject(serverError(res.statusCode ?? 500, buffered));
          });
          return;
        }
        res.on("data", (d: string) => {
          buffered += d;
          for (let at = buffered.indexOf("\n\n"); at >= 0; at = buffered.indexOf("\n\n")) {
            const event = buffered.slice(0, at);
            buffered = buffered.slice(at + 2);
            for (const line of event.split("\n"))
              if (line.startsWith("data: ")) onChunk(JSON.parse(line.slice(6)) as StreamChunk);
          }
        });
        res.on("end", () => {
          done();
          resolve(abortedHere);
        });
        res.on("error", (e) => {
          done();
          if (!abortedHere)
            reject(new PlatformError(503, "engine_unavailable", `llama-server's stream broke: ${e.message}`));
        });
      });
      req.end(payload);
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.child.stop(STOP_GRACE_MS);
  }
}

/** How many of `prompt`'s leading tokens (all but its last, at most) `cached` holds. */
function commonPrefix(cached: readonly Token[], prompt: readonly Token[]): number {
  const n = Math.min(cached.length, prompt.length - 1);
  let i = 0;
  while (i < n && cached[i] === prompt[i]) i++;
  return i;
}

/** llama-server's 4xx names what is wrong with the request; anything else is the engine's failure. */
function serverError(status: number, body: string): PlatformError {
  let message = body;
  try {
    message = (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? body;
  } catch {
    // not JSON: the text as it came
  }
  return status >= 400 && status < 500
    ? new PlatformError(400, "invalid_request", `llama-server refused the request: ${message}`)
    : new PlatformError(500, "engine_error", `llama-server failed (HTTP ${status}): ${message}`);
}

/** As decode()'s entries: the token's text read after the one before it, its logprob and the top alternatives. */
function logprobOf(
  model: LlamaModel,
  p: NonNullable<StreamChunk["completion_probabilities"]>[number],
  before: Token | undefined,
  top: number,
): TokenLogprob {
  const context = before === undefined ? [] : [before];
  const candidate = (id: number, logprob: number) =>
    tokenCandidate(model, id as Token, context, Number.isFinite(logprob) ? logprob : IMPOSSIBLE_LOGPROB);
  return {
    ...candidate(p.id, p.logprob),
    top_logprobs: (p.top_logprobs ?? []).slice(0, top).map((t) => candidate(t.id, t.logprob)),
  };
}
