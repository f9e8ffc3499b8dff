/** Fine-tuning jobs (docs/fine-tuning.md): OpenAI's fine-tuning API on the platform's queues and registry. */
export { FINE_TUNING_QUEUE, FineTuningJobs, type TrainJobData } from "./jobs.ts";
export type { FineTuningSettings } from "../settings/index.ts";
