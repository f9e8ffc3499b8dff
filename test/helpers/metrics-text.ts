/**
 * Reading Prometheus text exposition in tests: every sample with its labels, and sums over the
 * samples that match some labels, so a test can compare two scrapes and check what moved.
 */
export type Sample = { name: string; labels: Record<string, string>; value: number };

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = LINE.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (m[2] ?? "").matchAll(LABEL))
      labels[key as string] = (value as string).replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

export async function scrape(url: string): Promise<Sample[]> {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}`);
  return parseMetrics(await res.text());
}

/** The sum of the samples named `name` whose labels include `match` (a "" value matches an absent label). */
export function total(samples: Sample[], name: string, match: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => (s.labels[k] ?? "") === v))
    .reduce((n, s) => n + s.value, 0);
}

/** How much `name` (matching `match`) moved between two scrapes. */
export function moved(before: Sample[], after: Sample[], name: string, match: Record<string, string> = {}): number {
  return total(after, name, match) - total(before, name, match);
}
