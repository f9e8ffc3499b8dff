/**
 * An engine's own Prometheus metrics (vLLM's /metrics) served with the replica's: every sample
 * gets the replica's labels (model_name, version, replica), replacing the engine's own values of
 * them, so that a dashboard selects an endpoint's series the same way for every engine. Families
 * the replica already exports under the same name (the request histograms and counters it measures
 * itself, for every engine alike) are left out: one name may appear once in an exposition.
 */

/** Label values escaped as the text format wants them. */
function escapeValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

/** The family a sample line belongs to: histogram and summary series carry a suffix. */
function familyOf(sample: string, families: ReadonlySet<string>): string {
  for (const suffix of ["_bucket", "_sum", "_count", "_created"]) {
    if (!sample.endsWith(suffix)) continue;
    const base = sample.slice(0, -suffix.length);
    if (families.has(base)) return base;
    // prometheus_client names a counter's family `x_total` and its creation time `x_created`.
    if (suffix === "_created" && families.has(`${base}_total`)) return `${base}_total`;
  }
  return sample;
}

/**
 * `text` (Prometheus text format 0.0.4) with `labels` set on every sample and the families named in
 * `skip` dropped. Comments other than HELP/TYPE, and lines that are not samples, are dropped too.
 */
export function relabelExposition(
  text: string,
  labels: Readonly<Record<string, string>>,
  skip: ReadonlySet<string>,
): string {
  const declared = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) /gm)) declared.add(m[1] as string);
  const names = Object.keys(labels);
  const added = names.map((k) => `${k}="${escapeValue(labels[k] as string)}"`).join(",");
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const meta = /^# (HELP|TYPE) (\S+)/.exec(line);
    if (meta) {
      if (!skip.has(meta[2] as string)) out.push(line);
      continue;
    }
    // name, optional {labels}, a value (a number, ±Inf or NaN), an optional timestamp
    const sample =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN)(?:\s+-?[0-9]+)?)$/.exec(
        line,
      );
    if (!sample) continue;
    const name = sample[1] as string;
    if (skip.has(familyOf(name, declared))) continue;
    // The engine's own values of the replica's labels give way (e.g. vLLM's model_name is its served name).
    const own = (sample[3] ?? "").match(/[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"/g) ?? [];
    const kept = own.filter((pair) => !names.includes(pair.slice(0, pair.indexOf("="))));
    out.push(`${name}{${[...kept, added].filter(Boolean).join(",")}} ${sample[4]}`);
  }
  return out.length > 0 ? `${out.join("\n")}\n` : "";
}
