/**
 * Traces a team actually sends, for `platform inference benchmark --trace` and `npm run
 * bench:serving` (which runs the same ones against the platform and its peers):
 *   multi-turn: shared-nothing conversations, each with its own long system prompt, growing turn
 *     by turn with the answers (what a chat product sends);
 *   agentic: one long system prompt with tool definitions shared by many short requests (an agent
 *     loop, or many users of one assistant);
 *   decode: short prompts, long answers.
 * The texts are seeded, so every run and every peer sends the same requests. A trace runs its
 * conversations on `concurrency` closed-loop clients, each conversation's turns in order.
 */
import { type RequestSample, type RequestSpec, sendStreamed } from "./measure.ts";
import { percentile, type Summary, summarizeSamples } from "./stats.ts";

export const TRACES = ["multi-turn", "agentic", "decode"] as const;
export type TraceName = (typeof TRACES)[number];

export type ChatTurnMessage = { role: "system" | "user" | "assistant"; content: string };

/** One conversation: a system prompt and its user turns, each with the answer's length. */
export type Conversation = { system: string; turns: { user: string; maxTokens: number }[] };

export type TraceShape = {
  conversations: number;
  turns: number;
  /** The system prompt's length, in words (about 1.3 tokens each with a small vocabulary's tokenizer... more with a tiny one). */
  systemWords: number;
  userWords: number;
  maxTokens: number;
  concurrency: number;
};

/** The shapes (#39): 8 chats × 4 turns with long system prompts, 4 at a time; 32 agent steps; 16 long answers. */
export const TRACE_SHAPES: Record<TraceName, TraceShape> = {
  "multi-turn": { conversations: 8, turns: 4, systemWords: 420, userWords: 24, maxTokens: 64, concurrency: 4 },
  agentic: { conversations: 32, turns: 1, systemWords: 480, userWords: 16, maxTokens: 16, concurrency: 4 },
  decode: { conversations: 16, turns: 1, systemWords: 0, userWords: 8, maxTokens: 128, concurrency: 4 },
};

const WORDS =
  "the a little big girl boy dog cat sun tree park ball red blue happy sad run jump play see find friend mom dad day night house box toy bird fish water sky green small tall fast slow went saw said liked wanted looked found".split(
    " ",
  );

/** A small seeded generator (mulberry32): the same texts on every run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function words(next: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(next() * WORDS.length)] as string);
  return out.join(" ");
}

const TOOLS_TEXT =
  'You can call these tools by answering {"tool": name, "arguments": {...}}: search(query: string), read_file(path: string), write_file(path: string, text: string), run(command: string).';

/** The trace's conversations, seeded by `seed`. */
export function traceConversations(name: TraceName, shape: TraceShape = TRACE_SHAPES[name], seed = 39): Conversation[] {
  const next = seeded(seed);
  // Agentic: one system prompt (and the tools) for every request.
  const shared = name === "agentic" ? `${TOOLS_TEXT} ${words(next, shape.systemWords)}` : undefined;
  return Array.from({ length: shape.conversations }, () => ({
    system: shared ?? (shape.systemWords > 0 ? words(next, shape.systemWords) : ""),
    turns: Array.from({ length: shape.turns }, () => ({
      user: words(next, shape.userWords),
      maxTokens: shape.maxTokens,
    })),
  }));
}

/** One turn as the client saw it (times in ms from the moment it was sent); `text` is sent back as the next turn's assistant message. */
export type TurnSample = Pick<
  RequestSample,
  "ok" | "ttft_ms" | "itl_ms" | "e2e_ms" | "output_tokens" | "prompt_tokens" | "cached_tokens" | "error"
> & { turn: number; text: string };

/** Sends one chat request (streamed) and times it. */
export type SendChat = (messages: ChatTurnMessage[], maxTokens: number) => Promise<Omit<TurnSample, "turn">>;

/** SendChat over an OpenAI-compatible API (the gateway, or llama-server's): streamed, usage asked for. */
export function httpChat(
  target: Pick<RequestSpec, "baseUrl" | "apiKey" | "model">,
  signal: AbortSignal = new AbortController().signal,
): SendChat {
  return async (messages, maxTokens) => {
    const {
      text,
      tokens_exact: _,
      ...sample
    } = await sendStreamed({ ...target, api: "chat", prompt: "", messages, maxTokens }, signal, true);
    return { ...sample, text: text ?? "" };
  };
}

/** Runs the conversations on `concurrency` clients; each conversation's turns in order, answers carried forward. */
export async function runTrace(
  conversations: Conversation[],
  concurrency: number,
  send: SendChat,
  onTurn?: (done: number) => void,
): Promise<{ samples: TurnSample[]; wall_s: number }> {
  const samples: TurnSample[] = [];
  let nextConversation = 0;
  const t0 = performance.now();
  const client = async () => {
    while (nextConversation < conversations.length) {
      const c = conversations[nextConversation++] as Conversation;
      const messages: ChatTurnMessage[] = c.system ? [{ role: "system", content: c.system }] : [];
      for (const [turn, t] of c.turns.entries()) {
        messages.push({ role: "user", content: t.user });
        const sample = { turn, ...(await send([...messages], t.maxTokens)) };
        samples.push(sample);
        onTurn?.(samples.length);
        if (!sample.ok) break;
        messages.push({ role: "assistant", content: sample.text });
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  return { samples, wall_s: (performance.now() - t0) / 1000 };
}

export type TraceResult = {
  trace: TraceName;
  turns: number;
  errors: number;
  error_samples: string[];
  wall_s: number;
  output_tokens_per_s: number;
  /** Time to first token per turn index (turn 0: a conversation's first request). */
  ttft_by_turn: { turn: number; p50: number; p95: number }[];
  ttft_first_p50: number | null;
  ttft_later_p50: number | null;
  ttft_later_p95: number | null;
  itl_ms: Summary | null;
  itl_p95_ms: number | null;
  /** Cached prompt tokens over prompt tokens, where the server reports them (null: it reports none). */
  cached_share: number | null;
};

const p = (xs: number[], q: number) =>
  xs.length === 0
    ? null
    : percentile(
        [...xs].sort((a, b) => a - b),
        q,
      );
const r1 = (x: number | null) => (x === null ? null : Math.round(x * 10) / 10);

export function traceResult(trace: TraceName, run: { samples: TurnSample[]; wall_s: number }): TraceResult {
  const ok = run.samples.filter((s) => s.ok);
  const ttfts = (filter: (s: TurnSample) => boolean) =>
    ok.filter((s) => filter(s) && s.ttft_ms !== undefined).map((s) => s.ttft_ms as number);
  const turns = [...new Set(ok.map((s) => s.turn))].sort((a, b) => a - b);
  const itl = ok.flatMap((s) => s.itl_ms);
  const counted = ok.filter((s) => s.cached_tokens !== undefined);
  const prompt = counted.reduce((n, s) => n + s.prompt_tokens, 0);
  return {
    trace,
    turns: run.samples.length,
    errors: run.samples.length - ok.length,
    error_samples: [...new Set(run.samples.flatMap((s) => (s.error ? [s.error] : [])))].slice(0, 3),
    wall_s: Math.round(run.wall_s * 1000) / 1000,
    output_tokens_per_s: r1(ok.reduce((n, s) => n + s.output_tokens, 0) / run.wall_s) as number,
    ttft_by_turn: turns.map((turn) => ({
      turn,
      p50: r1(
        p(
          ttfts((s) => s.turn === turn),
          50,
        ),
      ) as number,
      p95: r1(
        p(
          ttfts((s) => s.turn === turn),
          95,
        ),
      ) as number,
    })),
    ttft_first_p50: r1(
      p(
        ttfts((s) => s.turn === 0),
        50,
      ),
    ),
    ttft_later_p50: r1(
      p(
        ttfts((s) => s.turn > 0),
        50,
      ),
    ),
    ttft_later_p95: r1(
      p(
        ttfts((s) => s.turn > 0),
        95,
      ),
    ),
    itl_ms: summarizeSamples(itl),
    itl_p95_ms: r1(p(itl, 95)),
    cached_share:
      counted.length === 0 || prompt === 0
        ? null
        : Math.round((counted.reduce((n, s) => n + (s.cached_tokens ?? 0), 0) / prompt) * 1000) / 1000,
  };
}
