/**
 * The benchmark report as a self-contained HTML page with SVG charts (report.ts holds its shape).
 * Everything is inline (no scripts, fonts or stylesheets fetched) so the file opens anywhere,
 * offline, and can be mailed.
 */
import type { LevelResult } from "./measure.ts";
import { type BenchmarkReport, type ConfigurationResult, formatMs, formatRate, notes } from "./report.ts";
import type { Summary } from "./stats.ts";
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"];

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

type Series = { name: string; color: string; dashed?: boolean; points: { x: number; y: number | null }[] };

/** A step of 1, 2 or 5 × 10^k, so axis labels are round numbers. */
function niceStep(raw: number): number {
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / power;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
}

const tick = (v: number) => (Math.abs(v) >= 1000 ? `${+(v / 1000).toFixed(1)}k` : String(+v.toFixed(3)));

/** A line chart over the concurrency levels; x is logarithmic because levels usually grow by factors. */
export function lineChart(title: string, unit: string, xs: number[], series: Series[]): string {
  const W = 520;
  const H = 300;
  const left = 58;
  const right = 16;
  const top = 34;
  const bottom = 46;
  const plotW = W - left - right;
  const plotH = H - top - bottom;
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  const x = (c: number) =>
    hi === lo ? left + plotW / 2 : left + ((Math.log(c) - Math.log(lo)) / (Math.log(hi) - Math.log(lo))) * plotW;
  const ys = series.flatMap((s) => s.points.flatMap((p) => (p.y === null ? [] : [p.y])));
  const maxY = Math.max(0, ...ys);
  const step = maxY > 0 ? niceStep(maxY / 4) : 1;
  const topY = maxY > 0 ? Math.ceil(maxY / step) * step : 4;
  const y = (v: number) => top + plotH - (v / topY) * plotH;
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">`,
  );
  parts.push(`<text x="${left}" y="20" class="title">${esc(title)}</text>`);
  for (let v = 0; v <= topY + step / 2; v += step) {
    parts.push(`<line x1="${left}" x2="${W - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" class="grid"/>`);
    parts.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" class="tick" text-anchor="end">${tick(v)}</text>`);
  }
  for (const c of xs) {
    parts.push(
      `<line x1="${x(c).toFixed(1)}" x2="${x(c).toFixed(1)}" y1="${top + plotH}" y2="${top + plotH + 5}" class="axis"/>`,
    );
    parts.push(`<text x="${x(c).toFixed(1)}" y="${top + plotH + 18}" class="tick" text-anchor="middle">${c}</text>`);
  }
  parts.push(`<line x1="${left}" x2="${W - right}" y1="${top + plotH}" y2="${top + plotH}" class="axis"/>`);
  parts.push(
    `<text x="${left + plotW / 2}" y="${H - 8}" class="label" text-anchor="middle">concurrency (requests in flight)</text>`,
  );
  parts.push(
    `<text transform="translate(14 ${top + plotH / 2}) rotate(-90)" class="label" text-anchor="middle">${esc(unit)}</text>`,
  );
  if (ys.length === 0)
    parts.push(
      `<text x="${left + plotW / 2}" y="${top + plotH / 2}" class="label" text-anchor="middle">no successful requests</text>`,
    );
  for (const s of series) {
    // A level without a value (every request failed) breaks the line rather than drawing it to 0.
    let path = "";
    let pen = false;
    for (const p of s.points) {
      if (p.y === null) {
        pen = false;
        continue;
      }
      path += `${pen ? "L" : "M"}${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`;
      pen = true;
    }
    if (path)
      parts.push(
        `<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`,
      );
    for (const p of s.points) {
      if (p.y === null) continue;
      parts.push(
        `<circle cx="${x(p.x).toFixed(1)}" cy="${y(p.y).toFixed(1)}" r="3.5" fill="${s.dashed ? "#fff" : s.color}" stroke="${s.color}" stroke-width="1.5"><title>${esc(`${s.name}, concurrency ${p.x}: ${formatMs(p.y)} ${unit}`)}</title></circle>`,
      );
    }
  }
  parts.push("</svg>");
  return parts.join("\n");
}

export function renderHtml(report: BenchmarkReport): string {
  const configs = report.configurations;
  const xs = [...new Set(configs.flatMap((c) => c.levels.map((l) => l.concurrency)))].sort((a, b) => a - b);
  const color = (i: number) => PALETTE[i % PALETTE.length] as string;
  const rate = (pick: (l: LevelResult) => number) =>
    configs.map(
      (c, i): Series => ({
        name: c.name,
        color: color(i),
        points: c.levels.map((l) => ({ x: l.concurrency, y: l.completed > 0 ? pick(l) : null })),
      }),
    );
  const latency = (pick: (l: LevelResult) => Summary | null) =>
    configs.flatMap((c, i): Series[] => [
      {
        name: `${c.name} p50`,
        color: color(i),
        points: c.levels.map((l) => ({ x: l.concurrency, y: pick(l)?.p50 ?? null })),
      },
      {
        name: `${c.name} p99`,
        color: color(i),
        dashed: true,
        points: c.levels.map((l) => ({ x: l.concurrency, y: pick(l)?.p99 ?? null })),
      },
    ]);
  const images = report.settings.api === "images";
  const charts =
    xs.length === 0
      ? ["<p>No configuration was measured.</p>"]
      : images
        ? [
            lineChart(
              "Images per second",
              "images/s",
              xs,
              rate((l) => l.images_per_s ?? 0),
            ),
            lineChart(
              "Time per image",
              "ms",
              xs,
              latency((l) => l.image_ms ?? null),
            ),
            lineChart(
              "Time per denoising step",
              "ms",
              xs,
              latency((l) => l.step_ms ?? null),
            ),
          ]
        : [
            lineChart(
              "Output tokens per second",
              "tokens/s",
              xs,
              rate((l) => l.output_tokens_per_s),
            ),
            lineChart(
              "Requests per second",
              "requests/s",
              xs,
              rate((l) => l.requests_per_s),
            ),
            lineChart(
              "Time to first token",
              "ms",
              xs,
              latency((l) => l.ttft_ms),
            ),
            lineChart(
              "Inter-token latency",
              "ms",
              xs,
              latency((l) => l.itl_ms),
            ),
            lineChart(
              "End-to-end latency",
              "ms",
              xs,
              latency((l) => l.e2e_ms),
            ),
          ];
  // The caveat rides with the name wherever a reader looks first.
  const legend = configs
    .map(
      (c, i) =>
        `<span class="key"><span class="swatch" style="background:${color(i)}"></span>${esc(c.name)}${c.varied_not_applied.length > 0 ? ` <span class="bad">(${esc(c.varied_not_applied.join(", "))} not applied)</span>` : ""}</span>`,
    )
    .join("");
  const s = report.settings;
  const load =
    s.duration_s !== null
      ? `${s.duration_s} s per level`
      : s.requests_per_level !== null
        ? `${s.requests_per_level} requests per level`
        : "4 × concurrency requests per level (at least 16)";
  const warnings = notes(report);
  const row = (c: ConfigurationResult, l: LevelResult) =>
    images
      ? `<tr><td>${esc(c.name)}</td><td>${l.concurrency}</td><td>${l.completed}</td><td>${l.errors}</td><td>${formatRate(l.requests_per_s)}</td><td>${formatRate(l.images_per_s ?? 0)}</td>` +
        [l.image_ms ?? null, l.step_ms ?? null, l.e2e_ms]
          .map((m) => `<td>${formatMs(m?.p50)}</td><td>${formatMs(m?.p90)}</td><td>${formatMs(m?.p99)}</td>`)
          .join("") +
        "</tr>"
      : `<tr><td>${esc(c.name)}</td><td>${l.concurrency}</td><td>${l.completed}</td><td>${l.errors}</td><td>${formatRate(l.requests_per_s)}</td><td>${formatRate(l.output_tokens_per_s)}</td>` +
        [l.ttft_ms, l.itl_ms, l.e2e_ms, l.tpot_ms]
          .map((m) => `<td>${formatMs(m?.p50)}</td><td>${formatMs(m?.p90)}</td><td>${formatMs(m?.p99)}</td>`)
          .join("") +
        "</tr>";
  const rows = configs.flatMap((c) =>
    c.levels.length === 0
      ? [`<tr><td>${esc(c.name)}</td><td colspan="17">failed: ${esc(c.error ?? "not measured")}</td></tr>`]
      : c.levels.map((l) => row(c, l)),
  );
  const configRows = configs.map(
    (c, i) =>
      `<tr><td><span class="swatch" style="background:${color(i)}"></span>${esc(c.name)}</td><td>${esc(c.endpoint)}${c.temporary ? " (temporary, removed)" : ""}</td><td>${esc(c.version ?? "-")}</td><td>${esc(c.framework ?? "-")}</td>` +
      `<td${c.varied_not_applied.length > 0 ? ' class="bad"' : ""}>${esc(c.not_applied.join(", ") || "none")}</td></tr>`,
  );
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Benchmark: ${esc(report.model)}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827; margin: 24px auto; max-width: 1120px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.meta { color: #4b5563; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.charts svg { border: 1px solid #e5e7eb; border-radius: 6px; background: #fff; max-width: 100%; height: auto; }
svg .title { font-size: 14px; font-weight: 600; fill: #111827; }
svg .tick { font-size: 11px; fill: #4b5563; } svg .label { font-size: 12px; fill: #374151; }
svg .grid { stroke: #eef0f3; } svg .axis { stroke: #9ca3af; }
.legend { margin: 8px 0 12px; } .key { margin-right: 18px; white-space: nowrap; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #e5e7eb; padding: 4px 8px; text-align: right; } th { background: #f9fafb; }
td:first-child, th:first-child { text-align: left; }
.configs td, .configs th { text-align: left; }
.bad { background: #fef2f2; color: #991b1b; }
.notes li { margin: 4px 0; } .notes { background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px; padding: 8px 8px 8px 28px; }
</style>
</head>
<body>
<h1>Benchmark: ${esc(report.model)}</h1>
<div class="meta">${esc(report.base_url)} · ${esc(report.started)} → ${esc(report.finished)} · ${images ? `image generations (${esc(s.size ?? "the model's default size")}, ${s.steps ?? "the pipeline's default"} steps, b64_json), ${esc(load)}, a ${s.prompt_chars}-character prompt` : `${s.api === "chat" ? "streamed chat completions" : "streamed completions"}, ${esc(load)}, up to ${s.max_tokens} output tokens, a ${s.prompt_chars}-character prompt, temperature ${s.temperature}`}, ${s.warmup_requests} warm-up request per configuration (not counted)</div>
${warnings.length > 0 ? `<h2>Read this first</h2>\n<ul class="notes">${warnings.map((w) => `<li>${esc(w)}</li>`).join("")}</ul>` : ""}
<h2>Charts</h2>
<div class="legend">${legend} <span class="key">latency charts: solid p50, dashed p99</span></div>
<div class="charts">
${charts.join("\n")}
</div>
<h2>Configurations</h2>
<table class="configs"><tr><th>configuration</th><th>endpoint</th><th>version</th><th>engine</th><th>stored, not applied</th></tr>
${configRows.join("\n")}
</table>
<h2>Figures</h2>
<table>
${images ? IMAGE_HEAD : TEXT_HEAD}
${rows.join("\n")}
</table>
${images ? IMAGE_LEGEND : ""}<p class="meta">TTFT: from sending a request to its first chunk of text. ITL: the gaps between successive chunks of text, over all requests. E2E: from sending to the end of the stream. TPOT: (E2E − TTFT) / (output tokens − 1), per request. Rates: successful requests and their output tokens (the usage the gateway reports) over the level's wall time. Percentiles are nearest-rank.</p>
</body>
</html>
`;
}

const TEXT_HEAD = `<tr><th rowspan="2">configuration</th><th rowspan="2">concurrency</th><th rowspan="2">ok</th><th rowspan="2">errors</th><th rowspan="2">req/s</th><th rowspan="2">output tok/s</th><th colspan="3">TTFT ms</th><th colspan="3">ITL ms</th><th colspan="3">E2E ms</th><th colspan="3">TPOT ms</th></tr>
<tr>${"<th>p50</th><th>p90</th><th>p99</th>".repeat(4)}</tr>`;
const IMAGE_HEAD = `<tr><th rowspan="2">configuration</th><th rowspan="2">concurrency</th><th rowspan="2">ok</th><th rowspan="2">errors</th><th rowspan="2">req/s</th><th rowspan="2">images/s</th><th colspan="3">ms per image</th><th colspan="3">ms per step</th><th colspan="3">E2E ms</th></tr>
<tr>${"<th>p50</th><th>p90</th><th>p99</th>".repeat(3)}</tr>`;
const IMAGE_LEGEND =
  "<p class=\"meta\">Per image: a request's end-to-end time over the images it made; per step: over the denoising steps they took (the usage the gateway reports). Images/s: images made over the level's wall time.</p>";
