/** The models panel (registered versions with their evaluation results) and the batch jobs panel. */
import type { BatchJob, EvaluatedTarget, EvaluationResult, ModelVersion } from "./api.ts";
import { Table } from "./table.tsx";

/** "perplexity 12.3100 ± 0.4000 (n 200)", the latest per metric. */
export function evaluationText(results: EvaluationResult[]): string {
  const latest = new Map<string, EvaluationResult>();
  for (const r of results) if ((latest.get(r.metric)?.finished ?? 0) < r.finished) latest.set(r.metric, r);
  const num = (v: number) =>
    Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : v.toFixed(4);
  return (
    [...latest.values()]
      .map((r) => `${r.metric} ${num(r.value)}${r.stderr === null ? "" : ` ± ${num(r.stderr)}`} (n ${r.n})`)
      .join("; ") || "–"
  );
}

/** Registered versions (adapters included) and their latest evaluation results (`platform training evaluate`). */
export function Models(props: { models: ModelVersion[]; evaluations: EvaluatedTarget[] }) {
  const results = new Map(props.evaluations.map((t) => [t.target, t.results]));
  return (
    <section>
      <h2>Models</h2>
      <Table testId="models" head={["model", "version", "framework", "evaluations"]} empty="No model registered.">
        {props.models.map((m) => (
          <tr>
            <td>{m.name}</td>
            <td>{m.version}</td>
            <td>{m.framework}</td>
            <td data-testid={`evaluations-${m.name}@${m.version}`}>
              {evaluationText(results.get(`${m.name}@${m.version}`) ?? [])}
            </td>
          </tr>
        ))}
      </Table>
    </section>
  );
}

export function Batches(props: { jobs: BatchJob[] }) {
  return (
    <section>
      <h2>Batch jobs</h2>
      <Table testId="batches" head={["id", "model", "state", "progress", "failed"]} empty="No batch job.">
        {props.jobs.map((j) => {
          const done = j.counts.succeeded + j.counts.failed;
          const share = j.counts.total > 0 ? done / j.counts.total : 0;
          return (
            <tr>
              <td class="mono">{j.id}</td>
              <td>
                {j.model}@{j.version}
              </td>
              <td title={j.error?.message}>{j.state}</td>
              <td>
                <progress max={1} value={share} /> {done}/{j.counts.total || "?"}
              </td>
              <td>{j.counts.failed}</td>
            </tr>
          );
        })}
      </Table>
    </section>
  );
}
