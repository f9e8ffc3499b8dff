/**
 * A real Prometheus server for tests (Debian's `prometheus` package, which .ci/run installs):
 * started on a free loopback port with a generated configuration that scrapes the given
 * targets every second and evaluates the given rule files, queried through its HTTP API.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { stringify } from "yaml";
import { freePort } from "./redis.ts";
import { waitUntil } from "./wait.ts";

/** The `prometheus` binary, or undefined where it is not installed. */
export function prometheusBinary(): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/bin"];
  return dirs.map((d) => join(d, "prometheus")).find((p) => existsSync(p));
}

export type ScrapeJob = { job: string; targets: string[] };
/** One series of an instant vector: its labels and value. */
export type Series = { metric: Record<string, string>; value: number };
export type Alert = { labels: Record<string, string>; state: "pending" | "firing" | "inactive"; value: string };

export type RunningPrometheus = {
  url: string;
  /** An instant query; throws with Prometheus's message when the expression is not valid PromQL. */
  query: (expr: string) => Promise<Series[]>;
  /** Alerts now pending or firing. */
  alerts: () => Promise<Alert[]>;
  output: () => string;
  stop: () => Promise<void>;
};

export async function startPrometheus(
  binary: string,
  options: { jobs: ScrapeJob[]; ruleFiles?: string[] },
): Promise<RunningPrometheus> {
  const dir = await mkdtemp(join(tmpdir(), "platform-prometheus-"));
  const config = {
    global: { scrape_interval: "1s", scrape_timeout: "1s", evaluation_interval: "1s" },
    rule_files: options.ruleFiles ?? [],
    scrape_configs: options.jobs.map((j) => ({
      job_name: j.job,
      metrics_path: "/metrics",
      static_configs: [{ targets: j.targets }],
    })),
  };
  await writeFile(join(dir, "prometheus.yml"), stringify(config));
  const port = await freePort();
  const child: ChildProcess = spawn(
    binary,
    [
      `--config.file=${join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout?.on("data", (d) => (out += d));
  child.stderr?.on("data", (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  await waitUntil("prometheus to be ready", async () => child.exitCode !== null || (await fetch(`${url}/-/ready`)).ok, {
    timeoutMs: 60_000,
    detail: () => out,
  });
  if (child.exitCode !== null) throw new Error(`prometheus exited (${child.exitCode}):\n${out}`);

  const api = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== "success") throw new Error(`prometheus ${path}: ${body.error ?? res.status}`);
    return body.data;
  };
  return {
    url,
    query: async (expr) => {
      const data = await api<{
        resultType: string;
        result: { metric: Record<string, string>; value: [number, string] }[];
      }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);
      if (data.resultType !== "vector") throw new Error(`${expr}: a ${data.resultType}, not an instant vector`);
      return data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    alerts: async () => (await api<{ alerts: Alert[] }>("/api/v1/alerts")).alerts,
    output: () => out,
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Series as `{ "<label values joined by />": value }`, for comparing a whole result at once. */
export function byLabels(series: Series[], labels: string[]): Record<string, number> {
  return Object.fromEntries(series.map((s) => [labels.map((l) => s.metric[l] ?? "").join("/"), s.value]));
}
