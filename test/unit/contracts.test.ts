/** The small pure pieces at the edges: config validation, naming, state derivation, request mapping. */
import { QueueKeys } from "bullmq";
import { describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { endpointQueueName, notApplied } from "../../src/contracts/engines.ts";
import { describeIssues } from "../../src/contracts/issues.ts";
import { adapterRefusal, type JobKind, JobPayload, takesAdapter } from "../../src/contracts/job.ts";
import { contextLengthExceeded, embeddingInputTooLong } from "../../src/contracts/context-window.ts";
import { CompletionRequest } from "../../src/contracts/openai/completions.ts";
import { COORDINATOR_QUEUE, controlKeys, queueName } from "../../src/contracts/naming.ts";
import { RegisteredVersion } from "../../src/models/record.ts";
import { endpointNameFor } from "../../src/endpoints/from-source.ts";
import { deriveState } from "../../src/endpoints/status.ts";
import { toMessages } from "../../src/contracts/openai/chat.ts";
import { toParams } from "../../src/contracts/openai/common.ts";
import { huggingFaceUrl } from "../../src/models/sources.ts";
import { plainChatPrompt } from "../../workers/engines/engine.ts";

const errorsOf = (input: unknown) => {
  const r = DeploymentConfig.safeParse(input);
  return r.success ? "" : describeIssues(r.error);
};

describe("deployment config", () => {
  it("accepts every documented field and fills defaults", () => {
    const c = DeploymentConfig.parse({ model: { name: "m" } });
    expect(c.model.version).toBe("latest");
    expect(c.resources).toMatchObject({ replicas: 1, parallel: 4 });
  });

  it("names the field and the expected form", () => {
    expect(errorsOf({ model: { name: "m" }, resources: { memory: "4GB" } })).toBe(
      'resources.memory: expected "<n>Gi" (or "<n>Mi")',
    );
    expect(errorsOf({ model: { name: "m" }, runtime: { gpu_memory_utilization: 1.5 } })).toMatch(
      /^runtime\.gpu_memory_utilization: /,
    );
    expect(errorsOf({ model: { name: "m", framework: "tensorrt" } })).toMatch(/^model\.framework: /);
    expect(errorsOf({ model: { name: "bad name!" } })).toMatch(/^model\.name: expected letters, digits/);
    expect(errorsOf({ model: { name: "m" }, extra: 1 })).toBe('unknown field(s) "extra"');
    expect(errorsOf({})).toMatch(/^model: /);
  });

  it("gives endpoints whose engine settings change answers a queue of their own", () => {
    const queueOf = (runtime: object) =>
      endpointQueueName({ config: DeploymentConfig.parse({ model: { name: "m" }, runtime }), version: "v1" });
    expect(queueOf({})).toBe("{m@v1}");
    expect(queueOf({ dtype: "auto", gpu_memory_utilization: 0.8 })).toBe("{m@v1}");
    expect(queueOf({ speculative_model: "d:}{x", num_speculative_tokens: 3 })).toMatch(/^\{m@v1~draft[0-9a-f]{8}\}$/);
    expect(queueOf({ quantization: "int4" })).toBe("{m@v1~int4}");
    expect(queueOf({ quantization: "int8", dtype: "float16", max_model_len: 2048 })).toBe(
      "{m@v1~int8-float16-ctx2048}",
    );
  });

  it("reports what each engine cannot apply", () => {
    const c = DeploymentConfig.parse({
      model: { name: "m" },
      runtime: { dtype: "float16", max_model_len: 128 },
      resources: { gpu: 1, cpu: 2 },
    });
    expect(notApplied("llamacpp", c)).toEqual(["runtime.dtype"]);
    expect(notApplied("vllm", c)).toEqual(["resources.cpu"]);
  });
});

describe("queue contract", () => {
  it("validates a producer's payload and rejects unknown kinds", () => {
    const ok = JobPayload.safeParse({
      v: 1,
      kind: "completion",
      request_id: "r",
      model: "m",
      version: "v1",
      prompt: "hi",
    });
    expect(ok.success).toBe(true);
    expect(ok.success && ok.data.kind === "completion" && ok.data.params).toEqual({});
    expect(
      JobPayload.safeParse({ v: 2, kind: "completion", request_id: "r", model: "m", version: "v1", prompt: "hi" })
        .success,
    ).toBe(false);
    expect(JobPayload.safeParse({ v: 1, kind: "image", request_id: "r", model: "m", version: "v1" }).success).toBe(
      false,
    );
  });

  it("holds max_tokens 0 to echo with the completions route's words", () => {
    const job = (params: object) => ({
      v: 1,
      kind: "completion",
      request_id: "r",
      model: "m",
      version: "v1",
      prompt: "hi",
      params,
    });
    const jobIssues = (params: object) => {
      const r = JobPayload.safeParse(job(params));
      return r.success ? "" : describeIssues(r.error);
    };
    const routeIssues = (body: object) => {
      const r = CompletionRequest.safeParse({ model: "m", prompt: "hi", ...body });
      return r.success ? "" : describeIssues(r.error);
    };
    const words =
      "0 generates nothing: it is allowed only with echo: true (to score the prompt); ask for at least 1 token";
    expect(jobIssues({ max_tokens: 0 })).toBe(`params.max_tokens: ${words}`);
    expect(routeIssues({ max_tokens: 0, echo: false })).toBe(`max_tokens: ${words}`);
    expect(jobIssues({ max_tokens: 0, echo: true })).toBe("");
    expect(routeIssues({ max_tokens: 0, echo: true })).toBe("");
  });

  it("names the work an adapter does not apply to", () => {
    expect(["chat", "completion", "generate", "batch_record"].every((k) => takesAdapter(k as JobKind))).toBe(true);
    expect(["embedding", "image", "tokenize"].some((k) => takesAdapter(k as JobKind))).toBe(false);
    expect(adapterRefusal("embedding")).toBe(
      "LoRA adapters apply to text generation (chat, completions), not to embeddings",
    );
  });
});

describe("what overflows the context window is told", () => {
  it("in OpenAI's words, from the gateway's lower bound and from an engine's exact count", () => {
    const early = contextLengthExceeded({
      window: 8,
      promptTokens: 9,
      completionTokens: 1,
      where: "prompt[1]",
      param: "prompt",
      atLeast: true,
    });
    expect([early.status, early.code, early.param]).toEqual([400, "context_length_exceeded", "prompt"]);
    expect(early.message).toBe(
      "This model's maximum context length is 8 tokens. However, you requested at least 10 tokens (at least 9 in the prompt[1], 1 in the completion). Please reduce the length of the prompt[1] or completion.",
    );
    expect(
      contextLengthExceeded({ window: 8, promptTokens: 5, completionTokens: 4, where: "messages", param: "max_tokens" })
        .message,
    ).toBe(
      "This model's maximum context length is 8 tokens. However, you requested 9 tokens (5 in the messages, 4 in the completion). Please reduce the length of the messages or completion.",
    );
    const input = embeddingInputTooLong(2, 70, 63);
    expect([input.status, input.code, input.param, input.message]).toEqual([
      400,
      "context_length_exceeded",
      "input",
      "input[2] has 70 tokens; this model embeds at most 63 tokens per input. Shorten or split input[2].",
    ]);
  });
});

/** What Redis Cluster hashes: the first non-empty `{...}`, else the whole key. */
function hashed(key: string): string {
  const open = key.indexOf("{");
  const close = open < 0 ? -1 : key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

describe("key layout (Redis Cluster slots)", () => {
  const keys = controlKeys("platform");

  it("puts each queue's keys in one slot, and different queues in different ones", () => {
    const bull = new QueueKeys("platform");
    const tiny = Object.values(bull.getKeys(queueName("tiny", "v1"))).concat(
      bull.toKey(queueName("tiny", "v1"), "job-1"),
    );
    expect(new Set(tiny.map(hashed))).toEqual(new Set(["tiny@v1"]));
    expect(hashed(bull.toKey(queueName("tiny", "v2"), "wait"))).not.toBe(
      hashed(bull.toKey(queueName("tiny", "v1"), "wait")),
    );
    expect(new Set(Object.values(bull.getKeys(COORDINATOR_QUEUE)).map(hashed)).size).toBe(1);
  });

  it("gives the keys of every MULTI, script and multi-key command one slot", () => {
    const together = [
      [keys.replica("r1"), keys.replicas("e"), keys.replica("r2")], // writeReplica, removeReplica, listReplicas' MGET
      [keys.apiKeys, keys.apiKeyByHash, keys.bootstrapKey], // createApiKey, revokeApiKey, the bootstrap script
      [
        keys.autoscaling("e"),
        keys.autoscaling("f"),
        keys.scalingHistory("e"),
        keys.scalingDecisions("e"),
        keys.scalingDecisionCounts,
      ], // recordDecision, MGET, DEL
      [keys.batch("b1"), keys.batches], // createRecord
      [keys.batchResults("b1"), keys.batchReplies("b1"), keys.batchCheckpoint("b1")], // the batch's clean-up DEL
      [
        `${keys.rateLimit("key_1")}:key:w`,
        `${keys.rateLimit("key_1")}:key:s`,
        `${keys.rateLimit("key_1")}:model:tiny:t`,
      ], // one key's rate-limit script
      [keys.usage("m:60"), keys.usage("h:3600")], // a request's usage pipeline, a usage query's
    ];
    for (const group of together) expect(new Set(group.map(hashed)).size, group.join(" ")).toBe(1);
  });

  it("lets the per-request and per-batch traffic spread, and keeps every key under the prefix", () => {
    expect(
      new Set(
        [
          keys.replyStream("g1"),
          keys.replyStream("g2"),
          keys.cancelled("j1"),
          keys.batchResults("b1"),
          keys.batchResults("b2"),
          keys.endpoints,
        ].map(hashed),
      ).size,
    ).toBe(6);
    // Different API keys' rate limits spread as well.
    expect(
      new Set([keys.rateLimit("key_1"), keys.rateLimit("key_2"), keys.usage("m:60"), keys.endpoints].map(hashed)).size,
    ).toBe(4);
    const all = Object.values(keys).map((k) => (typeof k === "function" ? k("x", "y") : k));
    for (const k of all) expect(k.startsWith("platform:")).toBe(true);
  });
});

describe("helpers", () => {
  it("derives endpoint states", () => {
    expect(deriveState(1, 0, 0, false)).toBe("pending");
    expect(deriveState(2, 2, 0, true)).toBe("available");
    expect(deriveState(2, 1, 0, true)).toBe("degraded");
    expect(deriveState(1, 0, 0, true)).toBe("degraded");
    expect(deriveState(1, 0, 1, false)).toBe("failed");
    expect(deriveState(0, 0, 0, true)).toBe("scaled_to_zero");
  });

  it("maps OpenAI request fields to sampling params", () => {
    expect(toParams({ max_tokens: 5, stop: "x", temperature: 0 })).toMatchObject({
      max_tokens: 5,
      stop: ["x"],
      temperature: 0,
    });
    expect(toParams({ max_tokens: 5, max_completion_tokens: 7 }).max_tokens).toBe(7);
    expect(
      toMessages([
        {
          role: "developer",
          content: [
            { type: "text", text: "a" },
            { type: "text", text: "b" },
          ],
        },
      ]),
    ).toEqual([{ role: "system", content: "ab" }]);
  });

  it("renders the plain chat fallback", () => {
    expect(plainChatPrompt([{ role: "user", content: "Once upon a time" }])).toBe("Once upon a time");
    expect(
      plainChatPrompt([
        { role: "system", content: "s" },
        { role: "user", content: "u" },
      ]),
    ).toBe("s\nu");
  });

  it("names endpoints after files and resolves hf:// sources", () => {
    expect(endpointNameFor("../models/stories260K.gguf")).toBe("stories260K");
    expect(endpointNameFor("https://x.org/My Model (Q4).gguf?dl=1")).toBe("My-Model--Q4-");
    expect(huggingFaceUrl("hf://org/repo/sub/file.gguf")).toBe(
      "https://huggingface.co/org/repo/resolve/main/sub/file.gguf",
    );
    expect(huggingFaceUrl("hf://org/repo@abc123/file.gguf")).toBe(
      "https://huggingface.co/org/repo/resolve/abc123/file.gguf",
    );
    expect(() => huggingFaceUrl("hf://org")).toThrow(/expected hf:\/\//);
  });
});

describe("model version records", () => {
  const record = {
    name: "m",
    version: "v1",
    framework: "llamacpp",
    source: "m.gguf",
    artifact: "models/m/v1/m.gguf",
    sha256: "a".repeat(64),
    size_bytes: 1,
    gguf: null,
    created: 1,
  };

  it("take a version's digest only as a lowercase hex SHA-256: it names cache files and store keys", () => {
    expect(RegisteredVersion.safeParse(record).success).toBe(true);
    for (const sha256 of ["../../etc", "A".repeat(64), "a".repeat(63)])
      expect(RegisteredVersion.safeParse({ ...record, sha256 }).success).toBe(false);
    const manifest = [{ path: "config.json", size: 1, sha256: "x/../y" }];
    expect(RegisteredVersion.safeParse({ ...record, kind: "hf", manifest }).success).toBe(false);
  });
});

describe("a request's priority (vLLM's field)", () => {
  it("takes an integer from -10 to 10 on chat and completions, and names the range otherwise", async () => {
    const { ChatCompletionRequest } = await import("../../src/contracts/openai/chat.ts");
    const { CompletionRequest } = await import("../../src/contracts/openai/completions.ts");
    const chat = { model: "m", messages: [{ role: "user", content: "hi" }] };
    expect(ChatCompletionRequest.parse({ ...chat, priority: -3 }).priority).toBe(-3);
    expect(CompletionRequest.parse({ model: "m", prompt: "x", priority: 10 }).priority).toBe(10);
    for (const priority of [11, -11, 1.5]) {
      const issue = ChatCompletionRequest.safeParse({ ...chat, priority }).error?.issues[0];
      expect(issue?.path).toEqual(["priority"]);
      expect(issue?.message).toBe("expected an integer from -10 to 10 (lower is served first)");
    }
  });
});
