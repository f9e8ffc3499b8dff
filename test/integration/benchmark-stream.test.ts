/**
 * How `platform inference benchmark` reads a streamed answer (sendStreamed), against a local
 * server that writes the events itself, so line endings and where reads split are the test's.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeConnections, sendStreamed } from "../../src/benchmark/measure.ts";

const head = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 0, model: "m" };
const text = (content: string) => ({
  ...head,
  choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }],
  usage: null,
});
const EVENTS = [
  text("Hello"),
  text("!"),
  { ...head, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
];

let server: Server;
let origin: string;

/** What llama-server streams when its text never becomes valid UTF-8: no text, then its timings. */
const HELD_BACK_MS = 90;
const HELD_BACK = [
  {
    ...head,
    choices: [{ index: 0, delta: {}, finish_reason: "length" }],
    timings: { cache_n: 0, prompt_n: 3, predicted_n: 2, predicted_ms: 40 },
  },
  { ...head, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
];

beforeAll(async () => {
  // The first path segment names the line ending (/crlf/v1/chat/completions or /lf/v1/...), or
  // /held/: a stream that carries no text and answers after HELD_BACK_MS.
  server = createServer(async (req, res) => {
    const eol = req.url?.startsWith("/crlf/") ? "\r\n" : "\n";
    const held = req.url?.startsWith("/held/");
    if (held) await new Promise((resolve) => setTimeout(resolve, HELD_BACK_MS));
    const body = [...(held ? HELD_BACK : EVENTS).map((e) => JSON.stringify(e)), "[DONE]"]
      .map((data) => `data: ${data}${eol}${eol}`)
      .join("");
    res.writeHead(200, { "content-type": "text/event-stream" });
    // In small pieces, so that events (and \r\n pairs) straddle reads.
    for (let i = 0; i < body.length; i += 5) res.write(body.slice(i, i + 5));
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  closeConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe("sendStreamed", () => {
  it("counts a llama-server stream that held its text back from its end less its generation time", async () => {
    const spec = {
      baseUrl: `${origin}/held`,
      apiKey: "k",
      api: "chat",
      model: "m",
      prompt: "Hi",
      maxTokens: 2,
    } as const;
    const sample = await sendStreamed(spec, AbortSignal.timeout(10_000));
    expect(sample).toMatchObject({ ok: true, output_tokens: 2, cached_tokens: 0, itl_ms: [] });
    // At least the server's wait, and exactly the whole time less the 40 ms it says it generated for.
    expect(sample.ttft_ms).toBeGreaterThanOrEqual(HELD_BACK_MS - 40);
    expect(sample.ttft_ms).toBeCloseTo(sample.e2e_ms - 40, 6);
  });

  it.each(["lf", "crlf"])("reads every event of a stream whose lines end in %s", async (eol) => {
    const spec = {
      baseUrl: `${origin}/${eol}`,
      apiKey: "k",
      api: "chat",
      model: "m",
      prompt: "Hi",
      maxTokens: 2,
    } as const;
    const sample = await sendStreamed(spec, AbortSignal.timeout(10_000));
    expect(sample).toMatchObject({ ok: true, output_tokens: 2, prompt_tokens: 3, tokens_exact: true });
    expect(sample.ttft_ms).toBeGreaterThanOrEqual(0);
    expect(sample.itl_ms).toHaveLength(1);
  });
});
