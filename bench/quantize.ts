/**
 * `npm run bench:quantize`: what the platform's own quantizer (src/formats/quantize/) does to a
 * model, issue 11's bench. For stories260K (the tiny test model where ../shared is absent), each of
 * none / int8 (Q8_0) / int4 (Q4_0): file size, the time to quantize, decode tokens/s through
 * node-llama-cpp directly (same prompts, same thread count, variants taking turns round by round,
 * medians), token agreement with the unquantized model at temperature 0 over fixed prompts
 * (free-running: same token at the same position, and the identical prefix before the first
 * difference; teacher-forced: its top token on the reference's context), and perplexity on a
 * fixed text.
 * Prints a table with ratios against none and writes bench/results/quantize.json.
 */
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Token } from "node-llama-cpp";
import { quantizeGguf } from "../src/formats/quantize/file.ts";
import { sharedModelPath, tinyModelPath } from "../test/helpers/models.ts";
import {
  commonPrefix,
  greedy,
  type OpenModel,
  openModel,
  perplexity,
  positionalAgreement,
  scoreContinuation,
} from "../test/helpers/quality.ts";

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const PROMPTS = [
  "Once upon a time",
  "The little dog",
  "Lily and Tom went to the park",
  "One day, a big bear",
  "She was happy because",
  "The sun was shining and",
  "Max wanted to play with",
  "In the forest there was",
];
/** A fixed TinyStories-style text: stories260K was trained on such stories, so its perplexity here is meaningful. */
const TEXT =
  "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. " +
  "One day, she saw a big red ball under a tree. She wanted to play with it, so she ran to get it. " +
  'But the ball was stuck. Lily asked her mom for help. Her mom smiled and said, "Let\'s try together." ' +
  "They pulled and pulled, and the ball came out. Lily was very happy. She said thank you to her mom and played with the ball all day.";

const VARIANTS = ["none", "int8", "int4"] as const;
type Variant = (typeof VARIANTS)[number];
const TYPE_NAME: Record<Variant, string> = { none: "F32", int8: "Q8_0", int4: "Q4_0" };

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const source = sharedModelPath() ?? (await tinyModelPath());
const work = await mkdtemp(join(tmpdir(), "bench-quantize-"));
const loadAtStart = loadavg();
try {
  const paths: Record<Variant, string> = { none: source, int8: join(work, "int8.gguf"), int4: join(work, "int4.gguf") };
  const quantizeMs: Partial<Record<Variant, number>> = {};
  for (const q of ["int8", "int4"] as const) {
    const t0 = performance.now();
    const r = await quantizeGguf(source, paths[q], q);
    quantizeMs[q] = performance.now() - t0;
    if (r.kind !== "quantized") throw new Error(`${q}: ${r.reason}`);
  }

  const models = {} as Record<Variant, OpenModel>;
  for (const v of VARIANTS) models[v] = await openModel(paths[v], THREADS);
  try {
    // The reference continuations: the unquantized model's greedy tokens.
    const reference: Token[][] = [];
    for (const p of PROMPTS) reference.push((await greedy(models.none, p, TOKENS)).tokens);

    const rates: Record<Variant, number[]> = { none: [], int8: [], int4: [] };
    const outputs = {} as Record<Variant, Token[][]>;
    for (let round = 0; round < ROUNDS; round++) {
      for (const v of VARIANTS) {
        const perPrompt: number[] = [];
        const tokens: Token[][] = [];
        for (const p of PROMPTS) {
          const g = await greedy(models[v], p, TOKENS);
          perPrompt.push(g.tokensPerSecond);
          tokens.push(g.tokens);
        }
        rates[v].push(median(perPrompt));
        outputs[v] = tokens;
      }
    }

    const rows = [];
    for (const v of VARIANTS) {
      let positional = 0;
      let prefix = 0;
      let teacherForced = 0;
      for (const [i, p] of PROMPTS.entries()) {
        positional += positionalAgreement(outputs[v][i]!, reference[i]!) / PROMPTS.length;
        prefix += commonPrefix(outputs[v][i]!, reference[i]!) / PROMPTS.length;
        teacherForced += (await scoreContinuation(models[v], p, reference[i]!)).agree / PROMPTS.length;
      }
      rows.push({
        variant: v,
        type: TYPE_NAME[v],
        size_bytes: (await stat(paths[v])).size,
        quantize_ms: quantizeMs[v] ?? null,
        tokens_per_s: median(rates[v]),
        agreement_positional: positional,
        identical_prefix_tokens: prefix,
        agreement_teacher_forced: teacherForced,
        perplexity: await perplexity(models[v], TEXT),
      });
    }
    const none = rows[0]!;
    const results = {
      model: basename(source),
      threads: THREADS,
      rounds: ROUNDS,
      prompts: PROMPTS.length,
      tokens_per_prompt: TOKENS,
      load_average: { start: loadAtStart[0], end: loadavg()[0] },
      variants: rows.map((r) => ({
        ...r,
        size_ratio: r.size_bytes / none.size_bytes,
        speed_ratio: r.tokens_per_s / none.tokens_per_s,
        perplexity_ratio: r.perplexity / none.perplexity,
      })),
    };
    const out = new URL("./results/", import.meta.url);
    await mkdir(out, { recursive: true });
    await writeFile(new URL("quantize.json", out), `${JSON.stringify(results, null, 2)}\n`);

    const f = (x: number, d = 2) => x.toFixed(d);
    console.log(
      `model ${results.model}; ${THREADS} thread(s); ${PROMPTS.length} prompts × ${TOKENS} tokens at temperature 0; tokens/s: median of ${ROUNDS} rounds; load ${f(loadAtStart[0]!)} → ${f(results.load_average.end!)}`,
    );
    const header = [
      "variant",
      "type",
      "size",
      "× none",
      "quantize",
      "tokens/s",
      "× none",
      "same token",
      "same prefix",
      "top-1 forced",
      "perplexity",
      "× none",
    ];
    const lines = results.variants.map((r) => [
      r.variant,
      r.type,
      `${(r.size_bytes / 1024).toFixed(0)} KiB`,
      f(r.size_ratio),
      r.quantize_ms === null ? "-" : `${r.quantize_ms.toFixed(0)} ms`,
      r.tokens_per_s.toFixed(0),
      f(r.speed_ratio),
      `${(r.agreement_positional * 100).toFixed(1)}%`,
      `${r.identical_prefix_tokens.toFixed(1)}/${TOKENS}`,
      `${(r.agreement_teacher_forced * 100).toFixed(1)}%`,
      f(r.perplexity, 3),
      f(r.perplexity_ratio, 3),
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
    for (const l of [header, ...lines]) console.log(l.map((c, i) => c.padStart(widths[i]!)).join("  "));
    console.log("written bench/results/quantize.json");
  } finally {
    for (const v of VARIANTS) await models[v]?.dispose();
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
