/**
 * Batch jobs that go wrong, and the ways to drive them: bad lines become
 * error lines, a job that cannot proceed fails with its reason, cancellation,
 * the HTTP routes and the `platform inference batch` commands.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchCoordinator, BatchJobs, startBatchCoordinator } from "../../src/batch/index.ts";
import type { BatchJob } from "../../src/batch/record.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { requireCaller } from "../../src/gateway/auth.ts";
import { batchRoutes } from "../../src/gateway/routes/batch-jobs.ts";
import { fileRoutes } from "../../src/gateway/routes/files.ts";
import { openAiBatchRoutes } from "../../src/gateway/routes/openai-batches.ts";
import type { GatewayEnv } from "../../src/gateway/env.ts";
import { errorResponse } from "../../src/gateway/errors.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { StoragePolicy } from "../../src/storage/policy.ts";
import { type S3Server, startS3, waitForJob } from "../helpers/batch-env.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { CliResult, Stack } from "../helpers/stack.ts";

const MODEL = unique("tiny");
const UNDEPLOYED = `${MODEL}-undeployed`;
const BUCKET = "batch-api";
const BATCH_CLI = fileURLToPath(new URL("../helpers/batch-cli.ts", import.meta.url));
const PYTHON_BATCH = fileURLToPath(new URL("../helpers/openai_batch.py", import.meta.url));
// The official Python client, where it is installed (`pip install openai`; PLATFORM_TEST_PYTHON names
// an interpreter that has it, a virtual environment's say): the test that uses it says when it is skipped.
const PYTHON = process.env.PLATFORM_TEST_PYTHON ?? "python3";
const pythonClient = spawnSync(PYTHON, ["-c", "import openai"], { stdio: "ignore" }).status === 0;

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
  stack = await sharedStack();
  await deploy(stack, MODEL, {
    source: await tinyModelPath(),
    version: "v1",
    endpoint: { resources: { replicas: 1, parallel: 2 } },
  });
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
  app.use("/v1/*", requireCaller(ctl));
  app.route("/v1/batch-jobs", batchRoutes({ jobs }));
  const artifacts = openStore(join(stack.dataDir, "artifacts"));
  app.route("/v1", fileRoutes({ ctl, artifacts }));
  app.route("/v1", openAiBatchRoutes({ ctl, jobs, artifacts }));
  app.notFound((c) => errorResponse(c, new PlatformError(404, "unknown_route", "no route")));
  app.onError((e, c) => errorResponse(c, e));
  gateway = await new Promise((resolve) => {
    const server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info) =>
      resolve({ url: `http://127.0.0.1:${info.port}`, close: () => server.close() }),
    );
  });
});

afterAll(async () => {
  gateway?.close();
  await coordinator?.stop();
  await jobs?.close();
  await ctl?.redis.quit();
  await s3?.close();
  process.env = savedEnv;
  await undeploy(stack, MODEL);
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function run(input: string, output: string, extra: Record<string, unknown> = {}): Promise<BatchJob> {
  const created = await jobs.create({ model: MODEL, input, output, temperature: 0, ...extra });
  return waitForJob(jobs, created.id);
}

async function lines(uri: string): Promise<unknown[]> {
  const text = await readFile(fileURLToPath(uri), "utf8");
  return text === ""
    ? []
    : text
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l));
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
      {
        id: "line-2",
        status: "error",
        error: {
          code: "invalid_json",
          message: `line 2: not valid JSON (byte offset ${Buffer.byteLength(input.split("\n")[0] as string) + 1})`,
        },
      },
      {
        id: "no-prompt",
        status: "error",
        error: { code: "invalid_record", message: expect.stringMatching(/^line 4: prompt: /) },
      },
      {
        id: "too-long",
        status: "error",
        error: { code: "context_length_exceeded", message: expect.stringMatching(/maximum context length/) },
      },
      {
        id: "line-6",
        status: "error",
        error: { code: "invalid_record", message: expect.stringMatching(/^line 6: id: /) },
      },
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
    expect(onS3).toMatchObject({
      state: "failed",
      error: { code: "input_not_found", message: expect.stringContaining(`s3://${BUCKET}/in/nope.jsonl`) },
    });
  });

  it("an output that cannot be written (under a file; a bucket that does not exist)", async () => {
    const input = join(scratch, "one.jsonl");
    await writeFile(input, `${JSON.stringify({ id: "a", prompt: "hi", max_tokens: 1 })}\n`);
    await writeFile(join(scratch, "a-file"), "x");
    const job = await run(input, join(scratch, "a-file", "out/"));
    expect(job).toMatchObject({ state: "failed", error: { code: "output_not_writable" } });
    expect(job.error?.message).toContain("a-file");
    const noBucket = await run(input, "s3://no-such-bucket/out/");
    expect(noBucket).toMatchObject({
      state: "failed",
      error: { code: "output_not_writable", message: expect.stringContaining("no-such-bucket") },
    });
  });

  it("a model that is not registered, or registered but not deployed", async () => {
    const input = join(scratch, "one.jsonl");
    const created = await jobs.create({ model: "no-such-model", input, output: join(scratch, "out-nomodel/") });
    const job = await waitForJob(jobs, created.id);
    expect(job).toMatchObject({
      state: "failed",
      error: { code: "model_not_found", message: expect.stringContaining("no-such-model") },
    });

    const imports = {
      ctl,
      artifacts: openStore(join(stack.dataDir, "artifacts")),
      scratchDir: join(scratch, "import"),
    };
    await importModel(imports, { name: UNDEPLOYED, framework: "llamacpp", source: await tinyModelPath() });
    const idle = await run(input, join(scratch, "out-undeployed/"), { model: UNDEPLOYED });
    expect(idle).toMatchObject({
      state: "failed",
      resolved_version: "v1",
      error: { code: "model_not_deployed", message: expect.stringContaining(`${UNDEPLOYED}@v1`) },
    });
  });
});

describe("cancellation", () => {
  it("stops a running job: written batches become a partial output, queued records are withdrawn", async () => {
    const path = join(scratch, "many.jsonl");
    const many = Array.from({ length: 5000 }, (_, i) =>
      JSON.stringify({ id: `m${i}`, prompt: "Once upon a time", max_tokens: 4 }),
    );
    await writeFile(path, `${many.join("\n")}\n`);
    const created = await jobs.create({
      model: MODEL,
      input: path,
      output: join(scratch, "out-cancel/"),
      concurrency: 8,
      batch_size: 50,
      temperature: 0,
    });
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
    const queues = new QueueBase(ctl);
    const waiting = await queues
      .queue(MODEL, "v1")
      .getJobs(["prioritized", "waiting"])
      .finally(() => queues.close());
    expect(waiting.filter((j) => j.id?.startsWith(created.id))).toEqual([]);
    await expect(jobs.cancel(created.id)).resolves.toMatchObject({ state: "cancelled" });
  });

  it("cancels a job no coordinator has taken yet at once", async () => {
    const idle = new BatchJobs(ctl, { queue: `nobody-${randomUUID().slice(0, 8)}` });
    const created = await idle.create({
      model: MODEL,
      input: join(scratch, "one.jsonl"),
      output: join(scratch, "out-idle/"),
    });
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
    return {
      status: res.status,
      body: (await res.json()) as Record<string, unknown> & {
        error?: { code: string; param: string | null; message: string };
      },
    };
  };

  it("counts every record in the usage of the key that created the job, as online requests count", async () => {
    const made = await stack.admin<{ id: string; key: string }>("POST", "/admin/v1/keys", {
      name: `${MODEL}-usage`,
      role: "admin",
    });
    const input = join(scratch, "usage.jsonl");
    await writeFile(
      input,
      `${Array.from({ length: 5 }, (_, i) => JSON.stringify({ id: `u${i}`, prompt: "Once upon a time", max_tokens: 3 })).join("\n")}\n`,
    );
    const created = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input, output: `file://${scratch}/out-usage/` },
      made.body.key,
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(await waitForJob(jobs, created.body.id as string)).toMatchObject({
      state: "completed",
      counts: { succeeded: 5 },
    });
    type Row = {
      key: string;
      model: string;
      version: string;
      requests: number;
      prompt_tokens: number;
      completion_tokens: number;
      errors: number;
    };
    let rows: Row[] = [];
    await stack.waitFor(async () => {
      const res = await fetch(`${stack.baseUrl}/v1/usage?since=1h`, {
        headers: { authorization: `Bearer ${made.body.key}` },
      });
      rows = ((await res.json()) as { data: Row[] }).data.filter((r) => r.key === made.body.id);
      return rows[0]?.requests === 5;
    }, "the batch's usage");
    // The tiny model never stops early: 3 tokens a record.
    expect(rows).toEqual([
      expect.objectContaining({ model: MODEL, version: "v1", requests: 5, completion_tokens: 15, errors: 0 }),
    ]);
    expect(rows[0]?.prompt_tokens).toBeGreaterThanOrEqual(5 * 5);
  });

  it("create, get, list and cancel, with OpenAI-style errors", async () => {
    const input = join(scratch, "one.jsonl");
    const created = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input,
      output: `file://${scratch}/out-http/`,
      concurrency: 2,
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      object: "batch_job",
      model: MODEL,
      version: "latest",
      concurrency: 2,
      batch_size: 100,
    });
    const id = created.body.id as string;
    await waitForJob(jobs, id);
    const got = await call("GET", `/v1/batch-jobs/${id}`);
    expect(got.body).toMatchObject({
      id,
      state: "completed",
      counts: { total: 1, succeeded: 1, failed: 0, in_flight: 0 },
    });
    const listed = await call("GET", "/v1/batch-jobs?limit=2");
    expect(listed.body).toMatchObject({ object: "list", has_more: true });
    // Other files make batch jobs on the shared stack too: the newest of this file's is this one.
    const all = await call("GET", "/v1/batch-jobs?limit=100");
    expect((all.body.data as { id: string; model: string }[]).filter((j) => j.model === MODEL)[0]?.id).toBe(id);

    expect((await call("POST", `/v1/batch-jobs/${id}/cancel`)).body.error?.code).toBe("batch_finished");
    expect((await call("GET", "/v1/batch-jobs/batch_nope")).status).toBe(404);
    // Relative names resolve inside the key's own area and may not climb out of it.
    const relative = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "../one.jsonl", output: "out/" });
    expect(relative).toMatchObject({ status: 403, body: { error: { code: "storage_forbidden", param: "input" } } });
    const bad = await call("POST", "/v1/batch-jobs", { model: MODEL, input, output: "/tmp/o/", concurrency: 0 });
    expect(bad).toMatchObject({ status: 400, body: { error: { param: "concurrency" } } });
    const unknownField = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input,
      output: "/tmp/o/",
      colour: "red",
    });
    expect(unknownField.status).toBe(400);
    expect((await call("GET", "/v1/batch-jobs", undefined, "sk-wrong")).status).toBe(401);

    // A key without the admin role sees only its own jobs.
    const { key, record: user } = await createApiKey(ctl, `${MODEL}-user`, "user");
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
        env: {
          ...process.env,
          PLATFORM_BASE_URL: gateway.url,
          PLATFORM_API_KEY: stack.apiKey,
          PLATFORM_CONFIG_DIR: join(scratch, "cli-config"),
        },
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
    await writeFile(
      join(dir, "in.jsonl"),
      Array.from({ length: 30 }, (_, i) =>
        JSON.stringify({ id: `c${i}`, prompt: "Once upon a time", max_tokens: 2 }),
      ).join("\n"),
    );
    const submitted = await cli(
      [
        "--model",
        MODEL,
        "--version",
        "latest",
        "--input",
        "in.jsonl",
        "--output",
        "out/",
        "--concurrency",
        "4",
        "--batch-size",
        "10",
        "--temperature",
        "0",
        "--watch",
      ],
      dir,
    );
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
    await store.put(
      "in/two.jsonl",
      `${JSON.stringify({ id: "s1", prompt: "hi", max_tokens: 1 })}\n${JSON.stringify({ id: "s2", prompt: "yo", max_tokens: 1 })}\n`,
    );
    const job = await run(`s3://${BUCKET}/in/two.jsonl`, `s3://${BUCKET}/out/named.jsonl`);
    expect(job).toMatchObject({ state: "completed", output_file: `s3://${BUCKET}/out/named.jsonl` });
    const chunks: Buffer[] = [];
    for await (const c of await store.get("out/named.jsonl")) chunks.push(c as Buffer);
    expect(
      Buffer.concat(chunks)
        .toString()
        .trimEnd()
        .split("\n")
        .map((l) => (JSON.parse(l) as { id: string }).id),
    ).toEqual(["s1", "s2"]);
    store.close();
  });
});

describe("OpenAI Batch API shape", () => {
  const chat = (customId: string, content: string, model = MODEL) => ({
    custom_id: customId,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model, messages: [{ role: "user", content }], max_tokens: 3, temperature: 0 },
  });
  const clientFor = (apiKey: string) => new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey, maxRetries: 0 });
  const jsonl = async (client: OpenAI, fileId: string) => {
    const text = await (await client.files.content(fileId)).text();
    return {
      text,
      lines:
        text === ""
          ? []
          : text
              .trimEnd()
              .split("\n")
              .map((l) => JSON.parse(l) as Record<string, any>),
    };
  };
  /** Uploads `lines`, runs them as a chat batch, and returns the finished batch. */
  const runBatch = async (client: OpenAI, lines: string[], metadata?: Record<string, string>) => {
    const text = lines.join("\n");
    const file = await client.files.create({
      file: await toFile(Buffer.from(text), "requests.jsonl"),
      purpose: "batch",
    });
    expect(file).toMatchObject({
      object: "file",
      purpose: "batch",
      bytes: Buffer.byteLength(text),
      filename: "requests.jsonl",
    });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
      ...(metadata ? { metadata } : {}),
    });
    expect(created).toMatchObject({
      object: "batch",
      endpoint: "/v1/chat/completions",
      input_file_id: file.id,
      output_file_id: null,
      error_file_id: null,
    });
    expect(["validating", "in_progress"]).toContain(created.status);
    await waitForJob(jobs, created.id);
    return client.batches.retrieve(created.id);
  };

  it("answers go to the output file, failures to the error file (official client)", async () => {
    const client = clientFor(stack.apiKey);
    const first = JSON.stringify(chat("a", "Once upon a time"));
    const batch = await runBatch(
      client,
      [
        first,
        "not json",
        JSON.stringify(chat("wrong-model", "hi", "other-model")),
        JSON.stringify(chat("too-long", Array.from({ length: 700 }, () => "the dog").join(" "))),
        JSON.stringify(chat("b", "The little dog")),
      ],
      { run: "test" },
    );
    expect(batch).toMatchObject({
      status: "completed",
      metadata: { run: "test" },
      output_file_id: expect.stringMatching(/^file-/),
      error_file_id: expect.stringMatching(/^file-/),
    });
    expect(batch.error_file_id).not.toBe(batch.output_file_id);
    expect(batch.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
    expect((await client.batches.list()).data.map((b) => b.id)).toContain(batch.id);

    // Output file: only the answers, in input order, as OpenAI writes them.
    const output = await jsonl(client, batch.output_file_id as string);
    expect(output.lines.map((l) => l.custom_id)).toEqual(["a", "b"]);
    const online = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    for (const [i, prompt] of [
      [0, "Once upon a time"],
      [1, "The little dog"],
    ] as const) {
      const want = await online.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: prompt }],
        max_tokens: 3,
        temperature: 0,
      });
      expect(output.lines[i]).toEqual({
        id: expect.stringMatching(/^batch_req_[0-9a-f]+$/),
        custom_id: i === 0 ? "a" : "b",
        response: {
          status_code: 200,
          request_id: expect.stringMatching(/^req_/),
          body: expect.objectContaining({
            object: "chat.completion",
            model: MODEL,
            choices: [
              {
                index: 0,
                message: { role: "assistant", content: want.choices[0]?.message.content },
                logprobs: null,
                finish_reason: "length",
              },
            ],
            // The counts; a batch line reports no cached share (the online answer may: docs/batch.md).
            usage: {
              prompt_tokens: want.usage?.prompt_tokens,
              completion_tokens: want.usage?.completion_tokens,
              total_tokens: want.usage?.total_tokens,
            },
          }),
        },
        error: null,
      });
    }

    // Error file: every failure, in input order. A line that could not be sent: `response: null` and
    // `error`; a request the model refused: its HTTP status and error envelope, `error: null`.
    const errors = await jsonl(client, batch.error_file_id as string);
    expect(errors.lines).toEqual([
      {
        id: expect.stringMatching(/^batch_req_/),
        custom_id: "line-2",
        response: null,
        error: {
          code: "invalid_json",
          message: `line 2: not valid JSON (byte offset ${Buffer.byteLength(first) + 1})`,
        },
      },
      {
        id: expect.stringMatching(/^batch_req_/),
        custom_id: "wrong-model",
        response: null,
        error: { code: "invalid_request", message: expect.stringContaining(`expected "${MODEL}"`) },
      },
      {
        id: expect.stringMatching(/^batch_req_/),
        custom_id: "too-long",
        response: {
          status_code: 400,
          request_id: expect.stringMatching(/^req_/),
          body: {
            error: {
              message: expect.stringMatching(/maximum context length/),
              type: "invalid_request_error",
              param: expect.anything(),
              code: "context_length_exceeded",
            },
          },
        },
        error: null,
      },
    ]);
    // Error lines say what was expected, never echo the line's own values.
    expect(errors.text).not.toContain("other-model");
    // Request ids are per line: no line of one file shares one with the other.
    expect(new Set([...output.lines, ...errors.lines].map((l) => l.id)).size).toBe(5);

    // Both are ordinary files of the batch's key, with OpenAI's purpose and their real size.
    for (const [id, text, suffix] of [
      [batch.output_file_id, output.text, "output"],
      [batch.error_file_id, errors.text, "error"],
    ] as const) {
      expect(await client.files.retrieve(id as string)).toMatchObject({
        id,
        object: "file",
        purpose: "batch_output",
        bytes: Buffer.byteLength(text),
        filename: `${batch.id}_${suffix}.jsonl`,
      });
    }
    // The platform's own route shows the same job; its result is the output file.
    const res = await fetch(`${gateway.url}/v1/batch-jobs/${batch.id}/output`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
    });
    expect(await res.text()).toBe(output.text);

    const missing = await client.batches
      .create({ input_file_id: "file-nope", endpoint: "/v1/chat/completions", completion_window: "24h" })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it.skipIf(!pythonClient)("the official Python client reads the same two files", async () => {
    const input = [
      JSON.stringify(chat("py-ok", "Once upon a time")),
      "not json",
      JSON.stringify(chat("py-long", Array.from({ length: 700 }, () => "the dog").join(" "))),
    ].join("\n");
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(PYTHON, [PYTHON_BATCH, `${gateway.url}/v1`], {
        env: { ...process.env, OPENAI_API_KEY: stack.apiKey },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.once("exit", (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(input);
    });
    expect(result.code, result.stderr).toBe(0);
    const { batch, output, errors } = JSON.parse(result.stdout) as {
      batch: Record<string, any>;
      output: Record<string, any>[] | null;
      errors: Record<string, any>[] | null;
    };
    expect(batch).toMatchObject({
      object: "batch",
      status: "completed",
      request_counts: { total: 3, completed: 1, failed: 2 },
      output_file_id: expect.stringMatching(/^file-/),
      error_file_id: expect.stringMatching(/^file-/),
    });
    expect(output?.map((l) => [l.custom_id, l.response.status_code, l.error])).toEqual([["py-ok", 200, null]]);
    expect(errors?.map((l) => [l.custom_id, l.response?.status_code ?? null, l.error?.code ?? null])).toEqual([
      ["line-2", null, "invalid_json"],
      ["py-long", 400, null],
    ]);
  });

  it("a cancelled batch gets both files for the requests written before the cancel", async () => {
    const client = clientFor(stack.apiKey);
    const requests = Array.from({ length: 3000 }, (_, i) =>
      i === 1 ? "not json" : JSON.stringify(chat(`c${i}`, "Once upon a time")),
    );
    const text = requests.join("\n");
    const file = await client.files.create({ file: await toFile(Buffer.from(text), "many.jsonl"), purpose: "batch" });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
    });
    await waitForJob(jobs, created.id, (j) => j.counts.succeeded + j.counts.failed >= 200);
    expect(["cancelling", "cancelled"]).toContain((await client.batches.cancel(created.id)).status);
    await waitForJob(jobs, created.id);
    const batch = await client.batches.retrieve(created.id);
    expect(batch).toMatchObject({
      status: "cancelled",
      output_file_id: expect.stringMatching(/^file-/),
      error_file_id: expect.stringMatching(/^file-/),
    });
    const output = (await jsonl(client, batch.output_file_id as string)).lines;
    const errors = (await jsonl(client, batch.error_file_id as string)).lines;
    expect(errors.map((l) => [l.custom_id, l.error.code])).toEqual([["line-2", "invalid_json"]]);
    // Whole batches of 100, in order, less the one failure.
    expect((output.length + 1) % 100).toBe(0);
    expect(output.map((l) => l.custom_id)).toEqual(
      Array.from({ length: output.length + 1 }, (_, i) => `c${i}`).filter((id) => id !== "c1"),
    );
    expect(batch.request_counts).toEqual({ total: 3000, completed: output.length, failed: 1 });
  });

  it("a batch without failures has no error file, one without answers no output file; both only for their key", async () => {
    const { key: ownerKey } = await createApiKey(ctl, `${MODEL}-owner`, "user");
    const { key: otherKey } = await createApiKey(ctl, `${MODEL}-other`, "user");
    const owner = clientFor(ownerKey);
    const other = clientFor(otherKey);

    const clean = await runBatch(owner, [
      JSON.stringify(chat("ok-1", "Once upon a time")),
      JSON.stringify(chat("ok-2", "The little dog")),
    ]);
    expect(clean).toMatchObject({
      status: "completed",
      request_counts: { total: 2, completed: 2, failed: 0 },
      output_file_id: expect.stringMatching(/^file-/),
      error_file_id: null,
    });
    expect(
      (await jsonl(owner, clean.output_file_id as string)).lines.map((l) => [
        l.custom_id,
        l.response.status_code,
        l.error,
      ]),
    ).toEqual([
      ["ok-1", 200, null],
      ["ok-2", 200, null],
    ]);

    // The first line names the model (it decides the batch's), but the wrong url.
    const broken = await runBatch(owner, [JSON.stringify({ ...chat("bad-url", "hi"), url: "/v1/completions" }), "{"]);
    expect(broken).toMatchObject({
      status: "completed",
      request_counts: { total: 2, completed: 0, failed: 2 },
      output_file_id: null,
      error_file_id: expect.stringMatching(/^file-/),
    });
    expect(
      (await jsonl(owner, broken.error_file_id as string)).lines.map((l) => [l.custom_id, l.response, l.error.code]),
    ).toEqual([
      ["bad-url", null, "invalid_request"],
      ["line-2", null, "invalid_json"],
    ]);

    // Another key sees neither the batches nor their files; an admin key sees both.
    for (const id of [clean.output_file_id, broken.error_file_id] as string[]) {
      await expect(other.files.retrieve(id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      await expect(other.files.content(id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      await expect(other.files.delete(id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      expect((await other.files.list()).data.map((f) => f.id)).not.toContain(id);
      expect((await clientFor(stack.apiKey).files.retrieve(id)).id).toBe(id);
    }
    await expect(other.batches.retrieve(broken.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);

    // A deleted error file stays deleted: showing the batch again does not bring it back.
    await owner.files.delete(broken.error_file_id as string);
    expect((await owner.batches.retrieve(broken.id)).error_file_id).toBe(broken.error_file_id);
    await expect(owner.files.retrieve(broken.error_file_id as string)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(owner.files.content(broken.error_file_id as string)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });
});
