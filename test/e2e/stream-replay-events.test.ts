/**
 * A Responses or Messages stream survives its replica, as a chat stream does (test/e2e/fleet.test.ts):
 * the serving worker SIGKILLed mid-stream, another replica takes the job, and the gateway's replay
 * (src/gateway/stream-replay.ts) joins its text to what was sent, so the
 * client's greedy answer is byte for byte the uninterrupted one and the stream ends as usual.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";
import { killBusyReplica } from "../helpers/processes.ts";
import { undeploy } from "../helpers/deploy.ts";

type Status = { replicas: { ready: number }; replica_list: { pid: number; in_flight: number }[] };
type Sse = { event: string; data: Record<string, unknown> };

let stack: Stack;
let modelPath: string;

beforeAll(async () => {
  modelPath = await tinyModelPath({ contextLength: 4096 });
  stack = await sharedStack();
});

/** This file's endpoint names start with it (others share the stack). */
const PREFIX = unique("sr");
const made: string[] = [];

afterAll(() => undeploy(stack, ...made));

const status = async (name: string) => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${name}`)).body;

/** A fresh endpoint of its own model record (each prompt then evaluated whole, never from a cache). */
async function endpoint(name: string, replicas: number): Promise<void> {
  made.push(name);
  const reg = await stack.admin("POST", "/admin/v1/models", { name, framework: "llamacpp", source: modelPath });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${name}`, {
    model: { name },
    resources: { replicas, parallel: 1 },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await stack.waitFor(async () => (await status(name)).replicas.ready === replicas, `${name}: ${replicas} ready`);
}

const events = (raw: string): Sse[] =>
  raw
    .split("\n\n")
    .map((block) => ({
      event: /^event: (.*)$/m.exec(block)?.[1] ?? "",
      data: /^data: (.*)$/m.exec(block)?.[1],
    }))
    .filter((e): e is { event: string; data: string } => e.data !== undefined)
    .map((e) => ({ event: e.event, data: JSON.parse(e.data) as Record<string, unknown> }));

const APIS = {
  responses: {
    path: "/v1/responses",
    body: (model: string) => ({
      model,
      input: "Once upon a time",
      max_output_tokens: 3000,
      temperature: 0,
      stream: true,
    }),
    text: (e: Sse) => (e.event === "response.output_text.delta" ? String(e.data.delta) : ""),
    ended: (e: Sse) => e.event === "response.completed" || e.event === "response.incomplete",
    failed: (e: Sse) => e.event === "response.failed" || e.event === "error",
  },
  messages: {
    path: "/v1/messages",
    body: (model: string) => ({
      model,
      max_tokens: 3000,
      temperature: 0,
      stream: true,
      messages: [{ role: "user", content: "The little dog" }],
    }),
    text: (e: Sse) => (e.event === "content_block_delta" ? String((e.data.delta as { text?: string }).text ?? "") : ""),
    ended: (e: Sse) => e.event === "message_stop",
    failed: (e: Sse) => e.event === "error",
  },
} as const;

function post(path: string, body: unknown): Promise<Response> {
  return fetch(`${stack.baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

describe("a typed-event stream survives its replica", () => {
  for (const [name, api] of Object.entries(APIS)) {
    it(`${name}: SIGKILLed mid-stream, the greedy answer is byte for byte the uninterrupted one`, {
      timeout: 180_000,
    }, async () => {
      const textOf = (all: Sse[]) => all.map(api.text).join("");
      await endpoint(`${PREFIX}-${name}-ref`, 1);
      const uninterrupted = events(await (await post(api.path, api.body(`${PREFIX}-${name}-ref`))).text());
      expect(uninterrupted.some(api.ended)).toBe(true);
      await stack.admin("DELETE", `/admin/v1/endpoints/${PREFIX}-${name}-ref`);

      const model = `${PREFIX}-${name}-st`;
      await endpoint(model, 2);
      const res = await post(api.path, api.body(model));
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let raw = "";
      while (textOf(events(raw.slice(0, raw.lastIndexOf("\n\n") + 2))) === "")
        raw += decoder.decode((await reader.read()).value);
      raw += await killBusyReplica(async () => (await status(model)).replica_list.find((x) => x.in_flight > 0), reader);
      const got = events(raw);
      expect(got.filter(api.failed)).toEqual([]);
      expect(got.some(api.ended)).toBe(true);
      // Killed mid-stream for real: the replica's job was taken back and run again.
      await stack.waitFor(
        async () => new RegExp(`replica ${model}-\\w+: 1 job\\(s\\) back in the queue`).test(stack.output()),
        "the killed replica's job taken back",
      );
      expect(textOf(got)).toBe(textOf(uninterrupted));
      expect(textOf(got).length).toBeGreaterThan(100);
      await stack.admin("DELETE", `/admin/v1/endpoints/${model}`);
    });
  }
});
