/** Batch inference over object storage (docs/batch.md). */
export { type BatchCoordinator, type CoordinatorOptions, startBatchCoordinator } from "./coordinator.ts";
export { BatchJobs, COORDINATOR_QUEUE, type Viewer } from "./jobs.ts";
