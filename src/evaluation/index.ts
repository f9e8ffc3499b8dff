/** Evaluation jobs on model versions and adapters (docs/evaluation.md). */
export {
  type EvaluationCoordinator,
  type EvaluationCoordinatorOptions,
  startEvaluationCoordinator,
} from "./coordinator.ts";
export { Evaluations } from "./jobs.ts";
