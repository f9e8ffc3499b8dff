/**
 * Batch jobs on a gateway with no storage roots (a cluster's default), in
 * process against a private Redis, with a stand-in worker that answers
 * records: the CLI's upload-and-download flow with a server-kept output, local
 * files never replaced silently, job records and answers free of server
 * detail, failures that keep what was done, and stored data that does not
 * parse (records, keys, versions, model job results) handled without hanging
 * or leaking parser text.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Queue, type Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { captureLogs } from "../helpers/logs.ts";
import { type BatchCoordinator, startBatchCoordinator } from "../../src/batch/index.ts";
import { COORDINATOR_JOB, COORDINATOR_QUEUE } from "../../src/batch/jobs.ts";
import { RecordJobs } from "../../src/batch/record-jobs.ts";
import { type BatchSpec, createRecord } from "../../src/batch/store.ts";
import type { BatchJob } from "../../src/batch/record.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { deployEndpoint } from "../../src/endpoints/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { ANSWER_FIELD } from "../../src/queue/kept-answers.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings, type Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { sleep } from "../helpers/wait.ts";

const BATCH_CLI = fileURLToPath(new URL("../helpers/batch-cli.ts", import.meta.url));

let redis: PrivateRedis;
let ctl: Control;
/** The stand-in worker and the queues tests add to or read directly. */
let queues: QueueBase;
let settings: Settings;
let gateway: RunningGateway;
let coordinator: BatchCoordinator;
let worker: Worker;
let scratch: string;
let dataDir: string;
let local: string;
let admin: { id: string; key: string };
let userA: { id: string; key: string };
let userB: { id: string; key: string };
/** The stand-in worker answers a record once this settles. */
let gate: Promise<void> = Promise.resolve();

beforeAll(async () => {
  redis = await privateRedis();
  scratch = await mkdtemp(join(tmpdir(), "platform-batch-errors-"));
  dataDir = join(scratch, "data");
  local = join(scratch, "laptop");
  await mkdir(local, { recursive: true });
  // No PLATFORM_STORAGE_ROOTS: every client-named URI is refused, as in a cluster by default.
  settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir }), redisUrl: redis.url };
  expect(settings.storageRoots).toEqual([]);
  ctl = connectControl(redis.url, settings.prefix);
  const key = async (name: string, role: "admin" | "user") => {
    const made = await createApiKey(ctl, name, role);
    return { id: made.record.id, key: made.key };
  };
  admin = await key("admin", "admin");
  userA = await key("a", "user");
  userB = await key("b", "user");
  await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny", framework: "llamacpp", source: await tinyModelPath() },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny" }, resources: { replicas: 0 } }));
  queues = new QueueBase(ctl);
  worker = queues.worker(
    "tiny",
    "v1",
    async (job) => {
      await gate;
      const data = job.data as { prompt?: string; reply: { stream: string } };
      const result = {
        type: "text",
        text: `echo ${data.prompt ?? ""}`,
        finish_reason: "stop",
        usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
        replica: "stand-in",
      };
      await ctl.redis.xadd(
        data.reply.stream,
        "*",
        "job",
        job.id as string,
        "e",
        JSON.stringify({ type: "done", result }),
      );
      return result;
    },
    { concurrency: 8 },
  );
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  coordinator = await startBatchCoordinator(ctl, settings);
});

afterAll(async () => {
  await coordinator?.stop();
  await worker?.close();
  await queues?.close();
  await gateway?.close();
  ctl?.redis.disconnect();
  await redis?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

type ErrorBody = { error: { message: string; code: string; param: string | null } };

async function api<T = Record<string, unknown>>(
  method: string,
  path: string,
  key: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

async function upload(key: string, text: string): Promise<string> {
  const form = new FormData();
  form.set("purpose", "batch");
  form.set("file", new Blob([text]), "in.jsonl");
  const res = await fetch(`${gateway.url}/v1/files`, {
    method: "POST",
    body: form,
    headers: { authorization: `Bearer ${key}` },
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { id: string }).id;
}

function records(n: number, prefix: string): string {
  return `${Array.from({ length: n }, (_, i) => JSON.stringify({ id: `${prefix}${i}`, prompt: `p${i}`, max_tokens: 3 })).join("\n")}\n`;
}

type Cli = {
  child: ChildProcess;
  stdout: () => string;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
};

/** `platform inference batch ...` against the in-process gateway, as `key`, from a machine that shares no files with it. */
function cli(args: string[], key: string): Cli {
  const env = {
    ...process.env,
    PLATFORM_BASE_URL: gateway.url,
    PLATFORM_API_KEY: key,
    PLATFORM_CONFIG_DIR: join(scratch, "config"),
    PLATFORM_CLI_UPLOAD: undefined,
  };
  const child = spawn(process.execPath, [BATCH_CLI, "inference", "batch", ...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once("exit", (code) => resolve({ code, stdout, stderr })),
  );
  return { child, stdout: () => stdout, done };
}

async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const logOf = (logs: { text: () => string }) => logs.text();

describe("the CLI against a gateway with no storage roots", () => {
  it("uploads the input, has the server keep the result, and downloads it at the end", async () => {
    await writeFile(join(local, "prompts.jsonl"), records(5, "d"));
    const run = await cli(
      [
        "--model",
        "tiny",
        "--version",
        "v1",
        "--input",
        join(local, "prompts.jsonl"),
        "--output",
        join(local, "got.jsonl"),
        "--watch",
        "--batch-size",
        "2",
      ],
      userA.key,
    ).done;
    expect(run.code, run.stderr).toBe(0);
    const got = (await readFile(join(local, "got.jsonl"), "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { id: string; output: string });
    expect(got.map((l) => l.id)).toEqual(["d0", "d1", "d2", "d3", "d4"]);
    expect(got[0]?.output).toBe("echo p0");

    const id = run.stdout.split("\n")[0] as string;
    const job = await api<BatchJob>("GET", `/v1/batch-jobs/${id}`, userA.key);
    expect(job.body).toMatchObject({
      state: "completed",
      input: expect.stringMatching(/^file-/),
      output: "batch-outputs/",
      output_file: `batch-outputs/${id}.jsonl`,
    });
    expect(JSON.stringify(job.body)).not.toContain(dataDir);
    // Only the key that made it, or an admin, can fetch the result.
    const output = (key: string) =>
      fetch(`${gateway.url}/v1/batch-jobs/${id}/output`, { headers: { authorization: `Bearer ${key}` } });
    expect((await output(userB.key)).status).toBe(404);
    const byAdmin = await output(admin.key);
    expect(byAdmin.status).toBe(200);
    expect(await byAdmin.text()).toBe(await readFile(join(local, "got.jsonl"), "utf8"));
  });

  it("lets output be left out only when the input is an uploaded file", async () => {
    const refused = await api<ErrorBody>("POST", "/v1/batch-jobs", userA.key, { model: "tiny", input: "in.jsonl" });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({ code: "invalid_request", param: "output" });
    const named = await api<ErrorBody>("POST", "/v1/batch-jobs", userA.key, {
      model: "tiny",
      input_file_id: await upload(userA.key, records(1, "n")),
      output: "out/",
    });
    expect(named.status).toBe(403);
    expect(named.body.error.code).toBe("storage_forbidden");
  });
});

describe("a local result never replaces a file silently", () => {
  it("refuses a file that appeared during --watch, and `batch download` replaces one only with --overwrite", async () => {
    let release!: () => void;
    gate = new Promise((resolve) => (release = resolve));
    const target = join(local, "late.jsonl");
    try {
      await writeFile(join(local, "late-in.jsonl"), records(3, "w"));
      const run = cli(
        ["--model", "tiny", "--version", "v1", "--input", join(local, "late-in.jsonl"), "--output", target, "--watch"],
        userA.key,
      );
      const id = await waitFor("the job id", async () => run.stdout().split("\n")[0] || undefined);
      expect(id).toMatch(/^batch_/);
      await writeFile(target, "precious\n");
      release();
      const ended = await run.done;
      expect(ended.code).not.toBe(0);
      expect(ended.stderr).toMatch(/late\.jsonl.*exists.*--overwrite/s);
      expect(ended.stderr).toContain(`platform inference batch download ${id}`);
      expect(await readFile(target, "utf8")).toBe("precious\n");

      const refused = await cli(["download", id, "--to", target], userA.key).done;
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(/--overwrite/);
      expect(await readFile(target, "utf8")).toBe("precious\n");

      const replaced = await cli(["download", id, "--to", target, "--overwrite"], userA.key).done;
      expect(replaced.code, replaced.stderr).toBe(0);
      expect(
        (await readFile(target, "utf8"))
          .trimEnd()
          .split("\n")
          .map((l) => (JSON.parse(l) as { id: string }).id),
      ).toEqual(["w0", "w1", "w2"]);
      // Nothing half-written left beside it.
      expect((await readdir(local)).filter((name) => name.startsWith("."))).toEqual([]);
    } finally {
      release();
      gate = Promise.resolve();
    }
  });
});

describe("what clients see of failures", () => {
  it("queue_unavailable: no Redis address in the answer or the job record; the request id and job id point to the log", async () => {
    const logged = captureLogs();
    const add = Queue.prototype.add;
    const spy = vi.spyOn(Queue.prototype, "add").mockImplementation(function (
      this: Queue,
      ...args: Parameters<Queue["add"]>
    ) {
      if (this.name === COORDINATOR_QUEUE) return Promise.reject(new Error("connect ECONNREFUSED 10.9.8.7:6379"));
      return add.apply(this, args);
    });
    try {
      const fileId = await upload(userA.key, records(1, "q"));
      const res = await api<ErrorBody>(
        "POST",
        "/v1/batch-jobs",
        userA.key,
        { model: "tiny", version: "v1", input_file_id: fileId },
        { "x-request-id": "req_batch_queue_probe" },
      );
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe("queue_unavailable");
      expect(res.body.error.message).toContain("req_batch_queue_probe");
      expect(res.body.error.message).not.toMatch(/10\.9\.8\.7|ECONNREFUSED/);
      const list = await api<{ data: BatchJob[] }>("GET", "/v1/batch-jobs", userA.key);
      const failed = list.body.data.find((j) => j.error?.code === "queue_unavailable");
      expect(failed?.state).toBe("failed");
      expect(failed?.error?.message).toContain(failed?.id as string);
      expect(failed?.error?.message).not.toMatch(/10\.9\.8\.7|ECONNREFUSED/);
      const log = logOf(logged);
      expect(log).toMatch(/req_batch_queue_probe[^\n]*10\.9\.8\.7/);
      expect(log).toMatch(new RegExp(`${failed?.id}[^\\n]*10\\.9\\.8\\.7`));
    } finally {
      spy.mockRestore();
      logged.restore();
    }
  });

  it("an unexpected failure (a symbolic link loop): a fixed message with the job id, the detail in the log, and what was kept", async () => {
    const logged = captureLogs();
    const root = join(scratch, "root");
    await mkdir(join(root, "out"), { recursive: true });
    const loop = join(root, "loop.jsonl");
    await symlink(loop, loop);
    const queue = "batches-errors";
    const withRoots = await startBatchCoordinator(
      ctl,
      { ...settings, storageRoots: [{ scheme: "file", path: root }] },
      { queue },
    );
    const coordinate = queues.queueNamed(queue);
    try {
      const id = `batch_${randomBytes(12).toString("hex")}`;
      const input = pathToFileURL(loop).href;
      const output = `${pathToFileURL(join(root, "out")).href}/`;
      const spec: BatchSpec = {
        id,
        model: "tiny",
        version: "v1",
        input: "loop.jsonl",
        output: "out/",
        input_uri: input,
        output_uri: output,
        overwrite: false,
        scope: { key_id: admin.id, role: "admin", input: true, output: true },
        shown: [
          [input, "loop.jsonl"],
          [output, "out/"],
        ],
        concurrency: 2,
        batch_size: 2,
        sampling: {},
        created_by: admin.id,
        created: Date.now(),
      };
      await createRecord(ctl, spec);
      // An earlier run wrote two parts before whatever broke.
      await ctl.redis.set(
        ctl.keys.batchCheckpoint(id),
        JSON.stringify({ next_line: 154, next_byte: 9000, parts: 2, succeeded: 150, failed: 3, input_size: 10_000 }),
      );
      await coordinate.add(COORDINATOR_JOB, { batch_id: id }, { jobId: id, attempts: 1 });
      const failed = await waitFor("the job to fail", async () => {
        const job = await api<BatchJob>("GET", `/v1/batch-jobs/${id}`, admin.key);
        return job.body.state === "failed" ? job.body : undefined;
      });
      expect(failed.error?.code).toBe("coordinator_error");
      expect(failed.error?.message).toContain(id);
      expect(failed.error?.message).not.toContain(scratch);
      expect(failed.error?.message).not.toMatch(/ELOOP|symbolic|realpath/);
      expect(failed).toMatchObject({
        resumable: true,
        partial: { records: 153, parts_uri: `out/${id}.parts/` },
        counts: { succeeded: 150, failed: 3 },
      });
      expect(logOf(logged)).toMatch(
        new RegExp(`${id}[^\\n]*coordinator_error[^\\n]*ELOOP[^\\n]*${scratch.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
      );
    } finally {
      await withRoots.stop();
      logged.restore();
    }
  });

  it("a file that is not GGUF is refused without echoing its bytes", async () => {
    const refused = await importModel(
      { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
      {
        name: "notgguf",
        framework: "llamacpp",
        source: "weights.gguf",
        body: Readable.from([Buffer.from("QZXJ0123456789abcdef")]),
      },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(PlatformError);
    expect((refused as PlatformError).code).toBe("invalid_artifact");
    expect((refused as PlatformError).message).toBe(
      'weights.gguf: not a GGUF file (no GGUF magic), which framework "llamacpp" needs',
    );
  });
});

describe("stored data that does not parse", () => {
  it("a corrupt API key record can still be revoked", async () => {
    const id = "key_0badbadbad00";
    await ctl.redis.hset(ctl.keys.apiKeys, id, "{not json");
    await ctl.redis.hset(ctl.keys.apiKeyByHash, "f".repeat(64), id);
    const res = await api<{ revoked: { id: string } }>("DELETE", `/admin/v1/keys/${id}`, admin.key);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.revoked.id).toBe(id);
    expect(await ctl.redis.hexists(ctl.keys.apiKeys, id)).toBe(0);
    expect(await ctl.redis.hexists(ctl.keys.apiKeyByHash, "f".repeat(64))).toBe(0);
    // The other keys are untouched.
    expect((await api("GET", "/v1/batch-jobs", userA.key)).status).toBe(200);
  });

  it("a corrupt model version is invalid_record, without the parser's text", async () => {
    await ctl.redis.hset(ctl.keys.modelVersions("tiny"), "v7", "{broken");
    try {
      const res = await api<ErrorBody>("PUT", "/admin/v1/endpoints/tiny7", admin.key, {
        model: { name: "tiny", version: "v7" },
        resources: { replicas: 0 },
      });
      expect(res.status).toBe(500);
      expect(res.body.error.code).toBe("invalid_record");
      expect(res.body.error.message).toMatch(/model "tiny" version "v7" is invalid \(not valid JSON\)/);
      expect(res.body.error.message).not.toMatch(/Unexpected|position|JSON at/);
    } finally {
      await ctl.redis.hdel(ctl.keys.modelVersions("tiny"), "v7");
    }
  });

  it("an engine failure's text (server paths) stays in the log; the record's error line points there by job id", async () => {
    const logged = captureLogs();
    const batchId = "batch_engine_text";
    const jobs = await RecordJobs.open({ ctl, batchId, model: "tiny", version: "ve", writtenBefore: () => 1 });
    const queue = queues.queue("tiny", "ve");
    const work = { kind: "prompt" as const, prompt: "x" };
    const secret = "/srv/private/artifacts/models/tiny/v1/model.gguf";
    try {
      const failed = (reason: string) => ({ timestamp: Date.now(), finishedOn: Date.now(), failedReason: reason });
      // As a worker fails a job (a JobError as JSON), and as BullMQ does (plain text).
      // Engine failures are retried: every attempt's job (`-<line>`, `-<line>-r<n>`) failed the same way.
      for (const attempt of ["", "-r1", "-r2"]) {
        await ctl.redis.hset(
          queue.toKey(`${batchId}-1${attempt}`),
          failed(
            JSON.stringify({
              code: "engine_error",
              status: 500,
              param: null,
              message: `failed to load ${secret}: bad magic`,
            }),
          ),
        );
        await ctl.redis.hset(
          queue.toKey(`${batchId}-2${attempt}`),
          failed(`ENOENT: no such file or directory, open '${secret}'`),
        );
      }
      // A 4xx message is about the request and passes as it is.
      await ctl.redis.hset(
        queue.toKey(`${batchId}-3`),
        failed(
          JSON.stringify({
            code: "context_length_exceeded",
            status: 400,
            param: "prompt",
            message: "the prompt is 900 tokens; the window is 512",
          }),
        ),
      );
      // BullMQ's plain text reads as online requests read it (src/queue/failures.ts): job_failed.
      for (const [line, code] of [
        [1, "engine_error"],
        [2, "job_failed"],
      ] as const) {
        const answer = (await jobs.run(line, `r${line}`, work, { max_tokens: 3 })) as {
          ok: boolean;
          code: string;
          message: string;
        };
        expect(answer).toMatchObject({ ok: false, code });
        expect(answer.message).not.toContain(secret);
        expect(answer.message).toContain(`job id ${batchId}, the gateway log has the details`);
      }
      expect(await jobs.run(3, "r3", work, { max_tokens: 3 })).toMatchObject({
        ok: false,
        code: "context_length_exceeded",
        message: "the prompt is 900 tokens; the window is 512",
      });
      expect(logOf(logged)).toContain(secret);
    } finally {
      await jobs.close();
      await queue.obliterate({ force: true }).catch(() => undefined);
      logged.restore();
    }
  });

  it("a garbage kept answer or model job result fails that record with invalid_result instead of hanging the job", async () => {
    const logged = captureLogs();
    const batchId = "batch_garbage";
    // A version no worker serves: whatever is added just waits.
    const jobs = await RecordJobs.open({ ctl, batchId, model: "tiny", version: "vg", writtenBefore: () => 1 });
    const queue = queues.queue("tiny", "vg");
    const work = { kind: "prompt" as const, prompt: "x" };
    const within = <T>(p: Promise<T>) => Promise.race([p, sleep(8000).then(() => "hung" as const)]);
    try {
      await ctl.redis.hset(ctl.keys.batchResults(batchId), "3", "{garbage");
      expect(await within(jobs.run(3, "r3", work, { max_tokens: 3 }))).toMatchObject({
        ok: false,
        code: "invalid_result",
      });

      // A resumed run takes a finished record's answer from its job: the field the worker keeps it in
      // (its return value is a receipt, as BullMQ copies it into the event stream)...
      const usage = { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 };
      const receipt = JSON.stringify({ type: "text", finish_reason: "length", usage, replica: "r" });
      const result = { type: "text", text: " kept", finish_reason: "length", usage, replica: "r" };
      await ctl.redis.hset(queue.toKey(`${batchId}-6`), {
        timestamp: Date.now(),
        finishedOn: Date.now(),
        [ANSWER_FIELD]: JSON.stringify(result),
        returnvalue: receipt,
      });
      expect(await within(jobs.run(6, "r6", work, { max_tokens: 3 }))).toMatchObject({
        ok: true,
        text: " kept",
        tokens: 3,
      });
      // ... and garbage there, or in the return value of a worker that returned the whole result, fails the record.
      await ctl.redis.hset(queue.toKey(`${batchId}-7`), {
        timestamp: Date.now(),
        finishedOn: Date.now(),
        [ANSWER_FIELD]: "{garbage",
        returnvalue: receipt,
      });
      expect(await within(jobs.run(7, "r7", work, { max_tokens: 3 }))).toMatchObject({
        ok: false,
        code: "invalid_result",
      });
      await ctl.redis.hset(queue.toKey(`${batchId}-4`), {
        timestamp: Date.now(),
        finishedOn: Date.now(),
        returnvalue: "{garbage",
      });
      expect(await within(jobs.run(4, "r4", work, { max_tokens: 3 }))).toMatchObject({
        ok: false,
        code: "invalid_result",
      });

      // Sent, then its result turns to garbage: the once-a-second check must still settle it.
      const answer = within(jobs.run(5, "r5", work, { max_tokens: 3 }));
      await waitFor("record 5 to be queued", async () => ((await queue.getJob(`${batchId}-5`)) ? true : undefined));
      await ctl.redis.hset(queue.toKey(`${batchId}-5`), { finishedOn: Date.now(), returnvalue: "not json" });
      expect(await answer).toMatchObject({ ok: false, code: "invalid_result" });
      expect(logOf(logged)).toMatch(/batch_garbage.*line 5/);
    } finally {
      await jobs.close();
      await queue.obliterate({ force: true }).catch(() => undefined);
      logged.restore();
    }
  });
});
