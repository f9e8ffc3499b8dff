/**
 * Batch jobs that go wrong, and the ways to drive them: bad lines become
 * error lines, a job that cannot proceed fails with its reason, cancellation,
 * the HTTP routes and the `platform inference batch` commands.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Queue } from "bullmq";
import { Hono } from "hono";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchCoordinator, BatchJobs, startBatchCoordinator } from "../../src/batch/index.ts";
import type { BatchJobRecord } from "../../src/contracts/batch.ts";
import { queueName } from "../../src/contracts/naming.ts";
import { createApiKey } from "../../src/control/apikeys.ts";
import { type Control, connectControl } from "../../src/control/redis.ts";
import { requireApiKey } from "../../src/gateway/auth.ts";
import { batchRoutes } from "../../src/gateway/batches.ts";
import { openAiBatchRoutes } from "../../src/gateway/openai-batches.ts";
import type { GatewayEnv } from "../../src/gateway/env.ts";
import { errorResponse } from "../../src/gateway/errors.ts";
import { PlatformError } from "../../src/errors.ts";
import { importModel } from "../../src/registry/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { StoragePolicy } from "../../src/storage/policy.ts";
import { type S3Server, startS3, waitForJob } from "../helpers/batch-env.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type CliResult, type Stack, startStack } from "../helpers/stack.ts";

const MODEL = "tiny";
const BUCKET = "batch-api";
const BATCH_CLI = fileURLToPath(new URL("../helpers/batch-cli.ts", import.meta.url));

let stack: Stack;
let ctl: Control;
let jobs: BatchJobs;
let coordinator: BatchCoordinator;
let s3: S3Server;
let scratch: string;
let gateway: { url: string; close: () => void };
let savedEnv: NodeJS.ProcessEnv;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "platform-batch-api-"));
  stack = await startStack({ model: await tinyModelPath(), args: ["--name", MODEL, "--replicas", "1", "--parallel", "2"] });
  ctl = connectControl(stack.redisUrl, "platform");
  s3 = await startS3(join(scratch, "s3"), BUCKET);
  // The coordinator here reads S3 settings from this process's environment.
  savedEnv = { ...process.env };
  Object.assign(process.env, s3.env);
  const queue = `batches-${randomUUID().slice(0, 8)}`;
  // Keys may name only what is under the scratch directory (src/storage/policy.ts).
  const storageRoots = [{ scheme: "file" as const, path: scratch }];
  jobs = new BatchJobs(ctl, { queue, storage: new StoragePolicy({ roots: storageRoots }) });
  coordinator = await startBatchCoordinator(ctl, { ...loadSettings(), storageRoots }, { queue });

  // The gateway's batch routes as app.ts mounts them, on their own small server.
  const app = new Hono<GatewayEnv>();
  app.use("/v1/*", requireApiKey(ctl));
  app.route("/v1/batch-jobs", batchRoutes({ jobs }));
  app.route("/v1", openAiBatchRoutes({ ctl, jobs, artifacts: openStore(join(stack.dataDir, "artifacts")) }));
  app.notFound((c) => errorResponse(c, new PlatformError(404, "unknown_route", "no route")));
  app.onError((e, c) => errorResponse(c, e));
  gateway = await new Promise((resolve) => {
    const server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info) => resolve({ url: `http://127.0.0.1:${info.port}`, close: () => server.close() }));
  });
});

afterAll(async () => {
  gateway?.close();
  await coordinator?.stop();
  await jobs?.close();
  await ctl?.redis.quit();
  await s3?.close();
  process.env = savedEnv;
  const code = await stack?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
  expect(code).toBe(0);
});

async function run(input: string, output: string, extra: Record<string, unknown> = {}): Promise<BatchJobRecord> {
  const created = await jobs.create({ model: MODEL, input, output, temperature: 0, ...extra });
  return waitForJob(jobs, created.id);
}

async function lines(uri: string): Promise<unknown[]> {
  const text = await readFile(fileURLToPath(uri), "utf8");
  return text === "" ? [] : text.trimEnd().split("\n").map((l) => JSON.parse(l));
}

describe("records that cannot be processed", () => {
  it("become error lines in place, in input order, and never fail the job", async () => {
    const longPrompt = Array.from({ length: 700 }, () => "the dog").join(" ");
    const input = [
      JSON.stringify({ id: "first", prompt: "Once upon a time", max_tokens: 2 }),
      "{not json",
      "",
      JSON.stringify({ id: "no-prompt", max_tokens: 2 }),
      JSON.stringify({ id: "too-long", prompt: longPrompt, max_tokens: 2 }),
      JSON.stringify({ prompt: "no id", max_tokens: 2 }),
      "[1, 2, 3]",
      JSON.stringify({ id: "zero", prompt: "x", max_tokens: 0 }),
      "   ",
      JSON.stringify({ id: "last", prompt: "The little dog", max_tokens: 3 }),
    ].join("\n");
    const path = join(scratch, "mixed.jsonl");
    await writeFile(path, input); // no newline at the end: the last line still counts
    const job = await run(path, join(scratch, "out-mixed", "result.jsonl"), { batch_size: 3 });
    expect(job.state).toBe("completed");
    expect(job.counts).toEqual({ total: 8, succeeded: 2, failed: 6, in_flight: 0 });
    const out = await lines(job.output_file as string);
    expect(out).toMatchObject([
      { id: "first", status: "success", tokens_used: expect.any(Number) },
      { id: "line-2", status: "error", error: { code: "invalid_json", message: `line 2: not valid JSON (byte offset ${Buffer.byteLength(input.split("\n")[0] as string) + 1})` } },
      { id: "no-prompt", status: "error", error: { code: "invalid_record", message: expect.stringMatching(/^line 4: prompt: /) } },
      { id: "too-long", status: "error", error: { code: "context_length_exceeded", message: expect.stringMatching(/maximum context length/) } },
      { id: "line-6", status: "error", error: { code: "invalid_record", message: expect.stringMatching(/^line 6: id: /) } },
      { id: "line-7", status: "error", error: { code: "invalid_record" } },
      { id: "zero", status: "error", error: { code: "invalid_record", message: expect.stringMatching(/max_tokens/) } },
      { id: "last", status: "success" },
    ]);
    for (const line of out as { status: string; output?: string }[]) {
      if (line.status === "error") expect(line).not.toHaveProperty("output");
    }
  });

  it("completes an empty input with zero records and an empty output", async () => {
    const path = join(scratch, "empty.jsonl");
    await writeFile(path, "");
    const job = await run(path, join(scratch, "out-empty/"));
    expect(job.state).toBe("completed");
    expect(job.counts).toEqual({ total: 0, succeeded: 0, failed: 0, in_flight: 0 });
    expect(await readFile(fileURLToPath(job.output_file as string), "utf8")).toBe("");
  });
});

describe("jobs that cannot proceed fail with the reason", () => {
  it("a missing input object (file:// and S3)", async () => {
    const missing = join(scratch, "nope.jsonl");
    const job = await run(missing, join(scratch, "out-missing/"));
    expect(job).toMatchObject({ state: "failed", error: { code: "input_not_found" }, output_file: null });
    expect(job.error?.message).toContain(missing);
    const onS3 = await run(`s3://${BUCKET}/in/nope.jsonl`, join(scratch, "out-missing/"));
    expect(onS3).toMatchObject({ state: "failed", error: { code: "input_not_found", message: expect.stringContaining(`s3://${BUCKET}/in/nope.jsonl`) } });
  });

  it("an output that cannot be written (under a file; a bucket that does not exist)", async () => {
    const input = join(scratch, "one.jsonl");
    await writeFile(input, `${JSON.stringify({ id: "a", prompt: "hi", max_tokens: 1 })}\n`);
    await writeFile(join(scratch, "a-file"), "x");
    const job = await run(input, join(scratch, "a-file", "out/"));
    expect(job).toMatchObject({ state: "failed", error: { code: "output_not_writable" } });
    expect(job.error?.message).toContain("a-file");
    const noBucket = await run(input, "s3://no-such-bucket/out/");
    expect(noBucket).toMatchObject({ state: "failed", error: { code: "output_not_writable", message: expect.stringContaining("no-such-bucket") } });
  });

  it("a model that is not registered, or registered but not deployed", async () => {
    const input = join(scratch, "one.jsonl");
    const created = await jobs.create({ model: "no-such-model", input, output: join(scratch, "out-nomodel/") });
    const job = await waitForJob(jobs, created.id);
    expect(job).toMatchObject({ state: "failed", error: { code: "model_not_found", message: expect.stringContaining("no-such-model") } });

    const imports = { ctl, artifacts: openStore(join(stack.dataDir, "artifacts")), scratchDir: join(scratch, "import") };
    await importModel(imports, { name: "undeployed", framework: "llamacpp", source: await tinyModelPath() });
    const idle = await run(input, join(scratch, "out-undeployed/"), { model: "undeployed" });
    expect(idle).toMatchObject({ state: "failed", resolved_version: "v1", error: { code: "model_not_deployed", message: expect.stringContaining("undeployed@v1") } });
  });
});

describe("cancellation", () => {
  it("stops a running job: written batches become a partial output, queued records are withdrawn", async () => {
    const path = join(scratch, "many.jsonl");
    const many = Array.from({ length: 5000 }, (_, i) => JSON.stringify({ id: `m${i}`, prompt: "Once upon a time", max_tokens: 4 }));
    await writeFile(path, `${many.join("\n")}\n`);
    const created = await jobs.create({ model: MODEL, input: path, output: join(scratch, "out-cancel/"), concurrency: 8, batch_size: 50, temperature: 0 });
    await waitForJob(jobs, created.id, (j) => j.counts.succeeded >= 120);
    const cancelling = await jobs.cancel(created.id);
    expect(["cancelling", "cancelled"]).toContain(cancelling.state);
    const job = await waitForJob(jobs, created.id);
    expect(job.state).toBe("cancelled");
    const out = (await lines(job.output_file as string)) as { id: string }[];
    expect(out.length % 50).toBe(0);
    expect(out.length).toBeGreaterThanOrEqual(100);
    expect(out.map((l) => l.id)).toEqual(Array.from({ length: out.length }, (_, i) => `m${i}`));
    expect(job.counts.succeeded).toBe(out.length);
    // Nothing of this job is left waiting on the model queue.
    const queue = new Queue(queueName(MODEL, "v1"), { connection: ctl.redis, prefix: "platform" });
    const waiting = await queue.getJobs(["prioritized", "waiting"]);
    await queue.close();
    expect(waiting.filter((j) => j.id?.startsWith(created.id))).toEqual([]);
    await expect(jobs.cancel(created.id)).resolves.toMatchObject({ state: "cancelled" });
  });

  it("cancels a job no coordinator has taken yet at once", async () => {
    const idle = new BatchJobs(ctl, { queue: `nobody-${randomUUID().slice(0, 8)}` });
    const created = await idle.create({ model: MODEL, input: join(scratch, "one.jsonl"), output: join(scratch, "out-idle/") });
    expect(created.state).toBe("queued");
    expect(await idle.cancel(created.id)).toMatchObject({ state: "cancelled", output_file: null });
    await idle.close();
  });
});

describe("HTTP routes", () => {
  const call = async (method: string, path: string, body?: unknown, key = stack.apiKey) => {
    const res = await fetch(`${gateway.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> & { error?: { code: string; param: string | null; message: string } } };
  };

  it("create, get, list and cancel, with OpenAI-style errors", async () => {
    const input = join(scratch, "one.jsonl");
    const created = await call("POST", "/v1/batch-jobs", { model: MODEL, input, output: `file://${scratch}/out-http/`, concurrency: 2 });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ object: "batch_job", model: MODEL, version: "latest", concurrency: 2, batch_size: 100 });
    const id = created.body.id as string;
    await waitForJob(jobs, id);
    const got = await call("GET", `/v1/batch-jobs/${id}`);
    expect(got.body).toMatchObject({ id, state: "completed", counts: { total: 1, succeeded: 1, failed: 0, in_flight: 0 } });
    const listed = await call("GET", "/v1/batch-jobs?limit=2");
    expect(listed.body).toMatchObject({ object: "list", has_more: true });
    expect((listed.body.data as { id: string }[])[0]?.id).toBe(id);

    expect((await call("POST", `/v1/batch-jobs/${id}/cancel`)).body.error?.code).toBe("batch_finished");
    expect((await call("GET", "/v1/batch-jobs/batch_nope")).status).toBe(404);
    // Relative names resolve inside the key's own area and may not climb out of it.
    const relative = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "../one.jsonl", output: "out/" });
    expect(relative).toMatchObject({ status: 403, body: { error: { code: "storage_forbidden", param: "input" } } });
    const bad = await call("POST", "/v1/batch-jobs", { model: MODEL, input, output: "/tmp/o/", concurrency: 0 });
    expect(bad).toMatchObject({ status: 400, body: { error: { param: "concurrency" } } });
    const unknownField = await call("POST", "/v1/batch-jobs", { model: MODEL, input, output: "/tmp/o/", colour: "red" });
    expect(unknownField.status).toBe(400);
    expect((await call("GET", "/v1/batch-jobs", undefined, "sk-wrong")).status).toBe(401);

    // A key without the admin role sees only its own jobs.
    const { key, record: user } = await createApiKey(ctl, "batch-user", "user");
    expect((await call("GET", `/v1/batch-jobs/${id}`, undefined, key)).status).toBe(404);
    expect((await call("POST", "/v1/batch-jobs", { model: MODEL, input, output: "out-user/" }, key)).status).toBe(403);
    await mkdir(join(scratch, user.id), { recursive: true });
    await writeFile(join(scratch, user.id, "one.jsonl"), await readFile(input));
    const own = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "one.jsonl", output: "out-user/" }, key);
    const mine = await call("GET", "/v1/batch-jobs", undefined, key);
    expect((mine.body.data as { id: string }[]).map((j) => j.id)).toEqual([own.body.id]);
    await waitForJob(jobs, own.body.id as string);
  });
});

describe("platform inference batch", () => {
  const cli = (args: string[], cwd = scratch): Promise<CliResult> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [BATCH_CLI, "inference", "batch", ...args], {
        cwd,
        env: { ...process.env, PLATFORM_BASE_URL: gateway.url, PLATFORM_API_KEY: stack.apiKey, PLATFORM_CONFIG_DIR: join(scratch, "cli-config") },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.once("exit", (code) => resolve({ code, stdout, stderr }));
    });

  it("submits with relative paths, watches to the end, shows status and refuses to cancel a finished job", async () => {
    const dir = join(scratch, "cli");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "in.jsonl"), Array.from({ length: 30 }, (_, i) => JSON.stringify({ id: `c${i}`, prompt: "Once upon a time", max_tokens: 2 })).join("\n"));
    const submitted = await cli(["--model", MODEL, "--version", "latest", "--input", "in.jsonl", "--output", "out/", "--concurrency", "4", "--batch-size", "10", "--temperature", "0", "--watch"], dir);
    expect(submitted.stderr).toMatch(/30\/30 done/);
    expect(submitted.code).toBe(0);
    const id = submitted.stdout.split("\n")[0] as string;
    expect(id).toMatch(/^batch_/);
    expect(submitted.stdout).toContain(`output: file://${dir}/out/${id}.jsonl`);
    expect((await lines(`file://${dir}/out/${id}.jsonl`)).length).toBe(30);

    const status = await cli(["status", id, "--json"]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ id, state: "completed", counts: { total: 30, succeeded: 30 } });
    const human = await cli(["status", id]);
    expect(human.stdout).toMatch(/state\s+completed/);
    expect(human.stdout).toMatch(/records\s+30\/30 done: 30 succeeded, 0 failed/);

    const cancel = await cli(["cancel", id]);
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toMatch(/already completed/);

    const submitOnly = await cli(["--model", MODEL, "--input", join(dir, "in.jsonl"), "--output", `${dir}/out2/`]);
    expect(submitOnly.code).toBe(0);
    expect(submitOnly.stdout.trim()).toMatch(/^batch_[0-9a-f]+$/);
    await waitForJob(jobs, submitOnly.stdout.trim());

    const missingFlag = await cli(["--input", "in.jsonl", "--output", "out/"]);
    expect(missingFlag.code).toBe(2);
    expect(missingFlag.stderr).toMatch(/--model/);
  });

  it("reads inputs from S3 too", async () => {
    const store = openStore(`s3://${BUCKET}`, s3.settings);
    await store.put("in/two.jsonl", `${JSON.stringify({ id: "s1", prompt: "hi", max_tokens: 1 })}\n${JSON.stringify({ id: "s2", prompt: "yo", max_tokens: 1 })}\n`);
    const job = await run(`s3://${BUCKET}/in/two.jsonl`, `s3://${BUCKET}/out/named.jsonl`);
    expect(job).toMatchObject({ state: "completed", output_file: `s3://${BUCKET}/out/named.jsonl` });
    const chunks: Buffer[] = [];
    for await (const c of await store.get("out/named.jsonl")) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString().trimEnd().split("\n").map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(["s1", "s2"]);
    store.close();
  });
});

describe("OpenAI Batch API shape", () => {
  it("runs a chat batch uploaded with the official client: answers in order, failures in place", async () => {
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    const chat = (customId: string, content: string, model = MODEL) => ({
      custom_id: customId,
      method: "POST",
      url: "/v1/chat/completions",
      body: { model, messages: [{ role: "user", content }], max_tokens: 3, temperature: 0 },
    });
    const requests = [
      JSON.stringify(chat("a", "Once upon a time")),
      "not json",
      JSON.stringify(chat("wrong-model", "hi", "other-model")),
      JSON.stringify(chat("too-long", Array.from({ length: 700 }, () => "the dog").join(" "))),
      JSON.stringify(chat("b", "The little dog")),
    ].join("\n");
    const file = await client.files.create({ file: await toFile(Buffer.from(requests), "requests.jsonl"), purpose: "batch" });
    expect(file).toMatchObject({ object: "file", purpose: "batch", bytes: Buffer.byteLength(requests), filename: "requests.jsonl" });
    expect((await client.files.retrieve(file.id)).id).toBe(file.id);

    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { run: "test" } });
    expect(created).toMatchObject({ object: "batch", endpoint: "/v1/chat/completions", input_file_id: file.id, metadata: { run: "test" } });
    expect(["validating", "in_progress"]).toContain(created.status);
    await waitForJob(jobs, created.id);
    const batch = await client.batches.retrieve(created.id);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
    expect((await client.batches.list()).data.map((b) => b.id)).toContain(batch.id);

    const output = (await (await client.files.content(batch.output_file_id as string)).text()).trimEnd().split("\n").map((l) => JSON.parse(l));
    expect(output.map((l: { custom_id: string }) => l.custom_id)).toEqual(["a", "line-2", "wrong-model", "too-long", "b"]);
    // The same requests made online give the same answers.
    const online = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    for (const [i, prompt] of [[0, "Once upon a time"], [4, "The little dog"]] as const) {
      const want = await online.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: prompt }], max_tokens: 3, temperature: 0 });
      expect(output[i]).toMatchObject({
        error: null,
        response: { status_code: 200, body: { object: "chat.completion", model: MODEL, choices: [{ message: { role: "assistant", content: want.choices[0]?.message.content }, finish_reason: "length" }], usage: want.usage } },
      });
    }
    expect(output[1]).toMatchObject({ response: null, error: { code: "invalid_json" } });
    // Error lines say what was expected, never echo the line's own values.
    expect(output[2]).toMatchObject({ response: null, error: { code: "invalid_request", message: expect.stringContaining(`expected "${MODEL}"`) } });
    expect(output[2].error.message).not.toContain("other-model");
    expect(output[3]).toMatchObject({ error: null, response: { status_code: 400, body: { error: { code: "context_length_exceeded", type: "invalid_request_error" } } } });

    const missing = await client.batches.create({ input_file_id: "file-nope", endpoint: "/v1/chat/completions", completion_window: "24h" }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
