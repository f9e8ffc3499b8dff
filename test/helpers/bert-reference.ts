/**
 * A BERT sentence embedding computed straight from the math, as the reference the converted GGUF
 * is held to: BERT's basic tokenizer and WordPiece with [CLS]/[SEP], token + position + type
 * embeddings and LayerNorm, post-LayerNorm blocks of multi-head self-attention and a GELU (erf)
 * feed-forward, then the declared pooling (and L2 normalisation when declared). It shares no code
 * with the converter or llama.cpp, and is written for clarity, not speed (a few tokens, tiny dims).
 */

export type ReferenceWeights = ReadonlyMap<string, { shape: number[]; data: Float32Array }>;
export type ReferenceConfig = { hidden: number; heads: number; layers: number; layerNormEps: number };

/** BERT's basic tokenizer (lowercase, accents stripped, split on whitespace and punctuation), then greedy longest-match WordPiece. */
export function wordPiece(text: string, vocab: readonly string[]): number[] {
  const ids = new Map(vocab.map((t, i) => [t, i]));
  const unk = ids.get("[UNK]") as number;
  const words: string[] = [];
  const cleaned = text
    .toLowerCase()
    .normalize("NFD")
    .replace(/\p{Mn}/gu, "");
  for (const chunk of cleaned.split(/\s+/).filter((w) => w.length > 0)) {
    let current = "";
    for (const ch of chunk) {
      if (isPunctuation(ch)) {
        if (current) words.push(current);
        words.push(ch);
        current = "";
      } else current += ch;
    }
    if (current) words.push(current);
  }
  const out: number[] = [];
  for (const word of words) {
    const pieces: number[] = [];
    let start = 0;
    let bad = false;
    while (start < word.length) {
      let end = word.length;
      let found: number | undefined;
      while (start < end) {
        const piece = (start > 0 ? "##" : "") + word.slice(start, end);
        found = ids.get(piece);
        if (found !== undefined) break;
        end--;
      }
      if (found === undefined) {
        bad = true;
        break;
      }
      pieces.push(found);
      start = end;
    }
    out.push(...(bad ? [unk] : pieces));
  }
  return out;
}

/** BERT counts every ASCII non-alphanumeric printable as punctuation, plus Unicode's P* classes. */
function isPunctuation(ch: string): boolean {
  const c = ch.codePointAt(0) as number;
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return /\p{P}/u.test(ch);
}

/** [CLS] text [SEP] as ids. */
export function bertInput(text: string, vocab: readonly string[]): number[] {
  return [vocab.indexOf("[CLS]"), ...wordPiece(text, vocab), vocab.indexOf("[SEP]")];
}

/** erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), enough for a 0.999 cosine. */
function erf(x: number): number {
  const sign = x < 0 ? -1 : 1;
  const a = Math.abs(x);
  const t = 1 / (1 + 0.3275911 * a);
  const y =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  return sign * y;
}

const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));

function layerNorm(x: number[], weight: Float32Array, bias: Float32Array, eps: number): number[] {
  const mean = x.reduce((a, b) => a + b, 0) / x.length;
  const variance = x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length;
  return x.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * (weight[i] as number) + (bias[i] as number));
}

/** y = W x + b with W stored [out, in] row-major, as PyTorch's Linear keeps it. */
function linear(x: number[], w: Float32Array, b: Float32Array): number[] {
  const out = b.length;
  const inn = x.length;
  const y = new Array<number>(out);
  for (let o = 0; o < out; o++) {
    let s = b[o] as number;
    for (let i = 0; i < inn; i++) s += (w[o * inn + i] as number) * (x[i] as number);
    y[o] = s;
  }
  return y;
}

/** The sentence embedding of `ids` (already [CLS] … [SEP]). */
export function bertEmbedding(
  ids: number[],
  weights: ReferenceWeights,
  config: ReferenceConfig,
  pooling: "mean" | "cls",
  normalize: boolean,
): number[] {
  const w = (name: string) => {
    const t = weights.get(name);
    if (!t) throw new Error(`no weight ${name}`);
    return t.data;
  };
  const h = config.hidden;
  const row = (m: Float32Array, r: number) => Array.from(m.subarray(r * h, (r + 1) * h));
  let xs = ids.map((id, pos) => {
    const word = row(w("embeddings.word_embeddings.weight"), id);
    const position = row(w("embeddings.position_embeddings.weight"), pos);
    const type = row(w("embeddings.token_type_embeddings.weight"), 0);
    return layerNorm(
      word.map((v, i) => v + (position[i] as number) + (type[i] as number)),
      w("embeddings.LayerNorm.weight"),
      w("embeddings.LayerNorm.bias"),
      config.layerNormEps,
    );
  });
  const d = h / config.heads;
  for (let l = 0; l < config.layers; l++) {
    const p = `encoder.layer.${l}.`;
    const q = xs.map((x) => linear(x, w(`${p}attention.self.query.weight`), w(`${p}attention.self.query.bias`)));
    const k = xs.map((x) => linear(x, w(`${p}attention.self.key.weight`), w(`${p}attention.self.key.bias`)));
    const v = xs.map((x) => linear(x, w(`${p}attention.self.value.weight`), w(`${p}attention.self.value.bias`)));
    const context = xs.map((_, i) => {
      const out = new Array<number>(h).fill(0);
      for (let head = 0; head < config.heads; head++) {
        const off = head * d;
        // Bidirectional: every token attends to every token of the (single, unpadded) sequence.
        const scores = k.map((kj) => {
          let s = 0;
          for (let c = 0; c < d; c++) s += (q[i]?.[off + c] as number) * (kj[off + c] as number);
          return s / Math.sqrt(d);
        });
        const max = Math.max(...scores);
        const exps = scores.map((s) => Math.exp(s - max));
        const total = exps.reduce((a, b) => a + b, 0);
        exps.forEach((e, j) => {
          for (let c = 0; c < d; c++)
            out[off + c] = (out[off + c] as number) + (e / total) * (v[j]?.[off + c] as number);
        });
      }
      return out;
    });
    xs = xs.map((x, i) => {
      const attn = linear(
        context[i] as number[],
        w(`${p}attention.output.dense.weight`),
        w(`${p}attention.output.dense.bias`),
      );
      const a = layerNorm(
        x.map((val, c) => val + (attn[c] as number)),
        w(`${p}attention.output.LayerNorm.weight`),
        w(`${p}attention.output.LayerNorm.bias`),
        config.layerNormEps,
      );
      const up = linear(a, w(`${p}intermediate.dense.weight`), w(`${p}intermediate.dense.bias`)).map(gelu);
      const down = linear(up, w(`${p}output.dense.weight`), w(`${p}output.dense.bias`));
      return layerNorm(
        a.map((val, c) => val + (down[c] as number)),
        w(`${p}output.LayerNorm.weight`),
        w(`${p}output.LayerNorm.bias`),
        config.layerNormEps,
      );
    });
  }
  const pooled =
    pooling === "cls"
      ? (xs[0] as number[])
      : xs[0]!.map((_, c) => xs.reduce((s, x) => s + (x[c] as number), 0) / xs.length);
  if (!normalize) return pooled;
  const norm = Math.sqrt(pooled.reduce((s, v) => s + v * v, 0));
  return pooled.map((v) => v / norm);
}

export function cosine(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) throw new Error(`vectors of ${a.length} and ${b.length} dimensions`);
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += (a[i] as number) * (b[i] as number);
    na += (a[i] as number) ** 2;
    nb += (b[i] as number) ** 2;
  }
  return dot / Math.sqrt(na * nb);
}
