/**
 * A small hand-written SVG line chart: enough for a few live series over the last minutes,
 * no chart library to keep up to date. Each series is drawn over the same time axis; gaps
 * (null: nothing observed in that interval) break the line instead of drawing a fake zero.
 */

export type Series = { label: string; className: string; values: (number | null)[] };

const W = 320;
const H = 90;
const PAD = 4;

function path(values: (number | null)[], max: number, slots: number): string {
  let d = "";
  let pen = false;
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      pen = false;
      return;
    }
    const x = PAD + ((W - 2 * PAD) * i) / Math.max(1, slots - 1);
    const y = H - PAD - ((H - 2 * PAD) * v) / max;
    d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    pen = true;
  });
  return d;
}

export function format(v: number | null | undefined, unit = ""): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const text = v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  return `${text}${unit}`;
}

export function Chart(props: { title: string; unit: string; series: Series[]; slots: number; testId: string }) {
  const all = props.series.flatMap((s) => s.values.filter((v): v is number => v !== null && Number.isFinite(v)));
  // A floor above zero keeps a flat idle line at the bottom instead of in the middle.
  const max = Math.max(...all, 1e-9) * 1.1 || 1;
  return (
    <figure class="chart" data-testid={props.testId}>
      <figcaption>
        {props.title}
        {props.series.map((s) => (
          <span class={`legend ${s.className}`}>
            {s.label} <b>{format(s.values.at(-1), props.unit)}</b>
          </span>
        ))}
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={props.title}>
        <line class="axis" x1={PAD} y1={H - PAD} x2={W - PAD} y2={H - PAD} />
        <text class="max" x={PAD + 2} y={PAD + 8}>
          {format(max / 1.1, props.unit)}
        </text>
        {props.series.map((s) => (
          <path class={`line ${s.className}`} d={path(s.values, max, props.slots)} />
        ))}
      </svg>
    </figure>
  );
}

/** Points kept per chart: 3 minutes at one every 2 s (the dashboard polls every 2 s). */
export const HISTORY = 90;

/** p50 and p99 in milliseconds, from points holding them in seconds (null where unknown). */
export function LatencyChart(props: { testId: string; points: { p50: number | null; p99: number | null }[] }) {
  const ms = (v: number | null) => (v === null ? null : v * 1000);
  return (
    <Chart
      testId={props.testId}
      title="latency"
      unit=" ms"
      slots={HISTORY}
      series={[
        { label: "p50", className: "a", values: props.points.map((p) => ms(p.p50)) },
        { label: "p99", className: "b", values: props.points.map((p) => ms(p.p99)) },
      ]}
    />
  );
}
