/**
 * Image generation through the platform's own paths, end to end (docs/images.md): the shared
 * stack serving a tiny random diffusers pipeline (scripts/reference/make-tiny-diffusers.py; the
 * stack's PLATFORM_IMAGES_PYTHON is the reference venv, test/e2e-stack.ts), then a 20-record
 * image batch submitted with `platform inference batch` that survives a SIGKILL of its worker
 * mid-job (each record answered once, one PNG each, equal to the online answer for the same seed),
 * usage in images and steps (`platform usage`), a per-key request limit, organizations, and the
 * dashboard's playground in headless chromium, an A/B test between two image versions, and scaling
 * from zero on queue depth. Skips, saying so, without torch and diffusers (the
 * playground without /usr/bin/chromium).
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { diffusersPython, makeTinyPipeline } from "../helpers/models.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type CliResult, runCli, type Stack } from "../helpers/stack.ts";

const python = diffusersPython("images-platform.test");
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const usable = python !== undefined;

const CHROMIUM = "/usr/bin/chromium";
const haveChromium = existsSync(CHROMIUM);
if (usable && !haveChromium) console.warn(`images-platform.test: the playground test skips: ${CHROMIUM} not found`);
const LONG = 600_000;
const RECORDS = 20;
const record = (i: number) => ({
  id: `img-${i}`,
  prompt: `a small ${["red", "green", "blue", "yellow"][i % 4]} house number ${i}`,
  size: "64x64",
  num_inference_steps: 3,
  guidance_scale: 7.5,
  seed: 1000 + i,
});

let stack: Stack;
let scratch: string;
/** This file's endpoint, model and names on the shared stack. */
const PIC = unique("pic");
/** The first test's 20-record batch: what the organizations test tries to reach. */
let batchId: string;

type Status = { state: string; replica_list: { pid: number; id: string }[]; queue: { active: number } };
type Job = {
  id: string;
  state: string;
  counts: { succeeded: number; failed: number; total: number };
  output_file: string | null;
};

function cliJson<T>(r: CliResult): T {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
}

const generate = (body: unknown, key = stack.apiKey) =>
  fetch(`${stack.baseUrl}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: PIC, ...(body as object) }),
  });

beforeAll(async () => {
  if (!usable) return;
  scratch = await mkdtemp(join(tmpdir(), "images-platform-"));
  const pipeline = join(scratch, "tiny-sd");
  makeTinyPipeline(python as string, pipeline);
  stack = await sharedStack();
  // Under the OS temp dir, a storage root of the stack: the A/B test registers the pipeline again from there.
  await deploy(stack, PIC, { source: pipeline, framework: "diffusers" });
}, LONG);

afterAll(async () => {
  await undeploy(stack, PIC);
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe.skipIf(!usable)("image generation on the platform", () => {
  it(
    "a 20-record image batch survives a SIGKILLed worker: each record once, one PNG each, equal to the online images",
    async () => {
      const dir = join(stack.dataDir, "batch", PIC);
      await mkdir(dir, { recursive: true });
      const input = join(dir, "prompts.jsonl");
      await writeFile(input, `${Array.from({ length: RECORDS }, (_, i) => JSON.stringify(record(i))).join("\n")}\n`);
      const out = join(dir, "out");
      const submitted = await runCli(
        ["inference", "batch", "--model", PIC, "--input", input, "--output", `${out}/`, "--concurrency", "4"],
        stack.env,
      );
      expect(submitted.code, submitted.stderr).toBe(0);
      const id = submitted.stdout.trim();
      batchId = id;
      const job = async () => (await stack.admin<Job>("GET", `/v1/batch-jobs/${id}`)).body;

      // Mid-job, with a record on the replica: kill it. The supervisor replaces it; the record is served again.
      await stack.waitFor(
        async () => {
          const [j, s] = [await job(), (await stack.admin<Status>("GET", `/admin/v1/endpoints/${PIC}`)).body];
          return j.counts.succeeded >= 2 && s.queue.active >= 1;
        },
        "the batch to be under way",
        LONG,
      );
      const before = (await stack.admin<Status>("GET", `/admin/v1/endpoints/${PIC}`)).body;
      const victim = before.replica_list[0] as { pid: number; id: string };
      process.kill(victim.pid, "SIGKILL");
      expect((await job()).state).toBe("running");

      await stack.waitFor(
        async () => ["completed", "failed", "cancelled"].includes((await job()).state),
        "the batch",
        LONG,
      );
      const done = await job();
      expect(done).toMatchObject({ state: "completed", counts: { total: RECORDS, succeeded: RECORDS, failed: 0 } });
      expect(stack.output()).toContain(`replica ${victim.id} exited (SIGKILL); replacing it`);

      const lines = (await readFile(fileURLToPath(done.output_file as string), "utf8"))
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as { id: string; status: string; image: string; seed: number; steps: number });
      expect(lines.map((l) => l.id)).toEqual(Array.from({ length: RECORDS }, (_, i) => `img-${i}`));
      for (const [i, l] of lines.entries())
        expect(l).toMatchObject({
          status: "success",
          image: `${id}/img-${i}.png`,
          seed: 1000 + i,
          steps: 3,
        });
      // One PNG per record, in the folder named as the result, and nothing else; none left behind in the artifact store.
      expect((await readdir(out)).sort()).toEqual([id, `${id}.jsonl`].sort());
      expect((await readdir(join(out, id))).sort()).toEqual(
        Array.from({ length: RECORDS }, (_, i) => `img-${i}.png`).sort(),
      );
      const left = await readdir(join(stack.dataDir, "artifacts", "images"), { recursive: true }).catch(() => []);
      expect(left.filter((f) => String(f).endsWith(".png"))).toEqual([]);

      // The same requests online give the same PNGs, byte for byte.
      for (let i = 0; i < RECORDS; i++) {
        const { size, num_inference_steps, guidance_scale, seed, prompt } = record(i);
        const res = await generate({ prompt, size, num_inference_steps, guidance_scale, seed });
        expect(res.status).toBe(200);
        const body = (await res.json()) as { data: { b64_json: string; seed: number }[] };
        const online = Buffer.from(body.data[0]?.b64_json as string, "base64");
        expect(online.equals(await readFile(join(out, id, `img-${i}.png`))), `record img-${i}`).toBe(true);
      }

      // A result the server keeps (the input uploaded, as for a gateway on another machine): the
      // download brings the PNGs with it, beside the result as its lines name them.
      const kept = join(dir, "kept");
      const keptInput = join(dir, "two.jsonl");
      await writeFile(keptInput, `${[0, 1].map((i) => JSON.stringify(record(i))).join("\n")}\n`);
      const watched = await runCli(
        [
          "inference",
          "batch",
          "--model",
          PIC,
          "--input",
          keptInput,
          "--output",
          `${kept}/`,
          "--upload",
          "always",
          "--watch",
        ],
        stack.env,
      );
      expect(watched.code, watched.stderr).toBe(0);
      const keptId = watched.stdout.split("\n")[0]?.trim() as string;
      expect(watched.stdout).toContain(`images: 2 PNGs in ${join(kept, keptId)}/`);
      for (const i of [0, 1])
        expect(
          (await readFile(join(kept, keptId, `img-${i}.png`))).equals(await readFile(join(out, id, `img-${i}.png`))),
        ).toBe(true);
      const again = join(dir, "again");
      const downloaded = await runCli(["inference", "batch", "download", keptId, "--to", `${again}/`], stack.env);
      expect(downloaded.code, downloaded.stderr).toBe(0);
      expect((await readdir(again)).sort()).toEqual([keptId, `${keptId}.jsonl`].sort());
      expect((await readdir(join(again, keptId))).sort()).toEqual(["img-0.png", "img-1.png"]);
      // Only names of the job's own PNGs are served.
      for (const name of [`${keptId}/img-7.png`, `${keptId}/..%2F${keptId}.jsonl`, `other/img-0.png`]) {
        const res = await fetch(`${stack.baseUrl}/v1/batch-jobs/${keptId}/output/${name}`, {
          headers: { authorization: `Bearer ${stack.apiKey}` },
        });
        expect(res.status, name).toBe(404);
      }
    },
    LONG,
  );

  it("usage counts images and steps per key, model and version", async () => {
    const res = await generate({ prompt: "a cat", size: "64x64", num_inference_steps: 2, n: 2, seed: 5 });
    expect(res.status).toBe(200);
    await stack.waitFor(async () => {
      const u = (await stack.admin<{ data: { model: string; images: number }[] }>("GET", "/v1/usage?by=model&since=1h"))
        .body;
      return (u.data.find((row) => row.model === PIC)?.images ?? 0) >= 2 * RECORDS + 4;
    }, "usage to be written");
    const usage = cliJson<{
      data: { model: string; version: string; images: number; steps: number; requests: number }[];
    }>(await runCli(["usage", "--by", "model,version", "--json"], stack.env));
    // The batch's 20 records (and the replayed record's retry is not counted twice), 20 online, the
    // kept batch's 2 records, one request of 2.
    // Other files' models share the stack's usage: this file's own rows.
    expect(usage.data.filter((row) => row.model === PIC)).toEqual([
      expect.objectContaining({
        model: PIC,
        version: "v1",
        requests: 2 * RECORDS + 3,
        images: 2 * RECORDS + 4,
        steps: 2 * RECORDS * 3 + 2 * 3 + 4,
      }),
    ]);
    const table = await runCli(["usage", "--by", "model"], stack.env);
    expect(table.stdout).toMatch(/IMAGES\s*│\s*STEPS/);
  });

  it("an image is a request to a key's rate limit; another organization reaches neither its image URLs nor its image batches", async () => {
    const limited = cliJson<{ key: string }>(
      await runCli(["keys", "create", unique("three-a-minute"), "--rpm", "3", "--json"], stack.env),
    );
    const two = await generate({ prompt: "one", size: "64x64", num_inference_steps: 1, n: 2 }, limited.key);
    expect(two.status).toBe(200);
    expect(two.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    const refused = await generate({ prompt: "two", size: "64x64", num_inference_steps: 1, n: 2 }, limited.key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBeTruthy();
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(
      "limit 3, used 2, requested 2",
    );
    const one = await generate({ prompt: "three", size: "64x64", num_inference_steps: 1 }, limited.key);
    expect(one.status).toBe(200);
    const tooMany = cliJson<{ key: string }>(
      await runCli(["keys", "create", unique("three-more"), "--rpm", "3", "--json"], stack.env),
    );
    const never = await generate({ prompt: "four", size: "64x64", num_inference_steps: 1, n: 4 }, tooMany.key);
    expect(never.status).toBe(429);
    expect(((await never.json()) as { error: { param: string; message: string } }).error).toMatchObject({
      param: "n",
      message: expect.stringContaining("asks for 4 images, each counted as a request"),
    });

    // Models and endpoints are the install's (docs/security.md); what a key made with them is its organization's.
    const made = await generate({ prompt: "mine", size: "64x64", num_inference_steps: 1, response_format: "url" });
    const url = ((await made.json()) as { data: { url: string }[] }).data[0]?.url as string;
    const own = await fetch(url, { headers: { authorization: `Bearer ${stack.apiKey}` } });
    expect([own.status, own.headers.get("content-type")]).toEqual([200, "image/png"]);
    const elsewhere = unique("elsewhere");
    cliJson(await runCli(["orgs", "create", elsewhere, "--json"], stack.env));
    const outsider = cliJson<{ key: string }>(
      await runCli(["keys", "create", unique("outsider"), "--org", elsewhere, "--role", "admin", "--json"], stack.env),
    );
    const theirs = await fetch(url, { headers: { authorization: `Bearer ${outsider.key}` } });
    expect(theirs.status).toBe(404);
    const jobs = (await stack.admin<{ data: { id: string }[] }>("GET", "/v1/batch-jobs")).body.data;
    expect(jobs.map((j) => j.id)).toContain(batchId);
    const peek = await fetch(`${stack.baseUrl}/v1/batch-jobs/${batchId}`, {
      headers: { authorization: `Bearer ${outsider.key}` },
    });
    expect(peek.status).toBe(404);
    const pngUrl = `${stack.baseUrl}/v1/batch-jobs/${batchId}/output/${batchId}/img-0.png`;
    const mine = await fetch(pngUrl, { headers: { authorization: `Bearer ${stack.apiKey}` } });
    expect([mine.status, mine.headers.get("content-type")]).toEqual([200, "image/png"]);
    const notMine = await fetch(pngUrl, { headers: { authorization: `Bearer ${outsider.key}` } });
    expect(notMine.status).toBe(404);
  });
});

describe.skipIf(!usable || !haveChromium)("the dashboard's image playground", () => {
  it(
    "generates from the endpoint's card and shows the PNG in the page, as the API makes it",
    async () => {
      // The bundle is a build output (npm ci's prepare builds it); build it here if this checkout lacks it.
      if (!existsSync(`${ROOT}dist/dashboard/app.js`))
        spawnSync(process.execPath, [`${ROOT}scripts/build-dashboard.mjs`], { stdio: "inherit" });
      const browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ["--no-sandbox", "--disable-dev-shm-usage"],
      });
      try {
        const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
        await page.goto(`${stack.baseUrl}/dashboard`);
        await page.locator("input[name=key]").fill(stack.apiKey);
        await page.getByRole("button", { name: "Sign in" }).click();
        const card = page.getByTestId(`endpoint-${PIC}`);
        await card.waitFor();
        const form = card.getByTestId("playground-form");
        await form.locator("input[name=prompt]").fill("a lighthouse at dusk");
        await form.locator("input[name=size]").fill("64x64");
        await form.locator("input[name=steps]").fill("2");
        await form.locator("input[name=seed]").fill("77");
        await form.getByRole("button", { name: "Generate" }).click();
        const img = card.getByTestId("playground-image");
        await img.waitFor({ timeout: 120_000 });
        await expect.poll(() => img.evaluate((e) => (e as unknown as { naturalWidth: number }).naturalWidth)).toBe(64);
        expect(await img.evaluate((e) => (e as unknown as { naturalHeight: number }).naturalHeight)).toBe(64);
        const src = (await img.getAttribute("src")) as string;
        expect(src).toMatch(/^data:image\/png;base64,/);
        expect(await card.getByTestId("playground").textContent()).toMatch(/seed 77, 2 steps/);
        const res = await generate({ prompt: "a lighthouse at dusk", size: "64x64", num_inference_steps: 2, seed: 77 });
        const body = (await res.json()) as { data: { b64_json: string }[] };
        expect(src.slice("data:image/png;base64,".length)).toBe(body.data[0]?.b64_json);
        await mkdir(`${ROOT}test/artifacts`, { recursive: true });
        await card.screenshot({ path: `${ROOT}test/artifacts/dashboard-images.png` });
      } finally {
        await browser.close();
      }
    },
    LONG,
  );
});

describe.skipIf(!usable)("image versions on the fleet", () => {
  type AbStatus = { abtest: { state: string } | null };
  type Scaling = { decisions: { action: string; reason: string }[] };

  it(
    "an A/B test splits image requests between two versions",
    async () => {
      // v2: the same pipeline registered again (the same weights: what is checked is the traffic split).
      const reg = await stack.admin("POST", "/admin/v1/models", {
        name: PIC,
        framework: "diffusers",
        source: join(scratch, "tiny-sd"),
        version: "v2",
      });
      expect(reg.status, JSON.stringify(reg.body)).toBe(201);
      const started = await stack.admin("PUT", `/admin/v1/endpoints/${PIC}/abtest`, { split: "v1=50,v2=50" });
      expect(started.status, JSON.stringify(started.body)).toBe(201);
      await stack.waitFor(
        async () =>
          (await stack.admin<AbStatus>("GET", `/admin/v1/endpoints/${PIC}/abtest`)).body.abtest?.state === "running",
        "the A/B test to run",
        LONG,
      );
      const seen = new Map<string, number>();
      for (let i = 0; i < 12; i++) {
        const res = await generate({ prompt: `split ${i}`, size: "64x64", num_inference_steps: 1, seed: i });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
        const version = res.headers.get("x-model-version") as string;
        seen.set(version, (seen.get(version) ?? 0) + 1);
      }
      expect([...seen.keys()].sort()).toEqual(["v1", "v2"]);
      const stopped = await stack.admin("DELETE", `/admin/v1/endpoints/${PIC}/abtest?keep=v1`);
      expect(stopped.status, JSON.stringify(stopped.body)).toBe(200);
    },
    LONG,
  );

  it(
    "scales an image endpoint from zero on its queue's depth",
    async () => {
      const res = await stack.admin("PUT", `/admin/v1/endpoints/${PIC}`, {
        model: { name: PIC, version: "v1" },
        resources: { replicas: 0, parallel: 1 },
        autoscaling: {
          min_replicas: 0,
          max_replicas: 1,
          scale_up_cooldown: "1s",
          scale_down_cooldown: "1s",
          scale_down_delay: "600s",
        },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      await stack.waitFor(
        async () => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${PIC}`)).body.state === "scaled_to_zero",
        `${PIC} scaled to zero`,
        LONG,
      );
      const woken = await generate({ prompt: "wake up", size: "64x64", num_inference_steps: 1, seed: 3 });
      expect(woken.status, await woken.clone().text()).toBe(200);
      const scaling = (await stack.admin<Scaling>("GET", `/admin/v1/endpoints/${PIC}/autoscaling`)).body;
      expect(scaling.decisions.find((d) => d.action === "scale_up")?.reason).toMatch(/scale from zero/);
    },
    LONG,
  );
});
