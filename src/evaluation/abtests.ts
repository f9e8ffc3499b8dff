/**
 * A/B tests and evaluations: the variants' evaluation results beside their live numbers, and
 * `require_eval`, which refuses a split naming a version never evaluated on a metric, so traffic
 * never moves to a version nobody measured.
 */
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import type { Metric, StoredResult } from "./record.ts";
import { readResults } from "./store.ts";

/** The latest results on `model`@`version` (every organization's: A/B tests are the operator's). */
export async function versionEvaluations(ctl: Control, model: string, version: string): Promise<StoredResult[]> {
  return readResults(ctl, `${model}@${version}`);
}

export async function requireEvaluated(
  ctl: Control,
  model: string,
  versions: readonly string[],
  metric: Metric,
): Promise<void> {
  for (const version of versions) {
    const results = await versionEvaluations(ctl, model, version);
    if (!results.some((r) => r.metric === metric && r.adapter === null))
      throw new PlatformError(
        400,
        "not_evaluated",
        `require_eval: ${model}@${version} has never been evaluated on ${metric}; evaluate it first (\`platform training evaluate ${model}@${version} --dataset <file> --metric ${metric}\`)`,
        "require_eval",
      );
  }
}
