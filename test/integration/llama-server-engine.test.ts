/**
 * PLATFORM_LLAMA_ENGINE=server (workers/engines/llama-server.ts): a real llama-server, built from
 * node-llama-cpp's bundled source, decodes for the engine, and answers exactly as the in-process
 * engine does on stories260K: the same greedy text and usage, stop sequences, grammars, logprobs,
 * logit bias, the sequence chosen by cached prefix, speculation, cancellation; what it cannot do
 * (a prompt's own logprobs) runs in-process; a killed child is the replica's loss. Skipped, saying
 * so, where no llama-server build is at hand (`platform engine build --server`, or
 * PLATFORM_LLAMA_SERVER_BIN; a build takes ~7 minutes on 2 cores, which CI does not spend).
 */
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { SamplingParams, Usage } from "../../src/contracts/job.ts";
import { loadSettings } from "../../src/settings/index.ts";
import type { Engine, TextOutput, TextRequest } from "../../workers/engines/engine.ts";
import { llamaServerBin } from "../../workers/engines/llama-server-build.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { sharedModelPath } from "../helpers/models.ts";

const shared = sharedModelPath();

/** The engine directory's build, the setting's, or the serving benchmark's. */
function findServer(): string | undefined {
  const candidates = [
    llamaServerBin(loadSettings().engine),
    ...["v0.5.0", "unknown"].map((tag) =>
      join(homedir(), ".cache", "platform-bench", `llama-server-${tag}-native`, "llama-server"),
    ),
  ];
  return candidates.find((c) => existsSync(c));
}
const bin = findServer();
if (shared && !bin)
  console.warn("llama-server-engine: skipped: no llama-server build (`platform engine build --server` makes one)");

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const cachedOf = (u: Usage) => u.prompt_tokens_details?.cached_tokens;

describe.skipIf(shared === undefined || bin === undefined)("llama-server as the decoder (stories260K)", () => {
  const engines: Engine[] = [];
  const load = async (server: boolean, draft = false) => {
    const modelPath = shared as string;
    const engine = await loadLlamaCpp({
      modelPath,
      parallel: 2,
      threads: 1,
      binary: {
        llamaBuild: "prebuilt",
        dir: "/nonexistent",
        llamaEngine: server ? "server" : "binding",
        llamaServerBin: bin,
      },
      ...(draft ? { draft: { modelPath, tokens: 3 } } : {}),
    });
    engines.push(engine);
    return engine;
  };
  afterAll(async () => {
    for (const e of engines) await e.dispose();
  });
  let pair: Promise<[Engine, Engine]> | undefined;
  const both = () => (pair ??= Promise.all([load(false), load(true)]));
  const prompt = (text: string | number[], params: SamplingParams): TextRequest => ({
    kind: "prompt",
    prompt: text,
    params,
  });

  it("answers as the in-process engine: text, usage, stop sequence, finish reason, streamed pieces", async () => {
    const [binding, server] = await both();
    const requests: TextRequest[] = [
      prompt("Once upon a time", { max_tokens: 200, temperature: 0 }),
      prompt("Once upon a time", { max_tokens: 40, temperature: 0, stop: ["Lily"] }),
      {
        kind: "chat",
        messages: [{ role: "user", content: "Tell me a story" }],
        params: { max_tokens: 30, temperature: 0 },
      },
      prompt("Lily", { max_tokens: 60, temperature: 0, response_format: { type: "json_object" } }),
      prompt("The cat", { max_tokens: 30, temperature: 0, frequency_penalty: 1.5, presence_penalty: 0.5 }),
    ];
    for (const [i, r] of requests.entries()) {
      const pieces: string[] = [];
      const mine = await server.generate(r, { onText: (t) => pieces.push(t) });
      const theirs = await binding.generate(r, {});
      expect(mine.text, `request ${i}`).toBe(theirs.text);
      expect(pieces.join(""), `request ${i}`).toBe(mine.text);
      expect(mine.usage.completion_tokens, `request ${i}`).toBe(theirs.usage.completion_tokens);
      expect(mine.usage.prompt_tokens, `request ${i}`).toBe(theirs.usage.prompt_tokens);
      expect(mine.finish_reason, `request ${i}`).toBe(theirs.finish_reason);
      expect(mine.stop_sequence, `request ${i}`).toBe(theirs.stop_sequence);
    }
    // Byte tokens that never make a character (<0xE2> forced): llama-server sends nothing for them
    // but their count, and the answer reads as the in-process engine's, one U+FFFD each.
    const bytes = prompt("Once", { max_tokens: 9, temperature: 0, logit_bias: { 229: 100 } });
    const [y1, y2] = [await server.generate(bytes, {}), await binding.generate(bytes, {})];
    expect(y1.text).toBe("\uFFFD".repeat(9));
    expect(y1.text).toBe(y2.text);
    expect(y1.usage.completion_tokens).toBe(9);
    // Sampling: llama.cpp's sampler, not node-llama-cpp's, so the same seed is the same answer on the server only.
    const sampled = prompt("The cat", { max_tokens: 30, temperature: 0.9, seed: 7 });
    const [s1, s2] = [await server.generate(sampled, {}), await server.generate(sampled, {})];
    expect(s1.text).toBe(s2.text);
    expect(s1.text).not.toBe((await server.generate({ ...sampled, params: { ...sampled.params, seed: 8 } }, {})).text);
    const stopped = await server.generate(requests[1] as TextRequest, {});
    expect(stopped).toMatchObject({ finish_reason: "stop", stop_sequence: "Lily" });
    expect(stopped.text).not.toContain("Lily");
  });

  it("logprobs and logit bias as the in-process engine's", async () => {
    const [binding, server] = await both();
    const r = prompt("Once upon a time", { max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
    const [mine, theirs] = [await server.generate(r, {}), await binding.generate(r, {})];
    expect(mine.logprobs?.length).toBe(12);
    for (const [k, entry] of (mine.logprobs ?? []).entries()) {
      const other = theirs.logprobs?.[k];
      expect(entry.token).toBe(other?.token);
      expect(entry.logprob).toBeCloseTo(other?.logprob ?? 0, 2);
      expect(entry.top_logprobs.map((t) => t.token)).toEqual(other?.top_logprobs.map((t) => t.token));
    }
    // The first token made impossible: both answer something else, and the same.
    const first = theirs.logprobs?.[0]?.token as string;
    const tokens = async (text: string) =>
      (await binding.tokenize?.({ prompt: text, add_special_tokens: false }))?.tokens ?? [];
    const id = (await tokens(`Once upon a time${first}`))[(await tokens("Once upon a time")).length] as number;
    const biased = prompt("Once upon a time", { max_tokens: 8, temperature: 0, logit_bias: { [id]: -100 } });
    const [b1, b2] = [await server.generate(biased, {}), await binding.generate(biased, {})];
    expect(b1.text).toBe(b2.text);
    expect(b1.text.startsWith(first)).toBe(false);
  });

  it("a prompt's own logprobs (echo) are computed in-process, as the in-process engine's", async () => {
    const [binding, server] = await both();
    const r = prompt("Once upon a time there was", {
      max_tokens: 3,
      temperature: 0,
      echo: true,
      logprobs: true,
      top_logprobs: 1,
    });
    const [mine, theirs] = [await server.generate(r, {}), await binding.generate(r, {})];
    expect(mine.echo).toEqual(theirs.echo);
    expect(mine.text).toBe(theirs.text);
  });

  it("puts each turn on its conversation's slot and reports what the slot's cache held", async () => {
    const server = await load(true);
    const ask = (ids: number[]) => server.generate(prompt(ids, { max_tokens: 4, temperature: 0 }), {});
    const A = range(100, 60);
    const B = range(300, 60);
    expect(cachedOf((await ask(A)).usage)).toBe(0);
    expect(cachedOf((await ask(B)).usage)).toBe(0);
    expect(cachedOf((await ask([...A.slice(0, 51), ...range(400, 10)])).usage)).toBe(51);
    expect(cachedOf((await ask([...B.slice(0, 41), ...range(420, 20)])).usage)).toBe(41);
  });

  it("speculates with llama-server's draft model: the same answer, draft tokens counted", async () => {
    const [binding] = await both();
    const drafted = await load(true, true);
    const r = prompt("Once upon a time", { max_tokens: 48, temperature: 0 });
    expect((await drafted.generate(r, {})).text).toBe((await binding.generate(r, {})).text);
    expect(drafted.speculation?.()?.validated).toBeGreaterThan(0);
  });

  it("stops when the job is cancelled, and a killed llama-server is the replica's loss", async () => {
    const server = await load(true);
    const abort = new AbortController();
    let out: TextOutput | undefined;
    const pieces: string[] = [];
    const running = server
      .generate(prompt("Once", { max_tokens: 2000, temperature: 1, seed: 1 }), {
        signal: abort.signal,
        onText: (t) => {
          pieces.push(t);
          if (pieces.length === 5) abort.abort();
        },
      })
      .then((o) => (out = o));
    await running;
    expect(out?.finish_reason).toBe("cancelled");
    expect(out?.usage.completion_tokens).toBeLessThan(2000);
    // The slot is free again and answers.
    expect((await server.generate(prompt("Once", { max_tokens: 2, temperature: 0 }), {})).usage.completion_tokens).toBe(
      2,
    );
    const pid = (server as unknown as { server: { pid: number } }).server.pid;
    process.kill(-pid, "SIGKILL");
    await expect(server.lost).resolves.toMatch(/llama-server exited/);
  });
});
