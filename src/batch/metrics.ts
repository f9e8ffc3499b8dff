/**
 * Batch metrics. Progress (`platform_batch_jobs`, `platform_batch_records`) is read from the
 * batch job records in Redis at scrape time, so every gateway reports the same truth. Records
 * answered are counted where they complete (src/batch/record-jobs.ts), in the batch coordinator,
 * which always runs inside a gateway process (`platform gateway`, `platform up`): it reports
 * here and that process's gateway counts them with `source="batch"` (src/gateway/metrics.ts).
 */
import { Gauge, type Registry } from "prom-client";
import { BatchState } from "./record.ts";
import type { Control } from "../redis/connection.ts";
import { listIds } from "./store.ts";
import type { Answered, Failure, Served } from "../telemetry/request-metrics.ts";

/** Progress covers the newest jobs only: records are kept forever, a scrape must stay cheap. */
export const BATCH_JOBS_SCANNED = 1000;

export type BatchRecordReport = { served: Served } & (
  | { ok: true; answered: Answered }
  | { ok: false; failure: Failure }
);

let listener: ((report: BatchRecordReport) => void) | undefined;

/** Called by the coordinator when a record's final answer is recorded. */
export function reportBatchRecord(report: BatchRecordReport): void {
  listener?.(report);
}

/**
 * The gateway of this process counts batch records from now on. One listener per process (a
 * second gateway in one process, as tests run, takes over), so no record is counted twice.
 * Returns the function that stops it.
 */
export function countBatchRecords(count: (report: BatchRecordReport) => void): () => void {
  listener = count;
  return () => {
    if (listener === count) listener = undefined;
  };
}

type Progress = { state: BatchState; total: number; succeeded: number; failed: number; in_flight: number };

export function registerBatchMetrics(registry: Registry, ctl: Control): void {
  // prom-client collects all metrics of a scrape at once: one read serves both gauges.
  let pending: Promise<Progress[]> | undefined;
  const progress = () =>
    (pending ??= readProgress(ctl)
      .catch(() => [])
      .finally(() => {
        pending = undefined;
      }));
  new Gauge({
    name: "platform_batch_jobs",
    help: `Batch jobs by state (the newest ${BATCH_JOBS_SCANNED})`,
    labelNames: ["state"],
    registers: [registry],
    async collect() {
      this.reset();
      const jobs = await progress();
      for (const state of BatchState.options) this.set({ state }, jobs.filter((j) => j.state === state).length);
    },
  });
  new Gauge({
    name: "platform_batch_records",
    help: `Records of the batch jobs in each state (the newest ${BATCH_JOBS_SCANNED} jobs): total in their inputs, succeeded, failed, in flight`,
    labelNames: ["state", "outcome"],
    registers: [registry],
    async collect() {
      this.reset();
      const jobs = await progress();
      for (const state of BatchState.options) {
        const of = jobs.filter((j) => j.state === state);
        for (const outcome of ["total", "succeeded", "failed", "in_flight"] as const)
          this.set(
            { state, outcome },
            of.reduce((n, j) => n + j[outcome], 0),
          );
      }
    },
  });
}

/** Two round trips whatever the number of jobs: the ids, then one pipelined read of their counts. */
async function readProgress(ctl: Control): Promise<Progress[]> {
  const ids = await listIds(ctl, undefined, BATCH_JOBS_SCANNED);
  const pipeline = ctl.redis.pipeline();
  for (const id of ids)
    pipeline.hmget(ctl.keys.batch(id), "state", "cancel_requested", "total", "succeeded", "failed", "in_flight");
  const out: Progress[] = [];
  for (const [err, fields] of (await pipeline.exec()) ?? []) {
    if (err || !Array.isArray(fields)) continue;
    const [stored, cancel, total, succeeded, failed, inFlight] = fields as (string | null)[];
    if (stored === null) continue; // deleted meanwhile
    const parsed = BatchState.safeParse(stored);
    if (!parsed.success) continue;
    // As the job record shows it (src/batch/store.ts): a cancel asked of an active job reads `cancelling`.
    const state =
      cancel === "1" && (parsed.data === "queued" || parsed.data === "running") ? "cancelling" : parsed.data;
    out.push({
      state,
      total: Number(total ?? 0),
      succeeded: Number(succeeded ?? 0),
      failed: Number(failed ?? 0),
      in_flight: Number(inFlight ?? 0),
    });
  }
  return out;
}
