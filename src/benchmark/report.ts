/**
 * What `platform inference benchmark` writes: the report's shape (the JSON file), and the terminal
 * table with its notes. The HTML page is html.ts.
 */
import type { Api, LevelResult } from "./measure.ts";
import type { Summary } from "./stats.ts";

export type ConfigurationResult = {
  /** "as deployed", or the varied fields: "quantization=int8, speculative=on". */
  name: string;
  /** The varied fields and the values asked for; empty for "as deployed". */
  fields: Record<string, string>;
  endpoint: string;
  /** A temporary endpoint deployed for this run (and removed at its end), or the measured one itself. */
  temporary: boolean;
  version: string | null;
  framework: string | null;
  /** Every field of this deployment its engine stores but does not apply (`inference status`). */
  not_applied: string[];
  /**
   * The fields this configuration varies that its engine did not apply: its numbers are then
   * those of the deployment without them, not their effect.
   */
  varied_not_applied: string[];
  /**
   * Other endpoints on the same queue (the same model version with the same answer-changing engine
   * settings, engines.ts `endpointQueueName`): their replicas take this configuration's requests
   * too, so its numbers mix theirs.
   */
  queue_shared_with: string[];
  levels: LevelResult[];
  /** Why this configuration could not be measured (fully or at all). */
  error?: string;
};

export type BenchmarkReport = {
  object: "benchmark";
  model: string;
  base_url: string;
  started: string;
  finished: string;
  settings: {
    api: Api;
    concurrency: number[];
    /** --requests; null with a duration, or by default: 4 × the level, at least 16 (each level's `requests` says). */
    requests_per_level: number | null;
    /** Per level; null with a request count. */
    duration_s: number | null;
    max_tokens: number;
    /** Image requests only: the size and steps asked for (null: the model's defaults). */
    size?: string | null;
    steps?: number | null;
    prompt_chars: number;
    temperature: number;
    /** Sent to each configuration before its levels and left out of every figure. */
    warmup_requests: number;
  };
  configurations: ConfigurationResult[];
  files: { json: string; html: string };
};

// ---- numbers ----

export function formatMs(v: number | null | undefined): string {
  if (v === null || v === undefined) return "-";
  if (v < 10) return v.toFixed(2);
  if (v < 100) return v.toFixed(1);
  return v.toFixed(0);
}

export function formatRate(v: number): string {
  if (v < 10) return v.toFixed(2);
  if (v < 100) return v.toFixed(1);
  return v.toFixed(0);
}

const triple = (s: Summary | null) =>
  s === null ? "-" : `${formatMs(s.p50)} / ${formatMs(s.p90)} / ${formatMs(s.p99)}`;

// ---- terminal ----

export function tableHead(report?: BenchmarkReport): string[] {
  if (report?.settings.api === "images")
    return [
      "CONFIG",
      "CONC",
      "OK/ERR",
      "REQ/S",
      "IMAGES/S",
      "MS/IMAGE p50/p90/p99",
      "MS/STEP p50/p90/p99",
      "E2E MS p50/p90/p99",
    ];
  return [
    "CONFIG",
    "CONC",
    "OK/ERR",
    "REQ/S",
    "OUT TOK/S",
    "TTFT MS p50/p90/p99",
    "ITL MS p50/p90/p99",
    "E2E MS p50/p90/p99",
  ];
}

export function tableRows(report: BenchmarkReport): (string | number)[][] {
  return report.configurations.flatMap((c) => {
    if (c.levels.length === 0) return [[c.name, "-", "-", "-", "-", "-", "-", `failed: ${c.error ?? "not measured"}`]];
    if (report.settings.api === "images")
      return c.levels.map((l) => [
        c.name,
        l.concurrency,
        `${l.completed}/${l.errors}`,
        formatRate(l.requests_per_s),
        formatRate(l.images_per_s ?? 0),
        triple(l.image_ms ?? null),
        triple(l.step_ms ?? null),
        triple(l.e2e_ms),
      ]);
    return c.levels.map((l) => [
      c.name,
      l.concurrency,
      `${l.completed}/${l.errors}`,
      formatRate(l.requests_per_s),
      formatRate(l.output_tokens_per_s),
      triple(l.ttft_ms),
      triple(l.itl_ms),
      triple(l.e2e_ms),
    ]);
  });
}

/** What a reader must know before comparing rows: unapplied fields, shared queues, failures. */
export function notes(report: BenchmarkReport): string[] {
  const out: string[] = [];
  for (const c of report.configurations) {
    const where = `${c.name} (${c.endpoint}${c.temporary ? ", temporary" : ""})`;
    if (c.varied_not_applied.length > 0) {
      const them = c.varied_not_applied.length === 1 ? "it" : "them";
      out.push(
        `${where}: ${c.varied_not_applied.join(", ")} not applied by ${c.framework ?? "its engine"}: these are the numbers of the deployment without ${them}, not ${c.varied_not_applied.length === 1 ? "its" : "their"} effect`,
      );
    }
    const others = c.not_applied.filter((f) => !c.varied_not_applied.includes(f));
    if (others.length > 0) out.push(`${where}: also stored but not applied: ${others.join(", ")}`);
    for (const l of c.levels)
      if (l.errors > 0)
        out.push(`${c.name}, concurrency ${l.concurrency}: ${l.errors} failed: ${l.error_samples.join("; ")}`);
    if (c.error) out.push(`${where}: ${c.error}`);
    if (c.levels.some((l) => !l.tokens_exact))
      out.push(`${c.name}: some answers carried no usage: their tokens were counted as text chunks`);
  }
  // One line for every configuration that shares the same endpoints' queue, not one each.
  const sharing = new Map<string, ConfigurationResult[]>();
  for (const c of report.configurations) {
    if (c.queue_shared_with.length === 0) continue;
    const key = c.queue_shared_with.join(", ");
    sharing.set(key, [...(sharing.get(key) ?? []), c]);
  }
  for (const [others, configs] of sharing) {
    const version = configs[0]?.version ?? "?";
    out.push(
      `${configs.map((c) => c.name).join("; ")}: ${others} serve${others.includes(",") ? "" : "s"} ${version} with the same engine settings, on the same queue: ` +
        `${others.includes(",") ? "their" : "its"} replicas took some of these requests, so these numbers mix in ${others.includes(",") ? "those deployments" : `${others}'s deployment`}`,
    );
  }
  return out;
}
