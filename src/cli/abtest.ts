/**
 * `platform inference abtest create|status|update|stop`: an endpoint's A/B
 * test through the management API (src/gateway/routes/admin-abtests.ts).
 */
import type { Command } from "commander";
import { type AbTest, formatSplit, parseSplit, SplitError, Sticky, type VariantStats } from "../abtests/record.ts";
import type { StoredResult } from "../evaluation/record.ts";
import type { EndpointStatus } from "../endpoints/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { formatCount, printJson, printTable } from "./common/output.ts";

type Variant = {
  version: string;
  weight: number;
  deployment: string | null;
  state: string;
  replicas: EndpointStatus["replicas"] | null;
  queue: EndpointStatus["queue"] | null;
  stats: VariantStats;
  evaluations?: StoredResult[];
};
type Described = { endpoint: string; abtest: AbTest | null; variants: Variant[] };

export function registerAbtest(inference: Command): void {
  const abtest = inference
    .command("abtest")
    .description("split an endpoint's traffic between versions of its model (A/B tests)");

  abtest
    .command("create <endpoint>")
    .description("start a test: deploys each version of the split not yet running, then splits once all are ready")
    .requiredOption("--split <weights>", "versions and relative weights, e.g. v1=70,v2=30")
    .option(
      "--sticky <rule>",
      "keep each caller on one variant: key (per API key) or header:<name> (per value of that header)",
    )
    .option(
      "--require-eval <metric>",
      "refuse the test unless every version has been evaluated on this metric (perplexity, accuracy or exact_match)",
    )
    .option("--json", "print JSON")
    .action(
      async (endpoint: string, flags: { split: string; sticky?: string; requireEval?: string; json?: boolean }) => {
        if (flags.requireEval !== undefined && !["perplexity", "accuracy", "exact_match"].includes(flags.requireEval))
          throw new CliError(`--require-eval ${flags.requireEval}: use perplexity, accuracy or exact_match`, 2);
        const body = {
          split: formatSplit(split(flags.split)),
          sticky: sticky(flags.sticky) ?? null,
          ...(flags.requireEval ? { require_eval: flags.requireEval } : {}),
        };
        const api = await ApiClient.fromCredentials();
        const before = await api.request<Described>("GET", path(endpoint));
        if (before.abtest)
          throw new CliError(
            `"${endpoint}" already runs an A/B test (${formatSplit(before.abtest.split)}); change it with \`platform inference abtest update ${endpoint} --split ...\``,
            2,
          );
        const out = await api.request<Described>("PUT", path(endpoint), body);
        if (flags.json) return printJson(out);
        console.log(
          `A/B test on ${endpoint}: ${formatSplit(out.abtest?.split ?? [])}${out.abtest?.sticky ? `, sticky by ${out.abtest.sticky}` : ""}`,
        );
        console.log(
          out.abtest?.state === "running"
            ? "splitting traffic now"
            : "starting: traffic is split once every version is ready",
        );
        console.log(`watch it with \`platform inference abtest status ${endpoint}\``);
      },
    );

  abtest
    .command("status <endpoint>")
    .description(
      "weights, and per version: replicas, requests, errors, latency p50/p99 and tokens since the test started, and its evaluation results",
    )
    .option("--json", "print JSON")
    .action(async (endpoint: string, flags: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const out = await api.request<Described>("GET", path(endpoint));
      if (flags.json) return printJson(out);
      if (!out.abtest) {
        console.log(
          `${endpoint} has no A/B test; start one with \`platform inference abtest create ${endpoint} --split v1=70,v2=30\``,
        );
        return;
      }
      const t = out.abtest;
      console.log(
        `${endpoint}: ${t.state}${t.state === "stopping" ? ` (keeping ${t.keep})` : ""}, split ${formatSplit(t.split)}${t.sticky ? `, sticky by ${t.sticky}` : ""}`,
      );
      printTable(
        [
          "VERSION",
          "WEIGHT",
          "STATE",
          "READY/DESIRED",
          "REQUESTS",
          "ERRORS",
          "P50 MS",
          "P99 MS",
          "PROMPT TOK",
          "COMPLETION TOK",
          "EVALUATIONS",
        ],
        out.variants.map((v) => [
          v.version,
          v.weight,
          v.state,
          v.replicas ? `${v.replicas.ready}/${v.replicas.desired}` : "-",
          v.stats.requests,
          v.stats.errors,
          ms(v.stats.latency_p50_ms),
          ms(v.stats.latency_p99_ms),
          formatCount(v.stats.prompt_tokens),
          formatCount(v.stats.completion_tokens),
          evaluations(v.evaluations ?? []),
        ]),
      );
      console.log("latency: the upper bound of the bucket holding the percentile (buckets 5 ms … 120 s)");
    });

  abtest
    .command("update <endpoint>")
    .description("change the weights (or versions) of a running test without a restart")
    .requiredOption("--split <weights>", "versions and relative weights, e.g. v1=50,v2=50")
    .option("--sticky <rule>", "key, header:<name>, or none")
    .option("--json", "print JSON")
    .action(async (endpoint: string, flags: { split: string; sticky?: string; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const before = await api.request<Described>("GET", path(endpoint));
      if (!before.abtest)
        throw new CliError(
          `"${endpoint}" has no A/B test; start one with \`platform inference abtest create ${endpoint} --split ...\``,
          2,
        );
      const body: Record<string, unknown> = { split: formatSplit(split(flags.split)) };
      if (flags.sticky !== undefined) body.sticky = flags.sticky === "none" ? null : sticky(flags.sticky);
      const out = await api.request<Described>("PUT", path(endpoint), body);
      if (flags.json) return printJson(out);
      console.log(`A/B test on ${endpoint}: ${formatSplit(out.abtest?.split ?? [])} (${out.abtest?.state})`);
    });

  abtest
    .command("stop <endpoint>")
    .description(
      "send all traffic to one version (default: the endpoint's own) and end the test once the others have drained",
    )
    .option("--keep <version>", "the version that takes all traffic")
    .option("--json", "print JSON")
    .action(async (endpoint: string, flags: { keep?: string; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const query = flags.keep === undefined ? "" : `?keep=${encodeURIComponent(flags.keep)}`;
      const out = await api.request<Described>("DELETE", `${path(endpoint)}${query}`);
      if (flags.json) return printJson(out);
      console.log(
        `A/B test on ${endpoint} stopping: all traffic on ${out.abtest?.keep}; the other versions are removed once their queued requests are served`,
      );
    });
}

const path = (endpoint: string) => `/admin/v1/endpoints/${encodeURIComponent(endpoint)}/abtest`;

function split(text: string) {
  try {
    return parseSplit(text);
  } catch (e) {
    if (e instanceof SplitError) throw new CliError(`--split: ${e.message}`, 2);
    throw e;
  }
}

function sticky(rule: string | undefined): Sticky | undefined {
  if (rule === undefined) return undefined;
  const parsed = Sticky.safeParse(rule);
  if (!parsed.success) throw new CliError(`--sticky: expected "key" or "header:<header name>", got "${rule}"`, 2);
  return parsed.data;
}

/** "perplexity 12.31±0.40 (n 200); accuracy 0.61±0.03 (n 500)": the latest result per metric. */
export function evaluations(results: readonly StoredResult[], ofAdapter = false): string {
  const latest = new Map<string, StoredResult>();
  for (const r of results)
    if ((ofAdapter || r.adapter === null) && (latest.get(r.metric)?.finished ?? 0) < r.finished)
      latest.set(r.metric, r);
  if (latest.size === 0) return "-";
  return [...latest.values()]
    .map((r) => `${r.metric} ${number(r.value)}${r.stderr === null ? "" : `±${number(r.stderr)}`} (n ${r.n})`)
    .join("; ");
}

function number(v: number): string {
  return Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : v.toFixed(4);
}

const ms = (v: number | null) => (v === null ? "-" : `≤${v}`);
