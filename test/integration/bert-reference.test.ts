/**
 * The reference forward pass itself, checked against Hugging Face transformers' BertModel and the
 * `tokenizers` library on the same fixture: the same token ids and the same hidden states pooled
 * the same way. Needs a Python with torch, transformers and tokenizers (`.venv-ref/bin/python`, or
 * PLATFORM_TEST_PYTHON_REF); skips, saying so, without one.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TINY_BERT, writeTinyBert } from "../fixtures/tiny-bert.ts";
import { bertEmbedding, bertInput, cosine } from "../helpers/bert-reference.ts";
import { referencePython } from "../helpers/models.ts";

const PYTHON = referencePython() ?? "python3";
const usable = spawnSync(PYTHON, ["-c", "import torch, transformers, tokenizers"], { stdio: "ignore" }).status === 0;
if (!usable)
  console.warn(
    `bert-reference.test: ${PYTHON} cannot import torch, transformers and tokenizers; skipping the check of the reference against transformers`,
  );

const SCRIPT = `
import json, sys, torch
from tokenizers import Tokenizer
from transformers import BertModel
path, texts = sys.argv[1], json.loads(sys.argv[2])
tok = Tokenizer.from_file(path + "/tokenizer.json")
model = BertModel.from_pretrained(path).eval()
out = []
for t in texts:
    ids = tok.encode(t).ids
    with torch.no_grad():
        h = model(torch.tensor([ids])).last_hidden_state[0]
    out.append({"ids": ids, "mean": h.mean(0).tolist(), "cls": h[0].tolist()})
print(json.dumps(out))
`;

const TEXTS = [
  "The quick brown fox jumped over the lazy dog.",
  "hello, world!",
  "Café déjà-vu? Embedding models play nicely",
  "zzz qqq",
];

let dir: string | undefined;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!usable)("the TypeScript BERT reference", () => {
  it("tokenizes and embeds as transformers' BertModel does", async () => {
    dir = await mkdtemp(join(tmpdir(), "bert-reference-"));
    const { weights, vocab } = await writeTinyBert(dir, { pooling: "mean", seed: 21 });
    const run = spawnSync(PYTHON, ["-c", SCRIPT, dir, JSON.stringify(TEXTS)], {
      encoding: "utf8",
      env: { ...process.env, HF_HUB_OFFLINE: "1", TRANSFORMERS_VERBOSITY: "error" },
    });
    expect(run.status, run.stderr).toBe(0);
    const expected = JSON.parse(run.stdout) as { ids: number[]; mean: number[]; cls: number[] }[];
    TEXTS.forEach((text, i) => {
      const ids = bertInput(text, vocab);
      expect(ids, text).toEqual(expected[i]?.ids);
      expect(
        cosine(bertEmbedding(ids, weights, TINY_BERT, "mean", false), expected[i]?.mean as number[]),
      ).toBeGreaterThan(0.99999);
      expect(
        cosine(bertEmbedding(ids, weights, TINY_BERT, "cls", false), expected[i]?.cls as number[]),
      ).toBeGreaterThan(0.99999);
      for (const [j, v] of bertEmbedding(ids, weights, TINY_BERT, "mean", false).entries())
        expect(v).toBeCloseTo(expected[i]?.mean[j] as number, 4);
    });
  });
});
