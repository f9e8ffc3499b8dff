/**
 * Rate limits and usage end to end: `platform up` (gateway, worker, Redis) plus a second
 * `platform gateway` process against the same Redis, real inference on the suite's tiny model.
 * One budget across both gateways, token reservation and settlement, a concurrency slot freed
 * when a streaming client leaves, exact usage after known traffic, and the CLI around it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { quiet } from "../helpers/redis.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { BIN, runCli, type Stack, waitAvailable } from "../helpers/stack.ts";
import { api } from "../helpers/api.ts";

const MODEL = unique("tiny");

let stack: Stack;
let second: { child: ChildProcess; url: string };
let redis: Redis;

beforeAll(async () => {
  // A long context, so a stream can be asked for far more tokens than the test waits for.
  const tiny = await tinyModelPath({ contextLength: 4096 });
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: tiny });
  // The same model registered for embeddings, on an endpoint of its own: a model serves one task.
  const embed = await runCli(
    ["training", "submit", "--name", `${MODEL}-embed`, "--source", tiny, "--task", "embed"],
    stack.env,
  );
  expect(embed.code, embed.stderr).toBe(0);
  expect(
    (
      await stack.admin("PUT", `/admin/v1/endpoints/${MODEL}-embed`, {
        model: { name: `${MODEL}-embed`, version: "v1" },
        resources: { replicas: 1, parallel: 1 },
      })
    ).status,
  ).toBe(200);
  await waitAvailable(stack, `${MODEL}-embed`);
  second = await new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, "gateway", "--host", "127.0.0.1", "--port", "0"], {
      env: { ...stack.env, REDIS_URL: stack.redisUrl, PLATFORM_BOOTSTRAP_ADMIN_KEY: undefined },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /gateway listening on (https?:\/\/[^\s";]+)/.exec(out);
      if (m) resolve({ child, url: m[1] as string });
    });
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.once("exit", (code) => reject(new Error(`the second gateway exited ${code}: ${out}`)));
  });
  redis = quiet(new Redis(stack.redisUrl));
});

afterAll(async () => {
  if (second?.child.exitCode === null) {
    const exited = new Promise((r) => second.child.once("exit", r));
    second.child.kill("SIGTERM");
    await exited;
  }
  redis?.disconnect();
  await undeploy(stack, MODEL, `${MODEL}-embed`);
});

type Reply = { url: string; status: number; headers: Headers; body: Record<string, unknown> };

async function post(url: string, key: string, path: string, body: unknown): Promise<Reply> {
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { url, status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

async function get(url: string, key: string, path: string): Promise<Reply> {
  return { url, ...(await api(url, key)("GET", path)) };
}

async function createKey(name: string, limits?: unknown, role = "user"): Promise<{ id: string; key: string }> {
  const res = await stack.admin<{ id: string; key: string }>("POST", "/admin/v1/keys", {
    name,
    role,
    ...(limits ? { limits } : {}),
  });
  expect(res.status).toBe(201);
  return res.body;
}

type UsageRow = {
  key?: string;
  key_name?: string;
  model?: string;
  version?: string;
  requests: number;
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  errors: number;
  rate_limited: number;
};

/** Usage counts are written as each request ends, beside its response: read until they add up, then compare exactly. */
async function usageOnce(key: string, query: string, settled: (rows: UsageRow[]) => boolean): Promise<UsageRow[]> {
  let rows: UsageRow[] = [];
  await stack.waitFor(async () => {
    rows = ((await get(stack.baseUrl, key, `/v1/usage?${query}`)).body as { data: UsageRow[] }).data;
    return settled(rows);
  }, "usage to be recorded");
  return rows;
}

const durationMs = (text: string | null): number => {
  const m = /^(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$|^(\d+)ms$/.exec(text ?? "");
  if (!m) throw new Error(`not a reset duration: ${text}`);
  return m[3] !== undefined ? Number(m[3]) : Number(m[1] ?? 0) * 60_000 + Number(m[2] ?? 0) * 1000;
};

describe("one budget across gateway processes", () => {
  it("admits 60 of 200 requests spread over two gateways to a 60 rpm key; the rest are 429 with headers and Retry-After", async () => {
    const created = await runCli(["keys", "create", "spread", "--rpm", "60", "--json"], stack.env);
    expect(created.code, created.stderr).toBe(0);
    const { id, key, limits } = JSON.parse(created.stdout) as { id: string; key: string; limits: unknown };
    expect(limits).toEqual({ rpm: 60 });

    const urls = [stack.baseUrl, second.url];
    const replies: Reply[] = [];
    for (let wave = 0; wave < 10; wave++) {
      replies.push(
        ...(await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            post(urls[(wave * 20 + i) % 2] as string, key, "/v1/completions", {
              model: MODEL,
              prompt: "Once upon a time",
              max_tokens: 2,
              temperature: 0,
            }),
          ),
        )),
      );
    }
    const admitted = replies.filter((r) => r.status === 200);
    const refused = replies.filter((r) => r.status === 429);
    expect(admitted.length + refused.length).toBe(200);
    expect(admitted).toHaveLength(60);
    // Each admission saw the shared count at its own moment: every remainder once.
    expect(admitted.map((r) => Number(r.headers.get("x-ratelimit-remaining-requests"))).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 60 }, (_, i) => i),
    );
    for (const url of urls) {
      expect(admitted.some((r) => r.url === url)).toBe(true);
      expect(refused.some((r) => r.url === url)).toBe(true);
    }
    for (const r of admitted) {
      expect(r.headers.get("x-ratelimit-limit-requests")).toBe("60");
      expect(r.headers.get("x-model-version")).toBe("v1");
    }
    for (const r of refused) {
      expect(r.body).toEqual({
        error: {
          message: expect.stringMatching(
            /^Rate limit reached for API key key_\w+ on requests per minute: limit 60, used 60, requested 1\. Please try again in /,
          ),
          type: "rate_limit_error",
          param: null,
          code: "rate_limit_exceeded",
        },
      });
      const retryAfter = Number(r.headers.get("retry-after"));
      expect(Number.isInteger(retryAfter)).toBe(true);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(r.headers.get("x-ratelimit-limit-requests")).toBe("60");
      expect(r.headers.get("x-ratelimit-remaining-requests")).toBe("0");
      const reset = durationMs(r.headers.get("x-ratelimit-reset-requests"));
      expect(reset).toBeGreaterThan(0);
      expect(reset).toBeLessThanOrEqual(60_000);
      expect(r.headers.get("x-ratelimit-limit-tokens")).toBeNull(); // no tpm on this key
      expect(r.headers.get("x-request-id")).toBeTruthy();
    }
    // Any response of the key carries the headers, on either gateway.
    for (const url of urls)
      expect((await get(url, key, "/v1/models")).headers.get("x-ratelimit-remaining-requests")).toBe("0");

    const usage = (admitted.map((r) => r.body.usage) as { prompt_tokens: number; completion_tokens: number }[]).reduce(
      (sum, u) => ({ prompt: sum.prompt + u.prompt_tokens, completion: sum.completion + u.completion_tokens }),
      { prompt: 0, completion: 0 },
    );
    const rows = await usageOnce(key, "since=1h", (rows) => rows[0]?.requests === 60 && rows[0]?.rate_limited === 140);
    expect(rows).toEqual([
      {
        key: id,
        key_name: "spread",
        model: MODEL,
        version: "v1",
        requests: 60,
        prompt_tokens: usage.prompt,
        cached_tokens: expect.any(Number),
        completion_tokens: usage.completion,
        total_tokens: usage.prompt + usage.completion,
        errors: 0,
        rate_limited: 140,
        images: 0,
        steps: 0,
      },
    ]);
    expect(usage.completion).toBe(120);
  });

  it("reserves prompt estimate + max_tokens at admission and settles to the real count at completion", async () => {
    const { id, key } = await createKey("tokens", { tpm: 1000 });
    // "Once upon a time" is 16 bytes: an estimate of 4 tokens, plus the 300 asked for.
    const first = await post(stack.baseUrl, key, "/v1/completions", {
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 300,
      temperature: 0,
    });
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-tokens")).toBe("1000");
    expect(first.headers.get("x-ratelimit-remaining-tokens")).toBe(String(1000 - 304));
    const used = (first.body.usage as { total_tokens: number }).total_tokens;
    expect(used).not.toBe(304);
    // Settled as the request ended: the same gateway's next response shows the real count, and the other gateway shares it.
    expect((await get(stack.baseUrl, key, "/v1/models")).headers.get("x-ratelimit-remaining-tokens")).toBe(
      String(1000 - used),
    );
    await stack.waitFor(
      async () =>
        (await get(second.url, key, "/v1/models")).headers.get("x-ratelimit-remaining-tokens") === String(1000 - used),
      "the other gateway to see the settled count",
    );

    const over = await post(second.url, key, "/v1/completions", {
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 900,
    });
    expect(over.status).toBe(429);
    expect((over.body.error as { message: string }).message).toContain(
      `tokens per minute: limit 1000, used ${used}, requested 904`,
    );
    expect(over.headers.get("x-ratelimit-remaining-tokens")).toBe(String(1000 - used));
    expect(Number(over.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

    // A stream reserves the same way; its headers come with the first token.
    const stream = await fetch(`${second.url}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: MODEL,
        prompt: "Once upon a time",
        max_tokens: 100,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(stream.headers.get("x-ratelimit-remaining-tokens")).toBe(String(1000 - used - 104));
    const text = await stream.text();
    const usage = JSON.parse(
      (
        text
          .split("\n\n")
          .filter((e) => e.includes('"usage":{'))
          .pop() as string
      ).slice("data: ".length),
    ).usage as { total_tokens: number };
    expect((await get(second.url, key, "/v1/models")).headers.get("x-ratelimit-remaining-tokens")).toBe(
      String(1000 - used - usage.total_tokens),
    );
    expect(id).toMatch(/^key_/);
  });

  it("frees a max-concurrency slot when a streaming client disconnects", async () => {
    const { id, key } = await createKey("one-at-a-time", { max_concurrency: 1 });
    const slots = `platform:cp:ratelimit:{${id}}:key:s`;
    const controller = new AbortController();
    const res = await fetch(`${stack.baseUrl}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: MODEL,
        prompt: "Once upon a time",
        max_tokens: 4000,
        temperature: 0,
        stream: true,
      }),
      signal: controller.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // the first chunk: generating, and the slot is held (the client reads no further)
    expect(await redis.zcard(slots)).toBe(1);

    const refused = await post(second.url, key, "/v1/completions", {
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 2,
    });
    expect(refused.status).toBe(429);
    expect((refused.body.error as { message: string }).message).toMatch(/requests in flight: limit 1, used 1/);
    expect(refused.headers.get("retry-after")).toBe("1");

    controller.abort();
    await reader.cancel().catch(() => undefined);
    // Released by the gateway when the client left (a lease would take 30 s, and no admission ran meanwhile to clear one).
    await stack.waitFor(async () => (await redis.zcard(slots)) === 0, "the slot to be released");
    const next = await post(second.url, key, "/v1/completions", {
      model: MODEL,
      prompt: "Once upon a time",
      max_tokens: 2,
    });
    expect(next.status).toBe(200);
    await stack.waitFor(
      async () => (await redis.zcard(slots)) === 0,
      "the next request's slot to be released as it ended",
    );
  });
});

describe("usage", () => {
  it("counts known traffic exactly per key, model and version, errors included; the CLI prints it as a table and as JSON", async () => {
    const { id, key } = await createKey("metered");
    const totals = { requests: 0, prompt: 0, completion: 0 };
    const add = (u: { prompt_tokens: number; completion_tokens?: number }) => {
      totals.requests += 1;
      totals.prompt += u.prompt_tokens;
      totals.completion += u.completion_tokens ?? 0;
    };
    for (let i = 0; i < 3; i++) {
      const r = await post(second.url, key, "/v1/chat/completions", {
        model: MODEL,
        messages: [{ role: "user", content: `Once upon a time ${i}` }],
        max_tokens: 5,
        temperature: 0,
      });
      expect(r.status).toBe(200);
      add(r.body.usage as { prompt_tokens: number; completion_tokens: number });
    }
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${stack.baseUrl}/v1/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: MODEL,
          prompt: "The little dog",
          max_tokens: 7,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      const events = (await res.text()).split("\n\n").filter((e) => e.includes('"usage":{'));
      add(
        (
          JSON.parse((events.pop() as string).slice("data: ".length)) as {
            usage: { prompt_tokens: number; completion_tokens: number };
          }
        ).usage,
      );
    }
    const embedding = await post(stack.baseUrl, key, "/v1/embeddings", {
      model: `${MODEL}-embed`,
      input: ["hello", "a story"],
    });
    expect(embedding.status).toBe(200);
    const embedded = (embedding.body.usage as { prompt_tokens: number }).prompt_tokens;
    // An error after admission: the worker's exact count finds prompt + max_tokens over the window.
    const digits = Array.from({ length: 100 }, (_, i) => i % 10).join(" ");
    const probe = await post(stack.baseUrl, key, "/v1/completions", { model: MODEL, prompt: digits, max_tokens: 1 });
    add(probe.body.usage as { prompt_tokens: number; completion_tokens: number });
    const promptTokens = (probe.body.usage as { prompt_tokens: number }).prompt_tokens;
    const failed = await post(stack.baseUrl, key, "/v1/completions", {
      model: MODEL,
      prompt: digits,
      max_tokens: 4096 - promptTokens + 1,
    });
    expect(failed.status).toBe(400);
    expect((failed.body.error as { code: string }).code).toBe("context_length_exceeded");
    totals.requests += 1;
    expect(totals.requests).toBe(7);

    const expected = {
      key: id,
      key_name: "metered",
      model: MODEL,
      version: "v1",
      requests: 7,
      prompt_tokens: totals.prompt,
      cached_tokens: expect.any(Number),
      completion_tokens: totals.completion,
      total_tokens: totals.prompt + totals.completion,
      errors: 1,
      rate_limited: 0,
      images: 0,
      steps: 0,
    };
    const expectedEmbed = {
      key: id,
      key_name: "metered",
      model: `${MODEL}-embed`,
      version: "v1",
      requests: 1,
      prompt_tokens: embedded,
      cached_tokens: expect.any(Number),
      completion_tokens: 0,
      total_tokens: embedded,
      errors: 0,
      rate_limited: 0,
      images: 0,
      steps: 0,
    };
    const byModel = (rows: UsageRow[]) => [...rows].sort((a, b) => String(a.model).localeCompare(String(b.model)));
    expect(byModel(await usageOnce(key, "since=1h", (rows) => rows.reduce((n, r) => n + r.requests, 0) === 8))).toEqual(
      [expected, expectedEmbed],
    );

    // The CLI, with this user key's own credentials: JSON, then the table.
    const env = { ...stack.env, PLATFORM_API_KEY: key };
    const json = await runCli(["usage", "--since", "1h", "--json"], env);
    expect(json.code, json.stderr).toBe(0);
    const report = JSON.parse(json.stdout) as { since: string; by: string[]; data: UsageRow[] };
    expect(report).toMatchObject({ since: "1h", by: ["key", "model", "version"] });
    expect(byModel(report.data)).toEqual([expected, expectedEmbed]);
    const table = await runCli(["usage", "--since", "1h", "--by", "model,version"], env);
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.split("\n");
    const head = lines.find((l) => l.includes("REQUESTS")) as string;
    // The table shows cached tokens only where a replica's cache served some (which sequences the
    // requests landed on decides that); the JSON above counts them either way.
    const cachedOf = (model: string) => report.data.find((r) => r.model === model)?.cached_tokens ?? 0;
    const shown = report.data.some((r) => (r.cached_tokens ?? 0) > 0);
    const cachedColumn = shown ? ["CACHED TOKENS"] : [];
    const cachedCell = (model: string) => (shown ? [String(cachedOf(model))] : []);
    expect(
      head
        .split("│")
        .map((c) => c.trim())
        .filter(Boolean),
    ).toEqual([
      "MODEL",
      "VERSION",
      "REQUESTS",
      "PROMPT TOKENS",
      ...cachedColumn,
      "COMPLETION TOKENS",
      "TOTAL TOKENS",
      "ERRORS",
      "RATE LIMITED",
    ]);
    const row = lines.find((l) => l.includes(` ${MODEL} `)) as string;
    expect(
      row
        .split("│")
        .map((c) => c.trim())
        .filter(Boolean),
    ).toEqual([
      MODEL,
      "v1",
      "7",
      String(totals.prompt),
      ...cachedCell(MODEL),
      String(totals.completion),
      String(totals.prompt + totals.completion),
      "1",
      "0",
    ]);
    const embedRow = lines.find((l) => l.includes(` ${MODEL}-embed `)) as string;
    expect(
      embedRow
        .split("│")
        .map((c) => c.trim())
        .filter(Boolean),
    ).toEqual([
      `${MODEL}-embed`,
      "v1",
      "1",
      String(embedded),
      ...cachedCell(`${MODEL}-embed`),
      "0",
      String(embedded),
      "0",
      "0",
    ]);
    // A user key reads only its own usage; an admin names any key.
    const forbidden = await runCli(["usage", "--key", "key_000000000000"], env);
    expect(forbidden.code).toBe(1);
    expect(forbidden.stderr).toContain("permission_denied");
    const asAdmin = await runCli(["usage", "--key", id, "--by", "key", "--json"], stack.env);
    const all = { prompt: totals.prompt + embedded, total: totals.prompt + totals.completion + embedded };
    expect((JSON.parse(asAdmin.stdout) as { data: UsageRow[] }).data).toEqual([
      {
        key: id,
        key_name: "metered",
        requests: 8,
        prompt_tokens: all.prompt,
        cached_tokens: expect.any(Number),
        completion_tokens: totals.completion,
        total_tokens: all.total,
        errors: 1,
        rate_limited: 0,
        images: 0,
        steps: 0,
      },
    ]);
  });
});

describe("the keys CLI", () => {
  it("creates, updates and lists limits; gateways apply a change within their key cache's lifetime", async () => {
    const created = await runCli(
      ["keys", "create", "tuned", "--tpm", "5000", "--model-limit", `${MODEL}:rpm=10,max-concurrency=2`, "--json"],
      stack.env,
    );
    expect(created.code, created.stderr).toBe(0);
    const { id, key, limits } = JSON.parse(created.stdout) as { id: string; key: string; limits: unknown };
    expect(limits).toEqual({ tpm: 5000, models: { [MODEL]: { rpm: 10, max_concurrency: 2 } } });

    const updated = await runCli(
      ["keys", "update", id, "--tpm", "none", "--rpm", "7", "--model-limit", `${MODEL}:none`],
      stack.env,
    );
    expect(updated.code, updated.stderr).toBe(0);
    expect(updated.stdout.trim()).toBe(`updated ${id} (tuned), limits: rpm 7`);
    await stack.waitFor(
      async () => (await get(second.url, key, "/v1/models")).headers.get("x-ratelimit-limit-requests") === "7",
      "the gateway to apply the new limit",
    );
    expect((await get(second.url, key, "/v1/models")).headers.get("x-ratelimit-limit-tokens")).toBeNull();

    const list = await runCli(["keys", "list"], stack.env);
    expect(list.stdout).toMatch(new RegExp(`${id}.*tuned.*rpm 7`));
    expect(list.stdout).toContain("LIMITS");

    const cleared = await runCli(["keys", "update", id, "--rpm", "none", "--json"], stack.env);
    expect(JSON.parse(cleared.stdout)).not.toHaveProperty("limits");
    await stack.waitFor(
      async () => (await get(second.url, key, "/v1/models")).headers.get("x-ratelimit-limit-requests") === null,
      "the gateway to drop the limit",
    );
  });

  it("refuses bad flags with exit code 2, naming the flag, before sending anything", async () => {
    const cases: [string[], string][] = [
      [["keys", "create", "x", "--rpm", "abc"], "--rpm"],
      [["keys", "create", "x", "--tpm", "0"], "--tpm"],
      [["keys", "create", "x", "--max-concurrency", "1.5"], "--max-concurrency"],
      [["keys", "create", "x", "--rpm", "none"], "--rpm"],
      [["keys", "create", "x", "--model-limit", `${MODEL}:rps=3`], "--model-limit"],
      [["keys", "create", "x", "--role", "root"], "--role"],
      [["keys", "update", "key_0123456789ab", "--tpm", "-5"], "--tpm"],
      [["keys", "update", "key_0123456789ab"], "--rpm"],
      [["keys", "update", "not-a-key", "--rpm", "5"], "<id>"],
      [["usage", "--since", "5x"], "--since"],
      [["usage", "--since", "100d"], "--since"],
      [["usage", "--by", "region"], "--by"],
      [["usage", "--key", "alice"], "--key"],
      [["usage", "--bogus"], "--bogus"],
    ];
    // No credentials at all: a request would fail differently (exit 1), so exit 2 proves nothing was sent.
    const env = {
      ...stack.env,
      PLATFORM_BASE_URL: undefined,
      PLATFORM_API_KEY: undefined,
      PLATFORM_CONFIG_DIR: "/nonexistent",
    };
    for (const [args, flag] of cases) {
      const r = await runCli(args, env);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr, args.join(" ")).toContain(flag);
    }
  });
});
