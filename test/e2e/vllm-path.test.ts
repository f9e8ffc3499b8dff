/**
 * A `framework: vllm` endpoint end to end on `platform up`: the gateway, the queue and real worker
 * processes, each starting `vllm serve` as its child — here the stand-in of
 * test/helpers/fake-vllm.ts, named by VLLM_BIN (there is no GPU and no vLLM on these machines).
 * Chat, streaming, cancellation reaching vLLM, and failover when the child dies. On the shared
 * stack, whose workers find the stand-in through VLLM_BIN and record its starts and requests in
 * FAKE_VLLM_RECORD (test/e2e-stack.ts); no other file deploys a vLLM endpoint.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { CHAT_REPLY, fakeLogprob, fakePieces, KV_CACHE_USAGE, STORY } from "../helpers/fake-vllm.ts";
import { undeploy } from "../helpers/deploy.ts";
import { alive } from "../helpers/processes.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type Stack, waitAvailable } from "../helpers/stack.ts";

type Status = {
  state: string;
  replica_list: { id: string; pid: number; state: string; error?: string; health_port?: number }[];
};

const MODEL = unique("vl");
let dir: string;
/** Each start of the fake writes {argv, pid} here; requests go to `<record>.requests.jsonl`. */
const record = inject("fakeVllmRecord");
let stack: Stack;
let client: OpenAI;

beforeAll(async () => {
  stack = await sharedStack();
  dir = await mkdtemp(join(tmpdir(), "vllm-path-"));
  // vLLM reads a checkpoint directory or a file; the fake only needs a path that exists.
  const model = join(dir, "model.safetensors");
  await writeFile(model, "weights");
  const reg = await stack.admin("POST", "/admin/v1/models", { name: MODEL, framework: "vllm", source: model });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  const dep = await stack.admin("PUT", `/admin/v1/endpoints/${MODEL}`, {
    model: { name: MODEL },
    resources: { replicas: 1, parallel: 4 },
  });
  expect(dep.status, JSON.stringify(dep.body)).toBe(200);
  await waitAvailable(stack, MODEL);
  client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await undeploy(stack, MODEL);
  if (dir) await rm(dir, { recursive: true, force: true });
});

const status = async () => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${MODEL}`)).body;
const started = async () => JSON.parse(await readFile(record, "utf8")) as { argv: string[]; pid: number };
async function logged(): Promise<{ path?: string; event?: string; body?: Record<string, unknown> }[]> {
  const text = await readFile(`${record}.requests.jsonl`, "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { path?: string; event?: string });
}

describe("a vLLM endpoint through the platform", () => {
  it("starts `vllm serve` on the registered artifact under the endpoint's name", async () => {
    const { argv } = await started();
    expect(argv[0]).toBe("serve");
    expect(argv[1]).toMatch(/model\.safetensors$/);
    expect(argv[argv.indexOf("--served-model-name") + 1]).toBe(MODEL);
    expect(argv[argv.indexOf("--max-num-seqs") + 1]).toBe("4");
  });

  it("answers a chat with what vLLM generated, naming the version", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 50 })
      .withResponse();
    expect(response.headers.get("x-model-version")).toBe("v1");
    expect(data.choices[0]?.message.content).toBe(CHAT_REPLY.join(""));
    expect(data.choices[0]?.finish_reason).toBe("stop");
    expect(data.usage?.completion_tokens).toBe(CHAT_REPLY.length);
    const sent = (await logged()).filter((r) => r.path === "/v1/chat/completions").at(-1);
    expect(sent?.body).toMatchObject({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 50 });
  });

  it("streams a chat and a completion chunk by chunk", async () => {
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    let text = "";
    for await (const chunk of chat) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe(CHAT_REPLY.join(""));

    const completion = await client.completions.create({
      model: MODEL,
      prompt: "Tell me",
      max_tokens: 5,
      stream: true,
    });
    const pieces: string[] = [];
    for await (const chunk of completion) if (chunk.choices[0]?.text) pieces.push(chunk.choices[0].text);
    expect(pieces.join("")).toBe(STORY.slice(0, 5).join(""));
  });

  it("answers echo with logprobs (prompt scores, max_tokens 0) from vLLM's echo, as lm-eval reads it", async () => {
    const prompt = "Once upon a time";
    const data = await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 1, max_tokens: 0 });
    const choice = data.choices[0];
    expect(choice?.text).toBe(prompt);
    expect(choice?.finish_reason).toBe("length");
    // The BOS vLLM puts first is no part of the prompt: each text token is scored, the first given BOS.
    expect(choice?.logprobs?.tokens).toEqual(fakePieces(prompt));
    expect(choice?.logprobs?.token_logprobs).toEqual(fakePieces(prompt).map(fakeLogprob));
    expect(data.usage).toMatchObject({ prompt_tokens: fakePieces(prompt).length + 1, completion_tokens: 0 });
    const sent = (await logged()).filter((r) => r.path === "/v1/completions" && r.body?.echo === true).at(-1);
    expect(sent?.body).toEqual({ model: MODEL, prompt, echo: true, max_tokens: 0, logprobs: 1 });
  });

  it("passes a client's cancellation on to vLLM", async () => {
    const before = (await logged()).filter((r) => r.event === "client_closed").length;
    const stream = await client.completions.create({ model: MODEL, prompt: "SLOW", max_tokens: 5000, stream: true });
    let chunks = 0;
    // Leaving the loop closes the response (the client's stream aborts its request).
    for await (const _ of stream) if (++chunks === 3) break;
    expect(chunks).toBe(3);
    await expect.poll(async () => (await logged()).filter((r) => r.event === "client_closed").length).toBe(before + 1);
  });

  it("serves vLLM's own metrics with the replica's, labelled with the endpoint, version and replica", async () => {
    const replica = (await status()).replica_list.find((r) => r.state === "ready");
    expect(replica?.health_port).toBeGreaterThan(0);
    const text = await (await fetch(`http://127.0.0.1:${replica!.health_port}/metrics`)).text();
    const labels = `engine="0",model_name="${MODEL}",version="v1",replica="${replica!.id}"`;
    // What only vLLM knows passes through, its labels set to the replica's.
    expect(text).toContain(`vllm:kv_cache_usage_perc{${labels}} ${KV_CACHE_USAGE}`);
    expect(text).toContain(`vllm:num_preemptions_total{${labels}} 3.0`);
    // What the replica measures itself for every engine appears once: its own.
    expect(text.match(/^# TYPE vllm:e2e_request_latency_seconds histogram$/gm)).toHaveLength(1);
    expect(text).not.toContain("vllm:prompt_tokens_created");
    expect(text).toMatch(new RegExp(`^vllm:prompt_tokens_total\\{[^}]*replica="${replica!.id}"[^}]*\\} \\d+$`, "m"));
    expect(text).not.toContain(`engine="0",model_name="${MODEL}"} 99`);
  });

  it("fails over when `vllm serve` dies: the request in flight is answered by a new replica", {
    timeout: 120_000,
  }, async () => {
    const first = await started();
    const oldReplica = (await status()).replica_list.find((r) => r.state === "ready");
    expect(oldReplica).toBeDefined();
    const inFlight = client.completions.create({ model: MODEL, prompt: "SLOW", max_tokens: 150 });
    await expect
      .poll(async () =>
        (await logged()).some(
          (r) => r.path === "/v1/completions" && r.body?.prompt === "SLOW" && r.body?.max_tokens === 150,
        ),
      )
      .toBe(true);
    process.kill(first.pid, "SIGKILL");

    const answer = await inFlight;
    expect(answer.choices[0]?.finish_reason).toBe("length");
    expect(answer.usage?.completion_tokens).toBe(150);
    const second = await started();
    expect(second.pid).not.toBe(first.pid);
    // The replica whose engine died went with it, saying why.
    await expect.poll(() => alive(oldReplica!.pid)).toBe(false);
    const after = await status();
    expect(after.state).toBe("available");
    const failed = after.replica_list.find((r) => r.id === oldReplica!.id);
    if (failed) expect(failed.error).toMatch(/the engine stopped: vLLM exited \(signal SIGKILL\)/);
    const again = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] });
    expect(again.choices[0]?.message.content).toBe(CHAT_REPLY.join(""));
  });
});
