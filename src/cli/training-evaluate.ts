/** `platform training evaluate`: evaluation jobs on model versions and adapters (docs/evaluation.md). */
import type { Command } from "commander";

export function registerEvaluate(_training: Command): void {}
