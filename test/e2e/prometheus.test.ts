/**
 * The real Prometheus (Debian's package) scraping a running stack: `platform up`'s gateway and a
 * worker started with --health-port, with deploy/prometheus/alerts.yml loaded. After known
 * traffic, PromQL over its HTTP API returns the expected values per endpoint and version; an
 * endpoint made to fail turns the error-rate alert on for it alone; every query of the Grafana
 * dashboard is valid PromQL against the real series. Skipped, with a message, where the
 * `prometheus` binary is absent (.ci/run installs it).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { undeploy } from "../helpers/deploy.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { byLabels, prometheusBinary, type RunningPrometheus, startPrometheus } from "../helpers/prometheus.ts";
import { freePort } from "../helpers/redis.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { BIN, runCli, type Stack, waitAvailable } from "../helpers/stack.ts";
import { sleep } from "../helpers/wait.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const RULES = join(ROOT, "deploy/prometheus/alerts.yml");
const TINY = unique("tiny");
const BROKEN = unique("broken");
const WORKER = `w-${TINY}-v1`;
/** A selector's matcher for this file's endpoints: the shared stack serves other files' too. */
const MINE = `model_name=~"${TINY}|${BROKEN}"`;
const binary = prometheusBinary();
if (!binary)
  console.warn(
    "prometheus.test: no `prometheus` binary on PATH (Debian: apt-get install prometheus; .ci/run installs it); skipping the Prometheus end-to-end tests",
  );

type Rule = { alert: string; expr: string };
const rules = (parse(readFileSync(RULES, "utf8")) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const ruleExpr = (name: string) => (rules.find((r) => r.alert === name) as Rule).expr;

describe.skipIf(!binary)("Prometheus scraping a running stack", () => {
  let stack: Stack;
  let worker: ChildProcess;
  let workerOutput = "";
  let prometheus: RunningPrometheus;

  beforeAll(async () => {
    const modelPath = await tinyModelPath();
    stack = await sharedStack();
    for (const version of ["v1", "v2"]) {
      const reg = await stack.admin("POST", "/admin/v1/models", {
        name: TINY,
        framework: "llamacpp",
        source: modelPath,
        version,
      });
      expect(reg.status, JSON.stringify(reg.body)).toBe(201);
    }
    // v1 gets no replica from `up`: the worker started below is its only one, so its own counts are exact.
    for (const [name, replicas] of [
      [TINY, 0],
      [BROKEN, 0],
    ] as const) {
      const res = await stack.admin("PUT", `/admin/v1/endpoints/${name}`, {
        model: { name: TINY, version: "v1" },
        resources: { replicas, parallel: 2 },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    // v2 as an A/B variant of tiny: `up` runs its replica; `tiny@v2` reaches it.
    const ab = await runCli(["inference", "abtest", "create", TINY, "--split", "v1=50,v2=50"], stack.env);
    expect(ab.code, ab.stderr).toBe(0);
    const healthPort = await freePort();
    worker = spawn(
      process.execPath,
      [BIN, "worker", "--endpoint", TINY, "--replica-id", WORKER, "--health-port", String(healthPort)],
      {
        env: { ...stack.env, REDIS_URL: stack.redisUrl, PLATFORM_DATA_DIR: stack.dataDir },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    worker.stdout?.on("data", (d) => (workerOutput += d));
    worker.stderr?.on("data", (d) => (workerOutput += d));
    await stack.waitFor(
      async () => (await fetch(`http://127.0.0.1:${healthPort}/readyz`)).ok,
      `worker ${WORKER} ready (its output: ${workerOutput})`,
      120_000,
    );
    await waitAvailable(stack, `${TINY}--v2`, 120_000);
    prometheus = await startPrometheus(binary as string, {
      jobs: [
        { job: "platform-gateway", targets: [new URL(stack.metricsUrl).host] },
        { job: "platform-workers", targets: [`127.0.0.1:${healthPort}`] },
      ],
      ruleFiles: [RULES],
    });
  }, 300_000);

  afterAll(async () => {
    if (worker && worker.exitCode === null) {
      const exited = new Promise((r) => worker.once("exit", r));
      worker.kill("SIGTERM");
      await exited;
    }
    await prometheus?.stop();
    await undeploy(stack, TINY, BROKEN, `${TINY}--v2`);
  });

  const send = async (path: string, body: unknown) => {
    const res = await fetch(`${stack.baseUrl}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    await res.text(); // a stream is read to its end
    return res.status;
  };
  /** Polls until the query's result, by these labels, is `expected` (Prometheus scrapes every second). */
  const eventually = async (expr: string, labels: string[], expected: Record<string, number>) => {
    let last: Record<string, number> = {};
    try {
      await stack.waitFor(
        async () => {
          last = byLabels(await prometheus.query(expr), labels);
          return JSON.stringify(Object.entries(last).sort()) === JSON.stringify(Object.entries(expected).sort());
        },
        expr,
        60_000,
      );
    } catch {
      expect(last, expr).toEqual(expected);
    }
  };

  it("returns the expected values per endpoint and version after known traffic, from the gateway and the worker", {
    timeout: 180_000,
  }, async () => {
    const chat = (model: string, max: number) =>
      send("/v1/chat/completions", {
        model,
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: max,
        temperature: 0,
      });
    expect(await chat(`${TINY}@v1`, 3)).toBe(200);
    expect(await chat(`${TINY}@v1`, 5)).toBe(200);
    expect(
      await send("/v1/completions", { model: `${TINY}@v1`, prompt: "The little dog", max_tokens: 4, stream: true }),
    ).toBe(200);
    // tiny is registered for generation: embeddings are refused (model_not_embedding), a client error counted under it.
    expect(await send("/v1/embeddings", { model: `${TINY}@v1`, input: "Once upon a time" })).toBe(400);
    expect(await send("/v1/completions", { model: `${TINY}@v2`, prompt: "Once", max_tokens: 2 })).toBe(200);
    expect(await send("/v1/completions", { model: `${TINY}@v2`, prompt: "Once", max_tokens: 6 })).toBe(200);
    expect(await chat(`${TINY}@v1`, 100_000)).toBe(400); // context_length_exceeded: a client error
    expect(await chat(BROKEN, 3)).toBe(503); // no replica and no autoscaling: no_capacity

    const gw = `replica="",${MINE}`;
    await eventually(`sum by (model_name, version) (platform_requests_total{${gw}})`, ["model_name", "version"], {
      [`${TINY}/v1`]: 5,
      [`${TINY}/v2`]: 2,
      [`${BROKEN}/v1`]: 1,
    });
    await eventually(`sum by (model_name, version) (vllm:request_success_total{${gw}})`, ["model_name", "version"], {
      [`${TINY}/v1`]: 3,
      [`${TINY}/v2`]: 2,
    });
    await eventually(`sum by (model_name, version) (vllm:generation_tokens_total{${gw}})`, ["model_name", "version"], {
      [`${TINY}/v1`]: 3 + 5 + 4,
      [`${TINY}/v2`]: 2 + 6,
    });
    await eventually(
      `sum by (model_name, version) (vllm:time_to_first_token_seconds_count{${gw}})`,
      ["model_name", "version"],
      { [`${TINY}/v1`]: 3, [`${TINY}/v2`]: 2 },
    );
    await eventually(
      `sum by (model_name, version) (vllm:e2e_request_latency_seconds_count{${gw}})`,
      ["model_name", "version"],
      { [`${TINY}/v1`]: 3, [`${TINY}/v2`]: 2 },
    );
    await eventually(
      `sum by (model_name, version, code, status) (platform_request_errors_total{${gw}})`,
      ["model_name", "version", "code", "status"],
      {
        [`${TINY}/v1/context_length_exceeded/400`]: 1,
        [`${TINY}/v1/model_not_embedding/400`]: 1,
        [`${BROKEN}/v1/no_capacity/503`]: 1,
      },
    );
    await eventually(
      `sum by (model_name, version, reason) (platform_rate_limit_rejections_total{${MINE}})`,
      ["model_name", "version", "reason"],
      { [`${BROKEN}/v1/no_capacity`]: 1 },
    );
    await eventually(`max by (model_name, version) (platform_replicas_ready{${gw}})`, ["model_name", "version"], {
      [`${TINY}/v1`]: 1,
      [`${TINY}/v2`]: 1,
      [`${BROKEN}/v1`]: 0,
    });
    await eventually(`max by (model_name, version) (platform_replicas_desired{${gw}})`, ["model_name", "version"], {
      [`${TINY}/v1`]: 0,
      [`${TINY}/v2`]: 1,
      [`${BROKEN}/v1`]: 0,
    });
    // The worker's own /metrics: everything v1 answered, under its replica id.
    await eventually(
      `sum by (model_name, version, replica) (vllm:request_success_total{replica!="",${MINE}})`,
      ["model_name", "version", "replica"],
      { [`${TINY}/v1/${WORKER}`]: 3 },
    );
    await eventually(`sum by (replica) (vllm:generation_tokens_total{replica!="",${MINE}})`, ["replica"], {
      [WORKER]: 12,
    });
    await eventually(`sum by (replica, kind) (platform_requests_total{replica!="",${MINE}})`, ["replica", "kind"], {
      [`${WORKER}/chat`]: 2,
      [`${WORKER}/completion`]: 1,
    });
    const sums = byLabels(
      await prometheus.query(`sum by (model_name, version) (vllm:e2e_request_latency_seconds_sum{${gw}})`),
      ["model_name", "version"],
    );
    expect(sums[`${TINY}/v1`]).toBeGreaterThan(0);
    expect(sums[`${TINY}/v2`]).toBeGreaterThan(0);
  });

  it("an endpoint that fails turns its error-rate alert on, and only its own", { timeout: 180_000 }, async () => {
    // Failures keep coming (a rate needs the counter to move between scrapes) until Prometheus
    // evaluates the rule true: the alert is pending (its `for:` not yet over) or firing.
    const isOn = (a: { labels: Record<string, string>; state: string }) =>
      a.labels.alertname === "PlatformEndpointHighErrorRate" &&
      a.labels.model_name === BROKEN &&
      a.labels.version === "v1" &&
      a.state !== "inactive";
    let on = false;
    const started = Date.now();
    while (!on && Date.now() - started < 120_000) {
      expect(
        await send("/v1/chat/completions", {
          model: BROKEN,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 2,
        }),
      ).toBe(503);
      on = (await prometheus.alerts()).some(isOn);
      if (!on) await sleep(250);
    }
    expect(on, `the alert never became active; prometheus output:\n${prometheus.output()}`).toBe(true);
    // The rule's own expression, through the query API: true for broken, not for tiny (its error was a 400).
    // Other files' endpoints on the shared stack have their own series: only this file's are asked after.
    const mine = <T extends { metric: Record<string, string> }>(series: T[]) =>
      series.filter((x) => x.metric.model_name === TINY || x.metric.model_name === BROKEN);
    const errorRate = mine(await prometheus.query(ruleExpr("PlatformEndpointHighErrorRate")));
    expect(byLabels(errorRate, ["model_name", "version"])).toEqual({ [`${BROKEN}/v1`]: 1 });
    expect((await prometheus.alerts()).filter((a) => a.labels.model_name === TINY)).toEqual([]);
    // Every endpoint version that wants replicas has one: the availability rule is valid and false.
    expect(mine(await prometheus.query(ruleExpr("PlatformEndpointUnavailable")))).toEqual([]);
  });

  it("every query of the Grafana dashboard is valid PromQL over the real series", { timeout: 60_000 }, async () => {
    type Panel = { title: string; targets?: { expr: string }[] };
    const dashboard = JSON.parse(readFileSync(join(ROOT, "deploy/grafana/platform-dashboard.json"), "utf8")) as {
      panels: Panel[];
    };
    const concrete = (expr: string) =>
      expr.replaceAll("$__rate_interval", "1m").replaceAll("$model_name", ".*").replaceAll("$version", ".*");
    for (const panel of dashboard.panels) {
      for (const target of panel.targets ?? [])
        await prometheus.query(concrete(target.expr)).catch((e: Error) => expect.fail(`${panel.title}: ${e.message}`));
    }
    // The traffic panels show the endpoint versions that served requests.
    const requests = dashboard.panels.find((p) => p.title === "Requests per second") as Panel;
    const shown = await prometheus.query(concrete((requests.targets as { expr: string }[])[0]!.expr));
    expect(shown.map((s) => `${s.metric.model_name}/${s.metric.version}`)).toEqual(
      expect.arrayContaining([`${TINY}/v1`, `${TINY}/v2`, `${BROKEN}/v1`]),
    );
  });
});
