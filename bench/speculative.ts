/**
 * `npm run bench:speculative`: what speculative decoding on llama.cpp (`runtime.speculative_model`,
 * workers/engines/llamacpp.ts) does, issue 11's bench. The engine as a replica loads it, on the
 * same prompts at temperature 0, without a draft and with each draft available here: the model
 * itself (every draft token right: the ceiling of the mechanism's overhead and gain) and, for the
 * suite's tiny model, the same architecture with other weights (a draft that is often wrong). Per
 * configuration: decode tokens/s (configurations taking turns round by round, medians), the ratio
 * to no draft, the share of draft tokens the model accepted, and whether every answer equals the
 * answer without a draft. Prints a table and writes bench/results/speculative.json.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { median } from "./measure.ts";
import { type LlamaCppOptions, loadLlamaCpp } from "../workers/engines/llamacpp.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const DRAFT_TOKENS = Number(process.env.BENCH_DRAFT_TOKENS ?? 4);
const PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "She was happy because"];

type Config = { name: string; draft?: string };
type Row = { name: string; tokens_per_s: number; ratio: number; accepted: number | null; identical: boolean };

const shared = sharedModelPath();
const model = shared ?? (await tinyModelPath({ contextLength: 2048 }));
const configs: Config[] = [
  { name: "no draft" },
  { name: "draft: the model itself", draft: model },
  ...(shared
    ? []
    : [
        { name: "draft: other weights, same vocabulary", draft: await tinyModelPath({ seed: 2, contextLength: 2048 }) },
      ]),
];

const rates = new Map<string, number[]>(configs.map((c) => [c.name, []]));
const answers = new Map<string, string[]>();
const acceptance = new Map<string, { validated: number; refuted: number }>();
for (let round = 0; round < ROUNDS; round++) {
  for (const config of configs) {
    const options: LlamaCppOptions = {
      modelPath: model,
      parallel: 1,
      threads: THREADS,
      contextSize: 1024,
      ...(config.draft ? { draft: { modelPath: config.draft, tokens: DRAFT_TOKENS } } : {}),
    };
    const engine = await loadLlamaCpp(options);
    let tokens = 0;
    const texts: string[] = [];
    const started = performance.now();
    for (const prompt of PROMPTS) {
      const out = await engine.generate({ kind: "prompt", prompt, params: { max_tokens: TOKENS, temperature: 0 } }, {});
      tokens += out.usage.completion_tokens;
      texts.push(out.text);
    }
    rates.get(config.name)?.push(tokens / ((performance.now() - started) / 1000));
    answers.set(config.name, texts);
    const stats = engine.speculation?.();
    if (stats) acceptance.set(config.name, stats);
    await engine.dispose();
  }
}

const baseline = median(rates.get("no draft") ?? []);
const reference = answers.get("no draft") ?? [];
const rows: Row[] = configs.map((c) => {
  const rate = median(rates.get(c.name) ?? []);
  const stats = acceptance.get(c.name);
  return {
    name: c.name,
    tokens_per_s: Math.round(rate),
    ratio: Number((rate / baseline).toFixed(2)),
    accepted:
      stats && stats.validated + stats.refuted > 0
        ? Number((stats.validated / (stats.validated + stats.refuted)).toFixed(3))
        : null,
    identical: (answers.get(c.name) ?? []).every((t, i) => t === reference[i]),
  };
});

console.log(
  `model ${shared ? "stories260K" : "the suite's tiny model"}, ${THREADS} thread(s), ${PROMPTS.length} prompts × ${TOKENS} tokens, ${DRAFT_TOKENS} draft tokens, median of ${ROUNDS} rounds, load ${loadavg()[0]?.toFixed(1)}`,
);
console.log("configuration                           tokens/s   × no draft   draft accepted   same answers");
for (const r of rows) {
  console.log(
    `${r.name.padEnd(40)}${String(r.tokens_per_s).padStart(8)}   ${r.ratio.toFixed(2).padStart(10)}   ${(r.accepted === null ? "–" : `${(r.accepted * 100).toFixed(1)} %`).padStart(14)}   ${r.identical ? "yes" : "NO"}`,
  );
}
await mkdir(new URL("./results/", import.meta.url), { recursive: true });
await writeFile(
  new URL("./results/speculative.json", import.meta.url),
  `${JSON.stringify({ model: shared ? "stories260K" : "tiny", threads: THREADS, rounds: ROUNDS, tokens: TOKENS, draft_tokens: DRAFT_TOKENS, load: loadavg()[0], rows }, null, 2)}\n`,
);
console.log("wrote bench/results/speculative.json");
