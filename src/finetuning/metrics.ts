/**
 * Fine-tuning metrics, read at scrape time from the `fine-tuning` queue so every gateway reports
 * the same truth: `platform_fine_tuning_jobs{status="queued"|"running"}`. Losses are per job and
 * live in its events, not in labels.
 */
import { Gauge, type Registry } from "prom-client";
import type { FineTuningJobs } from "./jobs.ts";

export function registerFineTuningMetrics(registry: Registry, jobs: FineTuningJobs): void {
  new Gauge({
    name: "platform_fine_tuning_jobs",
    help: "Fine-tuning jobs waiting for a trainer (queued) and being trained (running), all organizations",
    labelNames: ["status"],
    registers: [registry],
    async collect() {
      const counts = await jobs.queueCounts().catch(() => undefined);
      this.reset();
      if (!counts) return;
      this.set({ status: "queued" }, counts.queued);
      this.set({ status: "running" }, counts.running);
    },
  });
}
