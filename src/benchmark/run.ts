/**
 * A benchmark run (`platform inference benchmark`): load an endpoint through the gateway at several
 * concurrency levels and, with configurations (configs.ts), compare deployments that differ in one
 * field by deploying each as a temporary endpoint beside it (removed at the end, on Ctrl-C and on
 * failure too: endpoints/temporary.ts). Measuring is measure.ts; the files are report.ts and html.ts.
 */
import { rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { isApiError, type PlatformApi, type Reporter } from "../contracts/client.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import { type EndpointInfo, TemporaryEndpoints, waitAvailable } from "../endpoints/temporary.ts";
import { type Candidate, type ConfigAxes, candidates, type Speculative, temporaryConfig } from "./configs.ts";
import { renderHtml } from "./html.ts";
import { sendPicture } from "./pictures.ts";
import { type Api, closeConnections, type RequestSpec, runLevel, sendStreamed } from "./measure.ts";
import { type BenchmarkReport, type ConfigurationResult, formatRate } from "./report.ts";

export type BenchmarkPlan = {
  model: string;
  concurrency: number[];
  /** Requests per level; neither this nor durationMs: defaultRequests. */
  requests?: number;
  durationMs?: number;
  prompt: string;
  maxTokens: number;
  api: Api;
  /** Image requests (api "images"): their size and denoising steps; absent: the model's defaults. */
  size?: string;
  steps?: number;
  axes: ConfigAxes;
  speculative: Speculative;
  /** The report's directory (benchmark.json, benchmark.html); the caller creates it. */
  out: string;
};

/** The measured endpoint as an admin sees it (undefined for another key), and what to measure. */
export type Prepared = { plan: BenchmarkPlan; base: EndpointInfo | undefined; planned: Candidate[] };

/** Without requests or a duration: enough rounds per level that its percentiles mean something, and a floor for low levels. */
export const defaultRequests = (concurrency: number) => Math.max(16, 4 * concurrency);

/** Everything checked against the platform before anything is deployed or measured. */
export async function prepareBenchmark(api: PlatformApi, plan: BenchmarkPlan): Promise<Prepared> {
  const base = await baseStatus(api, plan);
  // A diffusers endpoint makes images: it is measured with image requests whatever --api said.
  if (base?.framework === "diffusers") plan = { ...plan, api: "images" };
  return { plan, base, planned: candidates(plan.model, base, plan.axes, plan.speculative) };
}

export type RunOptions = {
  /** Sent with every measured request: one bearer for the whole run (a CLI token lives for hours, a benchmark minutes). */
  bearer: string;
  progress: Reporter;
  /** What the run rejects with on Ctrl-C / SIGTERM. */
  interruption: Error;
};

/** Measures every candidate, writes the report's files into `plan.out` and resolves the report. */
export async function runBenchmark(
  api: PlatformApi,
  prepared: Prepared,
  options: RunOptions,
): Promise<BenchmarkReport> {
  const { plan, base, planned } = prepared;
  const { progress } = options;
  // The measured endpoint first, before any temporary one shares its queue; then one temporary at a time.
  const order = [...planned.filter((c) => !c.temporary), ...planned.filter((c) => c.temporary)];
  const temporary = new TemporaryEndpoints(api, progress, { purpose: "benchmark", interruption: options.interruption });
  const signal = temporary.signal;
  const started = new Date();
  const results = new Map<Candidate, ConfigurationResult>();
  const spec = (endpoint: string): RequestSpec => ({
    baseUrl: api.baseUrl,
    apiKey: options.bearer,
    api: plan.api,
    model: endpoint,
    prompt: plan.prompt,
    maxTokens: plan.maxTokens,
    size: plan.size,
    steps: plan.steps,
  });
  const send = plan.api === "images" ? sendPicture : sendStreamed;
  try {
    for (const [i, candidate] of order.entries()) {
      const tag =
        order.length > 1
          ? `[${i + 1}/${order.length} ${candidate.name}]`
          : `[${candidate.temporary ? candidate.name : plan.model}]`;
      const result: ConfigurationResult = {
        name: candidate.name,
        fields: candidate.fields,
        endpoint: candidate.endpoint,
        temporary: candidate.temporary,
        version: base?.version ?? null,
        framework: base?.framework ?? null,
        not_applied: [],
        varied_not_applied: [],
        queue_shared_with: [],
        levels: [],
      };
      results.set(candidate, result);
      try {
        // A measured endpoint still starting is waited for too; one scaled to zero or degraded is measured as it is (the warm-up wakes it).
        const status = candidate.temporary
          ? await temporary.deploy(temporaryConfig(base as EndpointInfo, candidate), tag)
          : base && (base.state === "pending" || base.state === "failed")
            ? await waitAvailable(api, plan.model, progress, tag, signal)
            : base;
        if (status) {
          result.version = status.version;
          result.framework = status.framework;
          result.not_applied = status.not_applied;
          result.varied_not_applied = status.not_applied.filter((f) => candidate.varied.includes(f));
          result.queue_shared_with = await queueSharers(api, status);
          if (result.varied_not_applied.length > 0)
            progress.line(
              `${tag} not applied by ${status.framework}: ${result.varied_not_applied.join(", ")} (its numbers are not that setting's effect)`,
            );
        }
        progress.status(`${tag} warm-up request`);
        const warm = await send(spec(candidate.endpoint), signal);
        if (!warm.ok) throw new Error(warm.error ?? "the warm-up request failed");
        for (const c of plan.concurrency) {
          const total = plan.durationMs === undefined ? (plan.requests ?? defaultRequests(c)) : undefined;
          const level = await runLevel(
            { concurrency: c, requests: total, durationMs: plan.durationMs },
            () => send(spec(candidate.endpoint), signal),
            (p) => {
              const of =
                total !== undefined
                  ? `${p.finished}/${total} requests`
                  : `${p.finished} requests, ${Math.min(100, Math.floor((p.elapsedMs / (plan.durationMs as number)) * 100))}% of ${(plan.durationMs as number) / 1000} s`;
              progress.status(
                `${tag} concurrency ${c}: ${of}, ${p.errors} failed, ${(p.elapsedMs / 1000).toFixed(1)} s`,
              );
            },
          );
          result.levels.push(level);
          progress.line(
            `${tag} concurrency ${c}: ${level.completed} ok, ${level.errors} failed, ${formatRate(level.requests_per_s)} req/s, ${level.images_per_s !== undefined ? `${formatRate(level.images_per_s)} images/s` : `${formatRate(level.output_tokens_per_s)} output tok/s`} in ${level.duration_s.toFixed(1)} s`,
          );
        }
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        // The measured endpoint failing is the run failing; a temporary configuration failing is one row.
        if (!candidate.temporary) throw e;
        result.error = e instanceof Error ? e.message : String(e);
        progress.line(`${tag} failed: ${result.error}`);
      } finally {
        if (candidate.temporary) await temporary.remove(candidate.endpoint, tag);
      }
    }
  } catch (e) {
    // Nothing was written: leave no empty report directory behind (rmdir keeps a directory that has files).
    await rmdir(plan.out).catch(() => undefined);
    throw e;
  } finally {
    await temporary.close();
    closeConnections();
  }

  const report: BenchmarkReport = {
    object: "benchmark",
    model: plan.model,
    base_url: `${api.baseUrl}/v1`,
    started: started.toISOString(),
    finished: new Date().toISOString(),
    settings: {
      api: plan.api,
      concurrency: plan.concurrency,
      requests_per_level: plan.requests ?? null,
      duration_s: plan.durationMs === undefined ? null : plan.durationMs / 1000,
      max_tokens: plan.maxTokens,
      ...(plan.api === "images" ? { size: plan.size ?? null, steps: plan.steps ?? null } : {}),
      prompt_chars: plan.prompt.length,
      temperature: 0,
      warmup_requests: 1,
    },
    configurations: planned.map((c) => results.get(c) as ConfigurationResult),
    files: { json: join(plan.out, "benchmark.json"), html: join(plan.out, "benchmark.html") },
  };
  await writeFile(report.files.json, `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(report.files.html, renderHtml(report));
  return report;
}

/**
 * The measured endpoint's status (its deployment, version, engine). Undefined for a key that may
 * not read it (not an admin): then the endpoint is only checked to exist, and no configurations.
 */
async function baseStatus(api: PlatformApi, plan: BenchmarkPlan): Promise<EndpointInfo | undefined> {
  try {
    return await api.request<EndpointInfo>("GET", `/admin/v1/endpoints/${encodeURIComponent(plan.model)}`);
  } catch (e) {
    if (!isApiError(e, "permission_denied")) throw e;
    if (plan.axes.length > 0)
      throw new Error(`--configs deploys temporary endpoints, which takes an admin key: ${e.message}`);
  }
  await api.request("GET", `/v1/models/${encodeURIComponent(plan.model)}`);
  return undefined;
}

/**
 * The other endpoints on this endpoint's queue (a model version's, and the engine settings that change
 * answers: engines.ts `endpointQueueName`): their replicas serve its requests too.
 */
async function queueSharers(api: PlatformApi, status: EndpointInfo): Promise<string[]> {
  const all = await api.request<{ data: EndpointInfo[] }>("GET", "/admin/v1/endpoints");
  const queueOf = (s: EndpointInfo) => endpointQueueName({ config: s.config, version: s.version });
  return all.data
    .filter((e) => e.endpoint !== status.endpoint && queueOf(e) === queueOf(status) && e.replicas.desired > 0)
    .map((e) => e.endpoint);
}
