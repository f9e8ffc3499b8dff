/**
 * Storage confinement attacked through `platform up`'s real gateway and
 * coordinator (issue 7, "Object storage and files"): every URI a client names
 * stays inside the storage roots and the key's own area, error lines never
 * copy input bytes, outputs are never silently replaced, and a failed job
 * keeps what it completed and resumes to the same result.
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchJobs, startBatchCoordinator } from "../../src/batch/index.ts";
import type { BatchJob } from "../../src/batch/record.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { StoragePolicy } from "../../src/storage/policy.ts";
import { type S3Server, startS3, waitForJob } from "../helpers/batch-env.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";
import { readUntil } from "../helpers/wait.ts";
import { api } from "../helpers/api.ts";

const MODEL = "tiny";
const BUCKET = "confined";
const SECRET = "root:x:0:0:SECRET-FIELD:/root:/bin/bash";

let stack: OwnStack;
let ctl: Control;
let s3: S3Server;
let scratch: string;
let root: string;
let outside: string;
let batchRoot: string;
const users: { a: { id: string; key: string }; b: { id: string; key: string } } = {} as never;
let jobs: BatchJobs;

type Answer = {
  status: number;
  body: Record<string, unknown> & { error?: { code: string; message: string; param: string | null } };
};

const call = (method: string, path: string, body?: unknown, key = stack.apiKey): Promise<Answer> =>
  api(stack.baseUrl, key)<Answer["body"]>(method, path, body);

async function job(id: string, key = stack.apiKey): Promise<BatchJob> {
  return (await call("GET", `/v1/batch-jobs/${id}`, undefined, key)).body as unknown as BatchJob;
}

async function until(id: string, done: (j: BatchJob) => boolean, key = stack.apiKey): Promise<BatchJob> {
  return readUntil(`job ${id} to get there`, () => job(id, key), done, 120_000);
}

const ended = (j: BatchJob) => ["completed", "failed", "cancelled"].includes(j.state);

function records(n: number, prefix = "r", maxTokens = 3): string {
  return `${Array.from({ length: n }, (_, i) => JSON.stringify({ id: `${prefix}${i}`, prompt: "Once upon a time", max_tokens: maxTokens })).join("\n")}\n`;
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "platform-confine-"));
  root = join(scratch, "root");
  outside = join(scratch, "outside");
  await mkdir(root, { recursive: true });
  await mkdir(outside, { recursive: true });
  s3 = await startS3(join(scratch, "s3"), BUCKET);
  stack = await startStack({
    model: await tinyModelPath(),
    args: [
      "--name",
      MODEL,
      "--replicas",
      "1",
      "--parallel",
      "2",
      "--storage-root",
      root,
      "--storage-root",
      `s3://${BUCKET}/allowed`,
    ],
    env: s3.env,
  });
  batchRoot = join(stack.dataDir, "batch");
  ctl = connectControl(stack.redisUrl, "platform");
  for (const name of ["a", "b"] as const) {
    const { key, record } = await createApiKey(ctl, `tenant-${name}`, "user");
    users[name] = { id: record.id, key };
  }
  jobs = new BatchJobs(ctl);
});

afterAll(async () => {
  await jobs?.close();
  await ctl?.redis.quit();
  await stack?.stop();
  await s3?.close();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe("every URI a user key names is confined", () => {
  it("refuses /etc/passwd as input with 403 storage_forbidden naming the key's areas, and creates no job", async () => {
    const { id, key } = users.a;
    const res = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "/etc/passwd", output: "/tmp/x/" }, key);
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ code: "storage_forbidden", param: "input" });
    expect(res.body.error?.message).toContain(`${root}/${id}/`);
    expect(res.body.error?.message).toContain(`s3://${BUCKET}/allowed/${id}/`);
    expect(res.body.error?.message).not.toContain("root:x");
    const mine = await call("GET", "/v1/batch-jobs", undefined, key);
    expect(mine.body.data).toEqual([]);
  });

  it("refuses an output outside the roots before writing anything", async () => {
    const { id, key } = users.a;
    await mkdir(join(root, id), { recursive: true });
    await writeFile(join(root, id, "in.jsonl"), records(2));
    const target = join(outside, "stolen");
    const res = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(root, id, "in.jsonl"), output: `${target}/` },
      key,
    );
    expect(res).toMatchObject({ status: 403, body: { error: { code: "storage_forbidden", param: "output" } } });
    // Refused before a job exists: nothing runs afterwards that could write it, so no wait is needed.
    expect(existsSync(target)).toBe(false);
    // An existing .jsonl outside is not replaced either (the old route replaced any file the server could write).
    await writeFile(join(outside, "victim.jsonl"), "precious\n");
    const replace = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(root, id, "in.jsonl"), output: join(outside, "victim.jsonl"), overwrite: true },
      key,
    );
    expect(replace.status).toBe(403);
    expect(await readFile(join(outside, "victim.jsonl"), "utf8")).toBe("precious\n");
  });

  it("refuses '..' escapes and symbolic links inside a root that point out of it", async () => {
    const { id, key } = users.a;
    const area = join(root, id);
    await writeFile(join(outside, "secret.jsonl"), `${SECRET}\n`);
    await symlink(join(outside, "secret.jsonl"), join(area, "link.jsonl"));
    await symlink(outside, join(area, "linkdir"));
    await symlink(join(outside, "nothing-yet.jsonl"), join(area, "dangling.jsonl"));
    const attempts: [string, string][] = [
      [`${area}/../../outside/secret.jsonl`, "out/"],
      ["../../outside/secret.jsonl", "out/"],
      [join(area, "link.jsonl"), "out/"],
      [join(area, "linkdir", "secret.jsonl"), "out/"],
      ["in.jsonl", `${join(area, "linkdir")}/`],
      ["in.jsonl", join(area, "dangling.jsonl")],
    ];
    for (const [input, output] of attempts) {
      const res = await call("POST", "/v1/batch-jobs", { model: MODEL, input, output }, key);
      expect(res.status, `${input} -> ${output}: ${JSON.stringify(res.body)}`).toBe(403);
      expect(res.body.error?.code).toBe("storage_forbidden");
    }
    expect(await readdir(outside)).not.toContain("out");
  });

  it("refuses buckets and prefixes that are not allowed (segment-wise, no prefix-other confusion)", async () => {
    const { id, key } = users.a;
    for (const uri of [
      `s3://other-bucket/in.jsonl`,
      `s3://${BUCKET}/in.jsonl`,
      `s3://${BUCKET}/allowed-other/${id}/in.jsonl`,
      `s3://${BUCKET}/allowed/${users.b.id}/in.jsonl`,
      `s3://${BUCKET}/allowed/${id}x/in.jsonl`,
    ]) {
      const res = await call("POST", "/v1/batch-jobs", { model: MODEL, input: uri, output: "out/" }, key);
      expect(res.status, uri).toBe(403);
      expect(res.body.error?.code).toBe("storage_forbidden");
    }
    // Its own prefix works, end to end through S3.
    const store = openStore(`s3://${BUCKET}/allowed/${id}`, s3.settings);
    await store.put("in.jsonl", records(2, "s"));
    store.close();
    const ok = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: `s3://${BUCKET}/allowed/${id}/in.jsonl`, output: `s3://${BUCKET}/allowed/${id}/out/` },
      key,
    );
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(await until(ok.body.id as string, ended, key)).toMatchObject({
      state: "completed",
      counts: { succeeded: 2 },
    });
  });

  it("one tenant cannot read another's input by absolute path", async () => {
    const b = users.b;
    await mkdir(join(root, b.id), { recursive: true });
    await writeFile(join(root, b.id, "in.jsonl"), records(1, "b-private"));
    const res = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(root, b.id, "in.jsonl"), output: "out/" },
      users.a.key,
    );
    expect(res).toMatchObject({ status: 403, body: { error: { code: "storage_forbidden" } } });
    // The owner can; an admin key reaches the whole root.
    expect(
      (
        await call(
          "POST",
          "/v1/batch-jobs",
          { model: MODEL, input: join(root, b.id, "in.jsonl"), output: "out/" },
          b.key,
        )
      ).status,
    ).toBe(201);
    expect(
      (
        await call("POST", "/v1/batch-jobs", {
          model: MODEL,
          input: join(root, b.id, "in.jsonl"),
          output: `${root}/admin-out/`,
        })
      ).status,
    ).toBe(201);
  });

  it("GET /v1/storage lists the key's areas", async () => {
    const { id, key } = users.a;
    const res = await call("GET", "/v1/storage", undefined, key);
    expect(res.body).toMatchObject({
      object: "storage",
      roots: [
        `file://${batchRoot}/${id}/`,
        `file://${process.cwd()}/${id}/`,
        `file://${root}/${id}/`,
        `s3://${BUCKET}/allowed/${id}/`,
      ],
      relative_to: `file://${batchRoot}/${id}/`,
    });
  });

  it("an uploaded file of another key cannot be used as input", async () => {
    const form = new FormData();
    form.set("purpose", "batch");
    form.set("file", new Blob([records(1)]), "a.jsonl");
    const up = await fetch(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${users.a.key}` },
      body: form,
    });
    const file = (await up.json()) as { id: string };
    const stolen = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input_file_id: file.id, output: "out/" },
      users.b.key,
    );
    expect(stolen).toMatchObject({ status: 404, body: { error: { code: "file_not_found" } } });
    const viaOpenAi = await call(
      "POST",
      "/v1/batches",
      { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" },
      users.b.key,
    );
    expect(viaOpenAi.status).toBe(404);
    const own = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input_file_id: file.id, output: "from-file/" },
      users.a.key,
    );
    expect(own.status, JSON.stringify(own.body)).toBe(201);
    expect(await until(own.body.id as string, ended, users.a.key)).toMatchObject({
      state: "completed",
      input: file.id,
    });
  });

  it("re-checks when the job runs: a symlink planted after creation fails the job with storage_forbidden", async () => {
    const { id } = users.a;
    const queue = `confine-${randomUUID().slice(0, 8)}`;
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: root }] });
    const idle = new BatchJobs(ctl, { queue, storage: policy });
    const input = join(root, id, "later.jsonl");
    await writeFile(input, records(1));
    const created = await idle
      .create({ model: MODEL, input: "later.jsonl", output: "later-out/" }, { id, role: "user", org: "default" })
      .catch((e: unknown) => e);
    // Relative names resolve under the first file root's area: here <root>/<key id>/.
    expect(created).toMatchObject({ input: "later.jsonl", state: "queued" });
    await rm(input);
    await symlink(join(outside, "secret.jsonl"), input);
    const coordinator = await startBatchCoordinator(
      ctl,
      { ...loadSettings(), storageRoots: [{ scheme: "file", path: root }] },
      { queue },
    );
    try {
      const failed = await waitForJob(idle, (created as BatchJob).id);
      expect(failed).toMatchObject({ state: "failed", error: { code: "storage_forbidden" } });
      expect(failed.error?.message).not.toContain(outside);
    } finally {
      await coordinator.stop();
      await idle.close();
    }
  });
});

describe("results are the owner's only", () => {
  it("another tenant cannot download a job's output, its batch or its uploaded file (404, as if absent)", async () => {
    const a = users.a;
    await mkdir(join(root, a.id), { recursive: true });
    await writeFile(join(root, a.id, "mine.jsonl"), records(2, "a-private"));
    const created = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(root, a.id, "mine.jsonl"), output: "mine-out/" },
      a.key,
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.id as string;
    expect(await until(id, ended, a.key)).toMatchObject({ state: "completed" });
    const get = (path: string, key: string) =>
      fetch(`${stack.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } });
    expect((await get(`/v1/batch-jobs/${id}/output`, a.key)).status).toBe(200);
    for (const path of [`/v1/batch-jobs/${id}/output`, `/v1/batch-jobs/${id}`]) {
      const res = await get(path, users.b.key);
      expect(res.status, path).toBe(404);
      expect(await res.text()).not.toContain("a-private");
    }
    const form = new FormData();
    form.set("purpose", "batch");
    form.set("file", new Blob([records(1, "a-upload")]), "a.jsonl");
    const file = (await (
      await fetch(`${stack.baseUrl}/v1/files`, {
        method: "POST",
        headers: { authorization: `Bearer ${a.key}` },
        body: form,
      })
    ).json()) as { id: string };
    for (const path of [`/v1/files/${file.id}`, `/v1/files/${file.id}/content`]) {
      const res = await get(path, users.b.key);
      expect(res.status, path).toBe(404);
      expect(await res.text()).not.toContain("a-upload");
    }
  });

  it("downloading an output judges its location again: a directory on the way swapped for a link to another tenant's area is refused", async () => {
    const { a, b } = users;
    await mkdir(join(root, a.id), { recursive: true });
    await writeFile(join(root, a.id, "swap.jsonl"), records(2, "a-own"));
    const created = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(root, a.id, "swap.jsonl"), output: `${root}/${a.id}/swap-out/` },
      a.key,
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.id as string;
    expect(await until(id, ended, a.key)).toMatchObject({ state: "completed" });
    // Tenant B has a result of the same name; tenant A points its own directory at B's.
    await mkdir(join(root, b.id, "swap-out"), { recursive: true });
    await writeFile(join(root, b.id, "swap-out", `${id}.jsonl`), '{"id":"b-secret"}\n');
    await rename(join(root, a.id, "swap-out"), join(root, a.id, "swap-out.moved"));
    await symlink(join(root, b.id, "swap-out"), join(root, a.id, "swap-out"));
    const res = await fetch(`${stack.baseUrl}/v1/batch-jobs/${id}/output`, {
      headers: { authorization: `Bearer ${a.key}` },
    });
    const text = await res.text();
    expect(res.status, text).toBe(403);
    expect(JSON.parse(text)).toMatchObject({ error: { code: "storage_forbidden" } });
    expect(text).not.toContain("b-secret");
  });
});

describe("links planted or swapped while a job runs", () => {
  it("a link planted at the job's parts directory fails the job with storage_forbidden; nothing outside is written or deleted", async () => {
    const { id } = users.a;
    const queue = `parts-${randomUUID().slice(0, 8)}`;
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: root }] });
    const idle = new BatchJobs(ctl, { queue, storage: policy });
    const area = join(root, id, "planted");
    await mkdir(join(area, "res"), { recursive: true });
    await writeFile(join(area, "in.jsonl"), records(3));
    const victim = join(outside, "victim-parts");
    await mkdir(victim, { recursive: true });
    await writeFile(join(victim, "part-000000.jsonl"), "precious\n");
    const created = (await idle.create(
      { model: MODEL, input: "planted/in.jsonl", output: "planted/res/" },
      { id, role: "user", org: "default" },
    )) as BatchJob;
    // The job id is known before any coordinator sees the job: the link is in place first.
    await symlink(victim, join(area, "res", `${created.id}.parts`));
    const coordinator = await startBatchCoordinator(
      ctl,
      { ...loadSettings(), storageRoots: [{ scheme: "file", path: root }] },
      { queue },
    );
    try {
      const failed = await waitForJob(idle, created.id);
      expect(failed).toMatchObject({ state: "failed", error: { code: "storage_forbidden" } });
      expect(failed.error?.message).not.toContain(outside);
    } finally {
      await coordinator.stop();
      await idle.close();
    }
    expect(await readdir(victim)).toEqual(["part-000000.jsonl"]);
    expect(await readFile(join(victim, "part-000000.jsonl"), "utf8")).toBe("precious\n");
    expect(existsSync(join(area, "res", `${created.id}.jsonl`))).toBe(false);
  });

  it("a parts directory swapped for a link mid-run: the job fails with storage_forbidden, keeps its parts, and writes and deletes nothing outside", async () => {
    const { id, key } = users.a;
    const area = join(root, id, "swapped");
    await mkdir(area, { recursive: true });
    // Long answers: the job is still running when the link goes in; it stops at its next part.
    await writeFile(join(area, "in.jsonl"), records(200, "r", 64));
    const victim = join(outside, "victim-swap");
    await mkdir(victim, { recursive: true });
    await writeFile(join(victim, "part-000001.jsonl"), "precious\n");
    const res = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input: join(area, "in.jsonl"), output: `${area}/res/`, batch_size: 4, concurrency: 2 },
      key,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const jobId = res.body.id as string;
    const parts = join(area, "res", `${jobId}.parts`);
    // A written part, not only answered records (their count includes ones not yet in a part).
    await expect
      .poll(async () => (await readdir(parts).catch(() => [])).filter((f) => f.startsWith("part-")).length, {
        timeout: 60_000,
        interval: 20,
      })
      .toBeGreaterThanOrEqual(1);
    await rename(parts, `${parts}.aside`);
    await symlink(victim, parts);
    const failed = await until(jobId, ended, key);
    expect(failed).toMatchObject({ state: "failed", resumable: true });
    // output_not_writable ("moved") only when the job looked between the rename and the symlink above.
    expect(failed.error?.code).toMatch(/^(storage_forbidden|output_not_writable)$/);
    expect(failed.error?.message).not.toContain(outside);
    expect(failed.counts.succeeded).toBeLessThan(200);
    expect(await readdir(victim)).toEqual(["part-000001.jsonl"]);
    expect(await readFile(join(victim, "part-000001.jsonl"), "utf8")).toBe("precious\n");
    // What it completed is kept where the job wrote it, never replaced by what the link leads to.
    const kept = (await readdir(`${parts}.aside`)).filter((f) => f.startsWith("part-"));
    expect(kept.length).toBeGreaterThanOrEqual(1);
    const output = await fetch(`${stack.baseUrl}/v1/batch-jobs/${jobId}/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(await output.text()).not.toContain("precious");
  });

  it("an input swapped for a link to another tenant's file mid-run fails the job with input_changed; the other file is never read", async () => {
    const { id, key } = users.a;
    const area = join(root, id, "swapin");
    await mkdir(area, { recursive: true });
    const input = join(area, "in.jsonl");
    await writeFile(input, records(200, "mine", 64));
    const theirs = join(root, users.b.id, "theirs.jsonl");
    await mkdir(join(root, users.b.id), { recursive: true });
    await writeFile(theirs, records(200, "stolen", 2));
    const res = await call(
      "POST",
      "/v1/batch-jobs",
      { model: MODEL, input, output: `${area}/res/`, batch_size: 4, concurrency: 2 },
      key,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const jobId = res.body.id as string;
    // Counted: the job has checked the input and read it once; the swap comes now.
    await until(jobId, (j) => j.counts.total > 0, key);
    await rm(input);
    await symlink(theirs, input);
    const failed = await until(jobId, ended, key);
    expect(failed).toMatchObject({
      state: "failed",
      error: { code: "input_changed" },
      resumable: false,
      counts: { total: 200 },
    });
    expect(failed.counts.succeeded).toBeLessThan(200);
    const output = await fetch(`${stack.baseUrl}/v1/batch-jobs/${jobId}/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const body = output.status === 200 ? await output.text() : "";
    expect(body).not.toContain("stolen");
    for (const name of await readdir(join(area, "res"), { recursive: true })) {
      const path = join(area, "res", name);
      if (name.endsWith(".jsonl")) expect(await readFile(path, "utf8"), name).not.toContain("stolen");
    }
  });
});

describe("what comes back never holds input bytes or server paths", () => {
  it("an unparseable line's error is exactly `line N: not valid JSON (byte offset K)`", async () => {
    const { id, key } = users.a;
    const lines = [
      JSON.stringify({ id: "ok", prompt: "Once upon a time", max_tokens: 2 }),
      SECRET,
      "",
      `{"id": "x", "prompt": "${SECRET}`,
    ];
    const text = `${lines.join("\n")}\n`;
    await mkdir(join(batchRoot, id), { recursive: true });
    await writeFile(join(batchRoot, id, "mixed.jsonl"), text);
    const res = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "mixed.jsonl", output: "results/" }, key);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const done = await until(res.body.id as string, ended, key);
    expect(done).toMatchObject({
      state: "completed",
      input: "mixed.jsonl",
      output: "results/",
      output_file: `results/${done.id}.jsonl`,
    });
    expect(JSON.stringify(done)).not.toContain(stack.dataDir);
    const out = await fetch(`${stack.baseUrl}/v1/batch-jobs/${done.id}/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const body = await out.text();
    expect(body).not.toContain("SECRET");
    const parsed = body
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { id: string; error?: { code: string; message: string } });
    const offset2 = Buffer.byteLength(`${lines[0]}\n`);
    const offset4 = Buffer.byteLength(`${lines[0]}\n${lines[1]}\n\n`);
    expect(parsed.slice(1)).toEqual([
      {
        id: "line-2",
        status: "error",
        error: { code: "invalid_json", message: `line 2: not valid JSON (byte offset ${offset2})` },
      },
      {
        id: "line-4",
        status: "error",
        error: { code: "invalid_json", message: `line 4: not valid JSON (byte offset ${offset4})` },
      },
    ]);
    // The result is where the relative name said: the key's own area of the first root.
    expect(existsSync(join(batchRoot, id, "results", `${done.id}.jsonl`))).toBe(true);
  });

  it("a missing relative input fails naming it as given, not the server path", async () => {
    const res = await call("POST", "/v1/batch-jobs", { model: MODEL, input: "nope.jsonl", output: "o/" }, users.a.key);
    const failed = await until(res.body.id as string, ended, users.a.key);
    expect(failed).toMatchObject({ state: "failed", error: { code: "input_not_found" } });
    expect(failed.error?.message).toContain("nope.jsonl");
    expect(JSON.stringify(failed)).not.toContain(stack.dataDir);
  });
});

describe("outputs are never silently replaced", () => {
  it("refuses an existing output (409), replaces it with overwrite, and refuses output == input (400)", async () => {
    const dir = join(root, "ow");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "in.jsonl"), records(2));
    await writeFile(join(dir, "result.jsonl"), "old\n");
    const refused = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: join(dir, "result.jsonl"),
    });
    expect(refused).toMatchObject({ status: 409, body: { error: { code: "output_exists", param: "output" } } });
    expect(await readFile(join(dir, "result.jsonl"), "utf8")).toBe("old\n");
    const replaced = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: join(dir, "result.jsonl"),
      overwrite: true,
    });
    expect(replaced.status).toBe(201);
    expect(await until(replaced.body.id as string, ended)).toMatchObject({ state: "completed", overwrite: true });
    expect((await readFile(join(dir, "result.jsonl"), "utf8")).trimEnd().split("\n")).toHaveLength(2);
    const same = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: `file://${dir}/in.jsonl`,
      overwrite: true,
    });
    expect(same).toMatchObject({ status: 400, body: { error: { code: "output_is_input" } } });
  });

  it("the coordinator refuses to replace an output that appeared after creation", async () => {
    const dir = join(root, "late");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "in.jsonl"), records(40));
    const res = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: join(dir, "result.jsonl"),
      batch_size: 5,
      concurrency: 2,
    });
    expect(res.status).toBe(201);
    await writeFile(join(dir, "result.jsonl"), "appeared meanwhile\n");
    const failed = await until(res.body.id as string, ended);
    expect(failed).toMatchObject({
      state: "failed",
      error: { code: "output_exists" },
      resumable: false,
      partial: { records: 40 },
    });
    expect(await readFile(join(dir, "result.jsonl"), "utf8")).toBe("appeared meanwhile\n");
    const resume = await call("POST", `/v1/batch-jobs/${failed.id}/resume`);
    expect(resume).toMatchObject({ status: 409, body: { error: { code: "not_resumable" } } });
  });
});

describe("a failed job keeps its completed parts and resumes", () => {
  it("fails on an unwritable output, shows what it kept, and resumes to the same result as an uninterrupted run", async () => {
    const dir = join(root, "resume");
    await mkdir(dir, { recursive: true });
    // Long enough answers that the job is still running when its parts directory is swapped out.
    await writeFile(join(dir, "in.jsonl"), records(200, "r", 64));
    const reference = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: join(dir, "reference.jsonl"),
      batch_size: 5,
      concurrency: 2,
      temperature: 0,
    });
    const res = await call("POST", "/v1/batch-jobs", {
      model: MODEL,
      input: join(dir, "in.jsonl"),
      output: join(dir, "result.jsonl"),
      batch_size: 5,
      concurrency: 2,
      temperature: 0,
    });
    const id = res.body.id as string;
    await until(id, (j) => j.counts.succeeded >= 20);
    // The parts directory turns into a file: the next part cannot be written (root ignores chmod).
    const parts = join(dir, `${id}.parts`);
    await rename(parts, `${parts}.aside`);
    await writeFile(parts, "in the way");
    const failed = await until(id, ended);
    expect(failed).toMatchObject({ state: "failed", error: { code: "output_not_writable" }, resumable: true });
    expect(failed.partial?.records).toBeGreaterThanOrEqual(20);
    expect(failed.partial?.parts_uri).toBe(`file://${dir}/${id}.parts/`);

    const status = await runCli(["inference", "batch", "status", id], stack.env);
    expect(status.stdout).toContain(`${failed.partial?.records} records completed and kept`);
    expect(status.stdout).toContain(`platform inference batch resume ${id}`);
    expect(status.stdout).toContain(`platform inference batch download ${id}`);

    // The fix, then resume: it continues from its checkpoint.
    await rm(parts);
    await rename(`${parts}.aside`, parts);
    const kept = await fetch(`${stack.baseUrl}/v1/batch-jobs/${id}/output`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
    });
    expect((await kept.text()).trimEnd().split("\n")).toHaveLength(failed.partial?.records as number);
    const resumed = await runCli(["inference", "batch", "resume", id, "--watch"], stack.env);
    expect(resumed.code, resumed.stderr).toBe(0);
    const done = await until(id, ended);
    expect(done).toMatchObject({
      state: "completed",
      counts: { total: 200, succeeded: 200, failed: 0 },
      partial: null,
    });
    await until(reference.body.id as string, ended);
    expect(await readFile(join(dir, "result.jsonl"), "utf8")).toBe(
      await readFile(join(dir, "reference.jsonl"), "utf8"),
    );
  });
});

describe("the CLI where it does not share the gateway's files", () => {
  it("uploads the local input and downloads the result (PLATFORM_CLI_UPLOAD=always)", async () => {
    const local = join(scratch, "laptop");
    await mkdir(local, { recursive: true });
    await writeFile(join(local, "prompts.jsonl"), records(6, "cli"));
    const env = { ...stack.env, PLATFORM_API_KEY: users.b.key, PLATFORM_CLI_UPLOAD: "always" };
    const run = await runCli(
      [
        "inference",
        "batch",
        "--model",
        MODEL,
        "--input",
        join(local, "prompts.jsonl"),
        "--output",
        join(local, "got.jsonl"),
        "--watch",
        "--batch-size",
        "2",
      ],
      env,
    );
    expect(run.code, run.stderr).toBe(0);
    const got = (await readFile(join(local, "got.jsonl"), "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => (JSON.parse(l) as { id: string }).id);
    expect(got).toEqual(Array.from({ length: 6 }, (_, i) => `cli${i}`));
    const id = run.stdout.split("\n")[0] as string;
    expect(await job(id, users.b.key)).toMatchObject({
      input: expect.stringMatching(/^file-/),
      output: "batch-outputs/",
    });
    // Refused before any work when the local result exists.
    const again = await runCli(
      [
        "inference",
        "batch",
        "--model",
        MODEL,
        "--input",
        join(local, "prompts.jsonl"),
        "--output",
        join(local, "got.jsonl"),
      ],
      env,
    );
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/--overwrite/);
  });
});

describe("model registration from server-local paths", () => {
  it("needs the source inside the admin's roots", async () => {
    await copyFile(await tinyModelPath(), join(outside, "m.gguf"));
    const refused = await call("POST", "/admin/v1/models", { name: "outsider", source: join(outside, "m.gguf") });
    expect(refused).toMatchObject({ status: 403, body: { error: { code: "storage_forbidden", param: "source" } } });
    const passwd = await call("POST", "/admin/v1/models", { name: "passwd", source: "file:///etc/passwd" });
    expect(passwd.status).toBe(403);
    await copyFile(await tinyModelPath(), join(root, "m.gguf"));
    const ok = await call("POST", "/admin/v1/models", { name: "insider", source: join(root, "m.gguf") });
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(fileURLToPath(`file://${root}/m.gguf`)).toBe(join(root, "m.gguf"));
  });
});
