/**
 * Versions and A/B tests end to end on `platform up` (local backend, real
 * workers, the tiny model registered as two versions): pinning a version,
 * a 70/30 split over 2,000 requests, sticky callers, weights changed and the
 * test stopped with requests in flight (none lost), the CLI and the
 * management API. Each response names its version in `x-model-version`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack, waitAvailable } from "../helpers/stack.ts";

const AB = unique("ab");

type Variant = {
  version: string;
  weight: number;
  deployment: string | null;
  state: string;
  stats: { requests: number; errors: number; completion_tokens: number; latency_p50_ms: number | null };
};
type Described = {
  endpoint: string;
  abtest: { state: string; keep?: string; split: { version: string; weight: number }[]; sticky?: string } | null;
  variants: Variant[];
};
type EndpointStatus = { version: string; variant_of?: string };

let stack: Stack;

beforeAll(async () => {
  const modelPath = await tinyModelPath();
  stack = await sharedStack();
  for (const version of ["v1", "v2", "v3"]) {
    const reg = await stack.admin("POST", "/admin/v1/models", {
      name: AB,
      framework: "llamacpp",
      source: modelPath,
      version,
    });
    expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  }
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${AB}`, {
    model: { name: AB, version: "v1" },
    resources: { replicas: 1, parallel: 4 },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await waitAvailable(stack, AB);
}, 120_000);

afterAll(() => undeploy(stack, AB));

async function complete(
  model: string,
  headers: Record<string, string> = {},
  apiKey = stack.apiKey,
): Promise<{ status: number; version: string | null; body: unknown }> {
  const res = await fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model, prompt: "Once upon a time", max_tokens: 2, temperature: 0 }),
  });
  return { status: res.status, version: res.headers.get("x-model-version"), body: await res.json() };
}

/** Sends `n` requests, `concurrency` at a time; returns the version of each answer (null for a failure). */
async function many(
  n: number,
  concurrency: number,
  send: (i: number) => Promise<{ status: number; version: string | null }>,
): Promise<{ status: number; version: string | null }[]> {
  const out: { status: number; version: string | null }[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) out[i] = await send(i);
    }),
  );
  return out;
}

const abtest = async () => (await stack.admin<Described>("GET", `/admin/v1/endpoints/${AB}/abtest`)).body;
const share = (results: { version: string | null }[], version: string) =>
  results.filter((r) => r.version === version).length / results.length;

describe("versions", () => {
  it("names the version in x-model-version, pins a deployed version with name@version, and 404s any other naming what is deployed", async () => {
    const plain = await complete(AB);
    expect(plain).toMatchObject({ status: 200, version: "v1" });
    expect(await complete(`${AB}@v1`)).toMatchObject({ status: 200, version: "v1" });
    const missing = await complete(`${AB}@v2`);
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ error: { code: "model_not_found", param: "model" } });
    expect(JSON.stringify(missing.body)).toContain(`Version \`v2\` of \`${AB}\` is not deployed; deployed: v1`);
  });
});

describe("an A/B test", () => {
  it("deploys the new version, splits 70/30 over 2,000 requests within ±3 points, and pins either version meanwhile", {
    timeout: 240_000,
  }, async () => {
    const created = await runCli(["inference", "abtest", "create", AB, "--split", "v1=70,v2=30"], stack.env);
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toContain(`A/B test on ${AB}: v1=70,v2=30`);
    // Until v2 is ready, v1 takes everything; then the split starts.
    await stack.waitFor(
      async () => (await abtest()).abtest?.state === "running",
      "the test to start splitting",
      120_000,
    );
    const variant = await stack.admin<EndpointStatus>("GET", `/admin/v1/endpoints/${AB}--v2`);
    expect(variant.body).toMatchObject({ version: "v2", variant_of: AB });
    // Variants are versions of `ab`, not models of their own.
    const models = await fetch(`${stack.baseUrl}/v1/models`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
    }).then((r) => r.json() as Promise<{ data: { id: string }[] }>);
    expect(models.data.map((m) => m.id)).toContain(AB);
    expect(models.data.map((m) => m.id)).not.toContain(`${AB}--v2`);
    expect((await complete(`${AB}--v2`)).status).toBe(404);

    const results = await many(2000, 16, () => complete(AB));
    expect(results.filter((r) => r.status !== 200)).toEqual([]);
    expect(Math.abs(share(results, "v1") - 0.7)).toBeLessThanOrEqual(0.03);
    expect(Math.abs(share(results, "v2") - 0.3)).toBeLessThanOrEqual(0.03);
    expect(await complete(`${AB}@v2`)).toMatchObject({ status: 200, version: "v2" });

    // Counted per variant by the gateway, shown side by side.
    const status = await runCli(["inference", "abtest", "status", AB, "--json"], stack.env);
    const described = JSON.parse(status.stdout) as Described;
    const requests = Object.fromEntries(described.variants.map((v) => [v.version, v.stats.requests]));
    expect((requests.v1 ?? 0) + (requests.v2 ?? 0)).toBeGreaterThanOrEqual(2000);
    expect(described.variants.find((v) => v.version === "v2")?.stats.latency_p50_ms).not.toBeNull();
    const table = await runCli(["inference", "abtest", "status", AB], stack.env);
    expect(table.stdout).toMatch(/running, split v1=70,v2=30/);
    expect(table.stdout).toMatch(/VERSION.*WEIGHT.*REQUESTS.*P50 MS.*P99 MS/);
  });

  it("keeps sticky callers on one variant, per API key and per header", async () => {
    const update = await runCli(
      ["inference", "abtest", "update", AB, "--split", "v1=50,v2=50", "--sticky", "header:x-user"],
      stack.env,
    );
    expect(update.code, update.stderr).toBe(0);
    await stack.waitFor(async () => (await abtest()).abtest?.sticky === "header:x-user", "the sticky rule");
    const byUser = new Map<string, Set<string | null>>();
    const results = await many(200, 8, async (i) => {
      const user = `user-${i % 20}`;
      const r = await complete(AB, { "x-user": user });
      byUser.set(user, (byUser.get(user) ?? new Set()).add(r.version));
      return r;
    });
    expect(results.every((r) => r.status === 200)).toBe(true);
    for (const [user, versions] of byUser) expect([...versions], user).toHaveLength(1);
    // 20 users over a 50/50 split land on both versions.
    expect(new Set([...byUser.values()].map((v) => [...v][0])).size).toBe(2);

    await runCli(["inference", "abtest", "update", AB, "--split", "v1=50,v2=50", "--sticky", "key"], stack.env);
    await stack.waitFor(async () => (await abtest()).abtest?.sticky === "key", "sticky by key");
    const keys = await Promise.all(
      Array.from(
        { length: 8 },
        async (_, i) =>
          (await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: `caller-${i}`, role: "user" })).body
            .key,
      ),
    );
    const seen = await Promise.all(
      keys.map(async (key) => new Set((await many(15, 3, () => complete(AB, {}, key))).map((r) => r.version))),
    );
    for (const versions of seen) expect(versions.size).toBe(1);
  });

  it("changes weights and stops the test with requests in flight, losing none; the kept version becomes the endpoint's", {
    timeout: 240_000,
  }, async () => {
    let stop = false;
    const background: Promise<{ status: number; version: string | null }>[] = [];
    let answered = 0;
    const load = (async () => {
      while (!stop) {
        background.push(complete(AB).finally(() => answered++));
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const update = await stack.admin("PUT", `/admin/v1/endpoints/${AB}/abtest`, { split: "v1=10,v2=90", sticky: null });
    expect(update.status, JSON.stringify(update.body)).toBe(200);
    // Requests are answered under the new weights before the test stops.
    const beforeStop = answered;
    await expect.poll(() => answered).toBeGreaterThanOrEqual(beforeStop + 100);
    const stopped = await runCli(["inference", "abtest", "stop", AB, "--keep", "v2"], stack.env);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stdout).toMatch(/all traffic on v2/);
    // And after it stopped, while v1 drains.
    const afterStop = answered;
    await expect.poll(() => answered).toBeGreaterThanOrEqual(afterStop + 100);
    stop = true;
    await load;
    const results = await Promise.all(background);
    expect(results.length).toBeGreaterThan(100);
    expect(results.filter((r) => r.status !== 200)).toEqual([]);

    // The stop completes once v1 has drained: the endpoint itself now runs v2, the variant retires.
    await stack.waitFor(async () => (await abtest()).abtest === null, "the test to end", 120_000);
    await stack.waitFor(
      async () => (await stack.admin<EndpointStatus>("GET", `/admin/v1/endpoints/${AB}`)).body.version === "v2",
      `${AB} to run v2`,
    );
    await stack.waitFor(
      async () => (await stack.admin("GET", `/admin/v1/endpoints/${AB}--v2`)).status === 404,
      "the variant to retire",
      120_000,
    );
    const after = await many(40, 4, () => complete(AB));
    expect(after.every((r) => r.status === 200 && r.version === "v2")).toBe(true);
    expect(stack.output()).toContain(`[abtest] ${AB}: test stopped, all traffic on v2`);
  });

  it("refuses bad splits and stickiness naming the problem, and a redeploy that would change the version under a test", async () => {
    for (const [args, message] of [
      [["--split", "v1=70,v2"], /--split: "v2" is not <version>=<weight>/],
      [["--split", "v1=0"], /at least one weight must be above 0/],
      [["--split", "v1=50,v1=50"], /version v1 appears twice/],
      [["--split", "v1=50,v2=50", "--sticky", "cookie"], /--sticky: expected "key" or "header:<header name>"/],
    ] as const) {
      const r = await runCli(["inference", "abtest", "create", AB, ...args], stack.env);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(message);
    }
    const unknown = await stack.admin<{ error: { code: string } }>("PUT", `/admin/v1/endpoints/${AB}/abtest`, {
      split: "v2=50,v9=50",
    });
    expect(unknown.status).toBe(404);
    expect((await abtest()).abtest).toBeNull();
    const started = await stack.admin("PUT", `/admin/v1/endpoints/${AB}/abtest`, { split: "v2=80,v3=20" });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const redeploy = await stack.admin<{ error: { code: string; message: string } }>(
      "PUT",
      `/admin/v1/endpoints/${AB}`,
      {
        model: { name: AB, version: "v1" },
      },
    );
    expect(redeploy.status).toBe(409);
    expect(redeploy.body.error.message).toMatch(/runs an A\/B test over v2, v3/);
    const variantDelete = await stack.admin("DELETE", `/admin/v1/endpoints/${AB}--v3`);
    expect(variantDelete.status).toBe(400);
    // Deleting the endpoint takes its test and variants with it.
    expect((await stack.admin("DELETE", `/admin/v1/endpoints/${AB}`)).status).toBe(200);
    expect((await stack.admin("GET", `/admin/v1/endpoints/${AB}--v3`)).status).toBe(404);
  });
});
