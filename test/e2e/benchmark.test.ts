/**
 * `platform inference benchmark` end to end: the real command against `platform up` on the tiny
 * model, at sizes that take seconds. What is checked is the report's shape and that its figures
 * are coherent (counts, tokens, ordered percentiles), the temporary endpoints of --configs (made,
 * measured, reported with what their engine did not apply, removed, on Ctrl-C too) and the exit
 * codes. No timing thresholds: the figures depend on the machine.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { notApplied } from "../../src/contracts/engines.ts";
import type { LevelResult } from "../../src/benchmark/measure.ts";
import type { BenchmarkReport, ConfigurationResult } from "../../src/benchmark/report.ts";
import type { Summary } from "../../src/benchmark/stats.ts";
import type { TraceResult } from "../../src/benchmark/traces.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { BIN, runCli, type Stack } from "../helpers/stack.ts";
import { waitUntil } from "../helpers/wait.ts";

const MODEL = unique("tiny");

// The report's own types: the test checks the values the command writes, not a second copy of its shape.
type Level = LevelResult;
type Configuration = ConfigurationResult;
type Report = BenchmarkReport;

let stack: Stack;
let work: string;

beforeAll(async () => {
  stack = await sharedStack();
  await deploy(stack, MODEL, { source: await tinyModelPath() });
  work = await mkdtemp(join(tmpdir(), "platform-benchmark-"));
});

afterAll(async () => {
  await undeploy(stack, MODEL);
  if (work) await rm(work, { recursive: true, force: true });
});

/** This file's endpoints (others share the stack). */
const endpointNames = async () =>
  (await stack.admin<{ data: { endpoint: string }[] }>("GET", "/admin/v1/endpoints")).body.data
    .map((e) => e.endpoint)
    .filter((name) => name.startsWith(MODEL));

function expectOrdered(s: Summary | null, count?: number): void {
  expect(s).not.toBeNull();
  const m = s as Summary;
  if (count !== undefined) expect(m.count).toBe(count);
  expect(m.p50).toBeGreaterThanOrEqual(0);
  expect(m.p50).toBeLessThanOrEqual(m.p90);
  expect(m.p90).toBeLessThanOrEqual(m.p99);
}

/** A level where every request of the plan succeeded, with figures that hang together. */
function expectSaneLevel(l: Level, concurrency: number, requests: number, maxTokens: number): void {
  expect(l).toMatchObject({ concurrency, requests, completed: requests, errors: 0, tokens_exact: true });
  expect(l.output_tokens).toBeGreaterThan(0);
  expect(l.output_tokens).toBeLessThanOrEqual(requests * maxTokens);
  expect(l.prompt_tokens).toBeGreaterThan(0);
  expect(l.duration_s).toBeGreaterThan(0);
  // Rates are over the level's wall time. The JSON rounds each figure to 3 decimals, so a rate
  // recomputed from the rounded duration is off by at most that rounding (a short level's most).
  const near = (rate: number, count: number) => {
    const slack = (count * 0.0005) / (l.duration_s * (l.duration_s - 0.0005)) + 0.0005;
    expect(Math.abs(rate - count / l.duration_s)).toBeLessThanOrEqual(slack * 1.0001);
  };
  near(l.requests_per_s, l.completed);
  near(l.output_tokens_per_s, l.output_tokens);
  expectOrdered(l.ttft_ms, requests);
  expectOrdered(l.e2e_ms, requests);
  expectOrdered(l.itl_ms);
  // Each request's first token comes before its end, so every order statistic keeps that order.
  expect((l.ttft_ms as Summary).p50).toBeLessThanOrEqual((l.e2e_ms as Summary).p50);
  expect((l.ttft_ms as Summary).p99).toBeLessThanOrEqual((l.e2e_ms as Summary).p99);
}

async function expectFiles(report: Report, dir: string): Promise<void> {
  expect(report.files).toEqual({ json: join(dir, "benchmark.json"), html: join(dir, "benchmark.html") });
  expect(JSON.parse(await readFile(report.files.json, "utf8"))).toEqual(report);
  const html = await readFile(report.files.html, "utf8");
  expect(html).toMatch(/^<!doctype html>/);
  expect(html).toContain("<svg");
  for (const c of report.configurations) expect(html).toContain(c.name);
  // Self-contained: nothing runs, nothing is fetched.
  expect(html).not.toMatch(/<script|<link|@import|\bsrc=|url\(/i);
}

describe("platform inference benchmark", () => {
  it("measures the endpoint at each concurrency level and writes the JSON and the HTML report", async () => {
    const out = join(work, "plain");
    const r = await runCli(
      [
        "inference",
        "benchmark",
        MODEL,
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--max-tokens",
        "8",
        "--out",
        out,
        "--json",
      ],
      stack.env,
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as Report;
    expect(report).toMatchObject({
      object: "benchmark",
      model: MODEL,
      settings: { api: "chat", concurrency: [1, 2], requests_per_level: 4, duration_s: null, max_tokens: 8 },
    });
    expect(report.configurations).toHaveLength(1);
    const [config] = report.configurations as [Configuration];
    expect(config).toMatchObject({
      name: "as deployed",
      endpoint: MODEL,
      temporary: false,
      version: "v1",
      framework: "llamacpp",
      not_applied: [],
      varied_not_applied: [],
      queue_shared_with: [],
    });
    expect(config.levels.map((l) => l.concurrency)).toEqual([1, 2]);
    for (const l of config.levels) expectSaneLevel(l, l.concurrency, 4, 8);
    await expectFiles(report, out);
    // Progress went to stderr, and so did the paths (stdout is the JSON alone).
    expect(r.stderr).toMatch(/concurrency 1: 4 ok, 0 failed/);
    expect(r.stderr).toContain(`HTML: ${report.files.html}`);
  });

  it("without --out, writes the report under the data directory and says where", async () => {
    const data = join(work, "data");
    const r = await runCli(
      ["inference", "benchmark", MODEL, "--concurrency", "1", "--requests", "1", "--max-tokens", "2", "--json"],
      { ...stack.env, PLATFORM_DATA_DIR: data },
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as Report;
    const dir = dirname(report.files.json);
    expect(dirname(dir)).toBe(join(data, "benchmarks"));
    expect(dir).toMatch(new RegExp(`/benchmark-${MODEL}-\\d{8}-\\d{6}Z$`));
    await expectFiles(report, dir);
    expect(r.stderr).toContain(`report: ${dir}`);
  });

  it("prints a table and both paths; --duration and the completions API", async () => {
    const out = join(work, "table");
    const r = await runCli(
      [
        "inference",
        "benchmark",
        MODEL,
        "--concurrency",
        "2",
        "--duration",
        "1s",
        "--max-tokens",
        "4",
        "--api",
        "completions",
        "--prompt",
        "Once upon a time",
        "--out",
        out,
      ],
      stack.env,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/CONFIG.*CONC.*OK\/ERR.*REQ\/S.*OUT TOK\/S.*TTFT MS p50\/p90\/p99.*ITL MS.*E2E MS/);
    expect(r.stdout).toMatch(/as deployed\s*│ 2\s*│/);
    expect(r.stdout).toContain(`JSON: ${join(out, "benchmark.json")}`);
    expect(r.stdout).toContain(`HTML: ${join(out, "benchmark.html")}`);
    const report = JSON.parse(await readFile(join(out, "benchmark.json"), "utf8")) as Report;
    expect(report.settings).toMatchObject({
      api: "completions",
      duration_s: 1,
      requests_per_level: null,
      max_tokens: 4,
    });
    const level = report.configurations[0]?.levels[0] as Level;
    // Requests keep being sent for the duration: at least one round of 2, all of them finished.
    expect(level.requests).toBeGreaterThanOrEqual(2);
    expectSaneLevel(level, 2, level.requests, 4);
    await expectFiles(report, out);
  });

  it("--configs: measures each value on a temporary endpoint, reports what its engine did not apply, and removes it", async () => {
    const out = join(work, "configs");
    const r = await runCli(
      [
        "inference",
        "benchmark",
        MODEL,
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--max-tokens",
        "8",
        "--configs",
        "quantization=none,int8",
        "--out",
        out,
        "--json",
      ],
      stack.env,
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as Report;
    expect(report.configurations.map((c) => [c.name, c.endpoint, c.temporary])).toEqual([
      ["quantization=none", MODEL, false],
      ["quantization=int8", `${MODEL}--bench-int8`, true],
    ]);
    const [none, int8] = report.configurations as [Configuration, Configuration];
    expect(none.fields).toEqual({ quantization: "none" });
    expect(int8).toMatchObject({ fields: { quantization: "int8" }, version: "v1", framework: "llamacpp" });
    expect(int8.error).toBeUndefined();
    for (const c of [none, int8]) for (const l of c.levels) expectSaneLevel(l, l.concurrency, 4, 8);
    // What the engine leaves unapplied comes from the engine's own table, whichever way it answers for quantization.
    const expected = notApplied(
      "llamacpp",
      DeploymentConfig.parse({ model: { name: MODEL }, runtime: { quantization: "int8" } }),
    );
    expect(int8.not_applied).toEqual(expected);
    expect(int8.varied_not_applied).toEqual(expected.filter((f) => f === "runtime.quantization"));
    if (int8.varied_not_applied.length > 0) expect(r.stderr).toMatch(/not applied by llamacpp: runtime\.quantization/);
    // Quantized, the temporary endpoint has a queue of its own ({tiny@v1~int8}): no other replica answers its requests.
    expect(int8.queue_shared_with).toEqual([]);
    expect(none.queue_shared_with).toEqual([]);
    expect(r.stderr).toContain(`deployed ${MODEL}--bench-int8`);
    expect(r.stderr).toContain(`removed ${MODEL}--bench-int8`);
    expect((await stack.admin("GET", `/admin/v1/endpoints/${MODEL}--bench-int8`)).status).toBe(404);
    expect(await endpointNames()).toEqual([MODEL]);
    await expectFiles(report, out);
  });

  it("Ctrl-C removes the temporary endpoint and exits 130 without writing a report", async () => {
    const out = join(work, "interrupted");
    const child = spawn(
      process.execPath,
      [
        BIN,
        "inference",
        "benchmark",
        MODEL,
        "--concurrency",
        "1",
        "--duration",
        "60s",
        "--max-tokens",
        "8",
        "--configs",
        "quantization=int4",
        "--out",
        out,
      ],
      {
        env: stack.env,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await waitUntil(
      "the benchmark to deploy its endpoint",
      () => stderr.includes(`deployed ${MODEL}--bench-int4`) || child.exitCode !== null,
      { timeoutMs: 60_000, detail: () => stderr },
    );
    expect(child.exitCode, stderr).toBeNull();
    // Once it serves, the temporary endpoint is being measured; interrupt then.
    await stack.waitFor(
      async () =>
        (await stack.admin<{ state: string }>("GET", `/admin/v1/endpoints/${MODEL}--bench-int4`)).body.state ===
        "available",
      `${MODEL}--bench-int4 available`,
    );
    child.kill("SIGINT");
    expect(await exited, stderr).toBe(130);
    expect(stderr).toContain(`removed ${MODEL}--bench-int4`);
    expect((await stack.admin("GET", `/admin/v1/endpoints/${MODEL}--bench-int4`)).status).toBe(404);
    expect(existsSync(out)).toBe(false);
  });

  it("a user key measures the endpoint as deployed (without its deployment details); --configs takes an admin key", async () => {
    const key = (await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: "bench-user", role: "user" }))
      .body.key;
    const env = { ...stack.env, PLATFORM_API_KEY: key };
    const out = join(work, "user");
    const r = await runCli(
      [
        "inference",
        "benchmark",
        MODEL,
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--out",
        out,
        "--json",
      ],
      env,
    );
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as Report;
    expect(report.configurations[0]).toMatchObject({
      name: "as deployed",
      endpoint: MODEL,
      temporary: false,
      version: null,
      framework: null,
    });
    expectSaneLevel(report.configurations[0]?.levels[0] as Level, 1, 2, 4);
    const configs = await runCli(
      ["inference", "benchmark", MODEL, "--configs", "quantization=int8", "--out", join(work, "never")],
      env,
    );
    expect(configs.code).toBe(1);
    expect(configs.stderr).toMatch(
      /--configs deploys temporary endpoints, which takes an admin key: .*\(permission_denied\)/,
    );
  });

  it("--trace decode: the trace's requests, their figures and the cached share, in the JSON written to --out", async () => {
    const out = join(work, "trace");
    const r = await runCli(["inference", "benchmark", MODEL, "--trace", "decode", "--out", out, "--json"], stack.env);
    expect(r.code, r.stderr).toBe(0);
    const result = JSON.parse(r.stdout) as TraceResult & { shape: { conversations: number; maxTokens: number } };
    expect(JSON.parse(await readFile(join(out, "trace-decode.json"), "utf8"))).toEqual(result);
    expect(result).toMatchObject({ trace: "decode", turns: result.shape.conversations, errors: 0 });
    expect(result.output_tokens_per_s).toBeGreaterThan(0);
    expect(result.ttft_by_turn.map((t) => t.turn)).toEqual([0]);
    expect(result.ttft_first_p50).toBeGreaterThan(0);
    // The platform reports cached prompt tokens: the short prompts share at least their first token.
    expect(result.cached_share).toBeGreaterThan(0);
    expect(result.cached_share).toBeLessThan(1);
    expectOrdered(result.itl_ms);
  });

  it("bad input exits 2 naming the flag and the form; an unknown model exits 1 with the server's message", async () => {
    const bad: [string[], RegExp][] = [
      [
        ["--concurrency", "1,x"],
        /option '--concurrency <list>' argument '1,x' is invalid\. expected comma-separated whole numbers/,
      ],
      [["--requests", "0"], /option '--requests <n>' argument '0' is invalid\. expected a whole number ≥ 1/],
      [["--requests", "4", "--duration", "5s"], /--requests and --duration: give one of them/],
      [["--duration", "5"], /--duration: expected "<n>s"/],
      [
        ["--configs", "quantization=fp8"],
        /--configs "quantization=fp8": quantization takes none, int8, int4, got "fp8"/,
      ],
      [["--configs", "dtype=float16"], /--configs "dtype=float16": expected <field>=<value>/],
      [["--configs", "speculative=off,on"], /--speculative-model: required with --configs speculative=on/],
      [["--trace", "chatty"], /--trace: expected multi-turn, agentic, decode, got "chatty"/],
      [["--trace", "decode", "--api", "completions"], /--trace: sends chat requests to the endpoint as it is/],
    ];
    for (const [args, message] of bad) {
      const r = await runCli(["inference", "benchmark", MODEL, "--out", join(work, "never"), ...args], stack.env);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(message);
    }
    const unknown = await runCli(["inference", "benchmark", "nope", "--out", join(work, "never")], stack.env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no endpoint named "nope"/);
    expect(existsSync(join(work, "never"))).toBe(false);
    expect(await endpointNames()).toEqual([MODEL]);
  });
});
