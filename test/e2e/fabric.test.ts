/**
 * The fabric's edges: producers outside the platform, supervision of worker
 * processes, and real text from the real model where ../shared has it.
 */
import { spawn } from "node:child_process";
import OpenAI from "openai";
import { getLlama, LlamaCompletion, LlamaLogLevel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedModelPath, tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type OwnStack, type Stack, startStack } from "../helpers/stack.ts";

type Status = {
  state: string;
  replicas: { ready: number; desired: number };
  replica_list: { pid: number; id: string }[];
};

// This block signals the workers and, last, `up` itself: it keeps a stack of its own.
describe("with the tiny model", () => {
  let stack: OwnStack;
  beforeAll(async () => {
    // A long context, so a request can stay in flight long enough to be caught mid-way.
    stack = await startStack({ model: await tinyModelPath({ contextLength: 4096 }), args: ["--name", "tiny"] });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("serves a producer in a separate process that enqueues by the documented contract", {
    timeout: 150_000,
  }, async () => {
    const child = spawn(
      process.execPath,
      [
        new URL("../helpers/producer.ts", import.meta.url).pathname,
        stack.redisUrl,
        "tiny",
        "v1",
        "Once upon a time",
        "7",
      ],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const code = await new Promise((resolve) => child.once("exit", resolve));
    expect(code, `${err}\nplatform up said:\n${stack.output()}`).toBe(0);
    const { result, tokens, types } = JSON.parse(out);
    expect(result).toMatchObject({ type: "text", finish_reason: "length", usage: { completion_tokens: 7 } });
    expect(tokens.join("")).toBe(result.text);
    expect(types[0]).toBe("started");
    expect(types.at(-1)).toBe("done");
    // The same text as through the HTTP API.
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey });
    const viaHttp = await client.completions.create({
      model: "tiny",
      prompt: "Once upon a time",
      max_tokens: 7,
      temperature: 0,
    });
    expect(viaHttp.choices[0]?.text).toBe(result.text);
  });

  it("notices a worker killed with SIGKILL and replaces it", async () => {
    const before = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
    expect(before.replicas.ready).toBe(1);
    const victim = before.replica_list[0] as { pid: number; id: string };
    process.kill(victim.pid, "SIGKILL");
    await stack.waitFor(async () => {
      const s = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
      return !s.replica_list.some((r) => r.id === victim.id);
    }, "the killed replica to drop out of status");
    await stack.waitFor(async () => {
      const s = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
      return s.state === "available" && s.replica_list.length === 1 && s.replica_list[0]?.pid !== victim.pid;
    }, "a replacement replica");
    expect(stack.output()).toMatch(/exited \(SIGKILL\); replacing it/);
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey });
    const res = await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: 3 });
    expect(res.usage?.completion_tokens).toBe(3);
  });

  it("a worker told to stop (SIGTERM) finishes its in-flight request first", async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    const s = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
    const pid = s.replica_list[0]?.pid as number;
    const long = client.completions.create({
      model: "tiny",
      prompt: "Once upon a time",
      max_tokens: 4000,
      temperature: 0,
    });
    await stack.waitFor(
      async () =>
        (await stack.admin<{ queue: { active: number } }>("GET", "/admin/v1/endpoints/tiny")).body.queue.active === 1,
      "the request to be in flight",
    );
    process.kill(pid, "SIGTERM");
    const res = await long;
    expect(res.usage?.completion_tokens).toBe(4000);
    await stack.waitFor(async () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    }, "the drained worker to exit");
    await stack.waitFor(
      async () => (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.state === "available",
      "a replacement",
    );
  });

  it("stops every child on SIGINT, leaving no orphans", async () => {
    const s = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body;
    const pids = s.replica_list.map((r) => r.pid);
    const code = await stack.stop();
    expect(code).toBe(0);
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
    expect(stack.output()).toMatch(/stopped\./);
  });
});

const real = sharedModelPath();
describe.skipIf(!real)("with the real stories260K model", () => {
  let stack: Stack;
  const REAL = unique("stories260K");
  beforeAll(async () => {
    stack = await sharedStack();
    await deploy(stack, REAL, { source: real as string });
  });
  afterAll(() => undeploy(stack, REAL));

  it("gives the same text through the fabric as node-llama-cpp called directly (temperature 0)", async () => {
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: real as string });
    const context = await model.createContext({ threads: 1, contextSize: 512 });
    const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
    const direct = await completion.generateCompletion("Once upon a time", {
      maxTokens: 30,
      temperature: 0,
      repeatPenalty: false,
    });
    await context.dispose();
    await model.dispose();

    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey });
    const chat = await client.chat.completions.create({
      model: REAL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 30,
      temperature: 0,
    });
    expect(chat.choices[0]?.message.content).toBe(direct);
    expect(direct).toMatch(/^, there was a little girl named Lily/);
    const gen = await fetch(`${stack.baseUrl}/v1/inference/${REAL}/generate`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 30, temperature: 0 }),
    });
    expect(((await gen.json()) as { output: string }).output).toBe(direct);
  });

  it("stops at a stop sequence with finish_reason stop", async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey });
    const res = await client.completions.create({
      model: REAL,
      prompt: "Once upon a time",
      max_tokens: 100,
      temperature: 0,
      stop: ["."],
    });
    expect(res.choices[0]?.finish_reason).toBe("stop");
    expect(res.choices[0]?.text).toBe(", there was a little girl named Lily");
  });
});
