/**
 * The llama-family converter proven against Hugging Face transformers: each checkpoint is converted
 * by the platform, loaded by the real llama.cpp engine (node-llama-cpp, CPU, one thread), and must
 * generate at temperature 0 exactly the token ids transformers generated from the same checkpoint
 * (reference.json, written by scripts/reference/make-hf-fixtures.py). The committed tiny checkpoints
 * under test/fixtures/hf/ cover Llama (GQA, tied embeddings, attention bias, linear RoPE scaling),
 * Mistral (float16, a head size apart from hidden/heads), Mixtral (experts, bfloat16) and Qwen2
 * (q/k/v bias, byte-level BPE), a Llama 3-style one (llama3 RoPE scaling, byte-level BPE) and a Llama
 * whose tokenizer is only a SentencePiece tokenizer.model. stories260K is exported by transformers at test time, when the
 * reference venv and ../shared exist, as float32, float32 sharded, float16 and bfloat16.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import { type ConversionResult, convertCheckpoint, supportedArchitectures } from "../../src/formats/convert/index.ts";
import { readGgufInfo } from "../../src/formats/gguf/read.ts";
import { referencePython, sharedModelPath } from "../helpers/models.ts";
import { loadLlamaCpp } from "../../workers/engines/llamacpp.ts";
import { openModel } from "../helpers/quality.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const fixtures = join(repoRoot, "test", "fixtures", "hf");

type Reference = {
  prompt: string;
  prompt_ids: number[];
  input_ids: number[];
  output_ids: number[];
  text?: string;
  pieces?: string[];
  scores?: number[];
};

/** What stories260K has served since it was added (../shared/docs/ENVIRONMENT.md), from BOS + "Once upon a time". */
const STORIES_TEXT = ", there was a little girl named Lily. She loved to play outside in the park. One day,";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-convert-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Converts the checkpoint, then greedy-decodes from its reference's input ids in llama.cpp. */
async function convertAndGenerate(
  checkpoint: string,
  name: string,
  texts: readonly string[] = [],
): Promise<{
  result: ConversionResult;
  reference: Reference;
  tokens: number[];
  prompt: number[];
  addsBos: boolean;
  text: string;
  gguf: string;
  tokenized: number[][];
}> {
  const reference = JSON.parse(await readFile(join(checkpoint, "reference.json"), "utf8")) as Reference;
  const gguf = join(dir, `${name}.gguf`);
  const result = await convertCheckpoint(checkpoint, gguf);
  const m = await openModel(gguf, 1, 256);
  try {
    const tokens: number[] = [];
    for await (const t of m.sequence.evaluate(reference.input_ids as Token[], { temperature: 0 })) {
      tokens.push(t);
      if (tokens.length >= reference.output_ids.length) break;
    }
    const addsBos = m.model.tokens.shouldPrependBosToken;
    const tokenized = texts.map((t) => [...m.model.tokenize(t)]);
    return {
      result,
      reference,
      tokens,
      prompt: [...m.model.tokenize(reference.prompt)],
      addsBos,
      text: m.model.detokenize(tokens as Token[]),
      gguf,
      tokenized,
    };
  } finally {
    await m.dispose();
  }
}

describe("converted tiny checkpoints generate what transformers generates", () => {
  const cases = [
    { name: "llama", architecture: "LlamaForCausalLM", gguf: "llama", tokenizer: "llama" },
    { name: "mistral", architecture: "MistralForCausalLM", gguf: "llama", tokenizer: "llama" },
    { name: "mixtral", architecture: "MixtralForCausalLM", gguf: "llama", tokenizer: "llama" },
    { name: "qwen2", architecture: "Qwen2ForCausalLM", gguf: "qwen2", tokenizer: "gpt2" },
    { name: "llama3", architecture: "LlamaForCausalLM", gguf: "llama", tokenizer: "gpt2" },
    { name: "llama-spm", architecture: "LlamaForCausalLM", gguf: "llama", tokenizer: "llama" },
  ];
  for (const c of cases) {
    it(`${c.architecture} (test/fixtures/hf/${c.name}): same greedy token ids, same prompt tokenization`, async () => {
      const checkpoint = join(fixtures, c.name);
      const { result, reference, tokens, prompt, addsBos, gguf } = await convertAndGenerate(checkpoint, c.name);
      expect(result).toEqual({ architecture: c.architecture, ggufArchitecture: c.gguf, task: "generate" });
      expect(reference.output_ids.length).toBeGreaterThanOrEqual(24);
      expect(tokens).toEqual(reference.output_ids);
      expect(prompt).toEqual(reference.prompt_ids);
      // llama.cpp prepends BOS exactly when transformers' tokenizer does.
      expect(addsBos).toBe(reference.input_ids.length > reference.prompt_ids.length);

      const info = await readGgufInfo(gguf);
      const meta = (key: string) => info.metadata.get(key)?.value;
      expect(meta("tokenizer.ggml.model")).toBe(c.tokenizer);
      const template = existsSync(join(checkpoint, "chat_template.jinja"))
        ? await readFile(join(checkpoint, "chat_template.jinja"), "utf8")
        : (JSON.parse(await readFile(join(checkpoint, "tokenizer_config.json"), "utf8")) as { chat_template: string })
            .chat_template;
      expect(meta("tokenizer.chat_template")).toBe(template);
      const names = info.tensors.map((t) => t.name);
      if (c.name === "mixtral") {
        expect(meta("llama.expert_count")).toBe(4);
        expect(meta("llama.expert_used_count")).toBe(2);
        expect(info.tensors.find((t) => t.name === "blk.0.ffn_gate_exps.weight")?.dims).toEqual([32, 64, 4]);
        // bfloat16 weights are widened to float32 (docs/conversion.md says why).
        expect(meta("general.file_type")).toBe(0);
      }
      if (c.name === "mistral") {
        expect(meta("general.file_type")).toBe(1);
        expect(meta("llama.attention.key_length")).toBe(16);
      }
      if (c.name === "qwen2") {
        expect(meta("tokenizer.ggml.pre")).toBe("qwen2");
        expect(names).toContain("blk.1.attn_k.bias");
      }
      if (c.name === "llama3") {
        expect(meta("tokenizer.ggml.pre")).toBe("llama-bpe");
        // Its post-processor inserts <|begin_of_text|>; Qwen2's tokenizer adds nothing.
        expect(meta("tokenizer.ggml.add_bos_token")).toBe(true);
        expect(info.tensors.find((t) => t.name === "rope_freqs.weight")?.dims).toEqual([4]);
      }
      if (c.name === "llama-spm") {
        // Only tokenizer.model: its pieces and real scores, as sentencepiece reads them.
        expect(meta("tokenizer.ggml.tokens")).toEqual(reference.pieces);
        expect(Array.from(meta("tokenizer.ggml.scores") as ArrayLike<number>)).toEqual(reference.scores);
      }
      // Tied embeddings: no output.weight, llama.cpp reuses token_embd.
      expect(names.includes("output.weight")).toBe(["mistral", "mixtral", "llama3", "llama-spm"].includes(c.name));
    });
  }
});

const python = referencePython();
const stories = sharedModelPath();
const storiesSkip =
  python === undefined
    ? "no reference python (.venv-ref or PLATFORM_TEST_PYTHON_REF; scripts/reference/setup.sh makes it)"
    : stories === undefined
      ? "no ../shared/models/stories260K"
      : undefined;
if (storiesSkip !== undefined) console.log(`skipping the stories260K conversion proof: ${storiesSkip}`);

/** Texts whose tokenization must survive the round trip (tokenizer.json has no SentencePiece scores: docs/conversion.md). */
const TEXTS = [
  "The little dog ran to the park and saw a big red ball!",
  'She was happy because her mom gave her a cookie. "Thank you," she said.',
  "xyzzy Qwerty 12345 naïve café",
  "  two  spaces\nnewline\ttab",
  "Lily and Tom's friends' toys",
];

describe.skipIf(storiesSkip !== undefined)(
  "stories260K, saved by transformers as LlamaForCausalLM and converted back",
  () => {
    let exported: string;
    let original: number[];
    let originalTokenized: number[][];
    beforeAll(async () => {
      exported = join(dir, "stories");
      await promisify(execFile)(
        python!,
        [join(repoRoot, "scripts", "reference", "make-hf-fixtures.py"), "stories", stories!, exported],
        { timeout: 300_000 },
      );
      const reference = JSON.parse(await readFile(join(exported, "f32", "reference.json"), "utf8")) as Reference;
      // What the platform serves today: the original GGUF in llama.cpp.
      const m = await openModel(stories!, 1, 256);
      try {
        original = [];
        for await (const t of m.sequence.evaluate(reference.input_ids as Token[], { temperature: 0 })) {
          original.push(t);
          if (original.length >= reference.output_ids.length) break;
        }
        originalTokenized = TEXTS.map((t) => [...m.model.tokenize(t)]);
      } finally {
        await m.dispose();
      }
    }, 300_000);

    for (const variant of ["f32", "f32-sharded", "f16", "bf16"]) {
      it(`${variant}: the converted GGUF generates transformers' tokens and the text stories260K serves, and tokenizes as the original`, async () => {
        const { reference, tokens, prompt, addsBos, text, tokenized } = await convertAndGenerate(
          join(exported, variant),
          `stories-${variant}`,
          TEXTS,
        );
        expect(reference.input_ids).toEqual([1, 403, 407, 261, 378]);
        expect(addsBos).toBe(true);
        expect(tokens).toEqual(reference.output_ids);
        expect(prompt).toEqual(reference.prompt_ids);
        expect(reference.text).toBe(STORIES_TEXT);
        expect(text).toBe(STORIES_TEXT);
        expect(tokens).toEqual(original);
        expect(tokenized).toEqual(originalTokenized);
      });
    }

    it('served by the platform\'s llama.cpp engine, "Once upon a time" at temperature 0 completes as the original GGUF does', async () => {
      const serve = async (modelPath: string) => {
        const engine = await loadLlamaCpp({ modelPath, parallel: 1, threads: 1 });
        try {
          return await engine.generate(
            { kind: "prompt", prompt: "Once upon a time", params: { temperature: 0, max_tokens: 30 } },
            {},
          );
        } finally {
          await engine.dispose();
        }
      };
      await convertCheckpoint(join(exported, "f32"), join(dir, "stories-served.gguf"));
      const converted = await serve(join(dir, "stories-served.gguf"));
      expect(converted.text).toBe(STORIES_TEXT);
      expect(converted).toEqual(await serve(stories!));
    });
  },
);

describe("checkpoints the converter refuses", () => {
  it("an unsupported architecture: 400 naming the supported ones", async () => {
    const d = join(dir, "gpt2");
    await mkdir(d, { recursive: true });
    await writeFile(join(d, "config.json"), JSON.stringify({ architectures: ["GPT2LMHeadModel"] }));
    const err = await convertCheckpoint(d, join(dir, "gpt2.gguf")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PlatformError);
    expect(err).toMatchObject({ status: 400, code: "unsupported_architecture" });
    expect(supportedArchitectures()).toEqual(
      expect.arrayContaining(["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM"]),
    );
    for (const a of supportedArchitectures()) expect((err as Error).message).toContain(a);
    expect((err as Error).message).toContain("GPT2LMHeadModel");
  });

  it("a missing tensor: 400 invalid_artifact naming it, no output file, no server path", async () => {
    const d = join(dir, "no-norm");
    await cp(join(fixtures, "llama"), d, { recursive: true });
    await writeFile(
      join(d, "model.safetensors"),
      await dropTensor(join(fixtures, "llama", "model.safetensors"), "model.norm.weight"),
    );
    const out = join(dir, "no-norm.gguf");
    const err = await convertCheckpoint(d, out).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 400, code: "invalid_artifact" });
    expect((err as Error).message).toContain("model.norm.weight");
    expect((err as Error).message).not.toContain(dir);
    expect(existsSync(out)).toBe(false);
  });

  it("a shard the index lists but the directory lacks: 400 invalid_artifact naming the shard", async () => {
    const d = join(dir, "no-shard");
    await cp(join(fixtures, "mixtral"), d, { recursive: true });
    const index = {
      metadata: {},
      weight_map: {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors",
      },
    };
    await writeFile(join(d, "model.safetensors.index.json"), JSON.stringify(index));
    await rm(join(d, "model.safetensors"));
    const err = await convertCheckpoint(d, join(dir, "no-shard.gguf")).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 400, code: "invalid_artifact" });
    expect((err as Error).message).toContain("model-00001-of-00002.safetensors");
    expect((err as Error).message).not.toContain(dir);
  });

  it("Mixtral with fused expert tensors (transformers 5's in-memory names) converts to the same file", async () => {
    const d = join(dir, "mixtral-fused");
    await cp(join(fixtures, "mixtral"), d, { recursive: true });
    await writeFile(
      join(d, "model.safetensors"),
      await fuseExperts(join(fixtures, "mixtral", "model.safetensors"), 2, 4),
    );
    await convertCheckpoint(join(fixtures, "mixtral"), join(dir, "mixtral-legacy.gguf"));
    await convertCheckpoint(d, join(dir, "mixtral-fused.gguf"));
    const [legacy, fused] = await Promise.all([
      readFile(join(dir, "mixtral-legacy.gguf")),
      readFile(join(dir, "mixtral-fused.gguf")),
    ]);
    expect(fused.equals(legacy)).toBe(true);
  });

  it("no tokenizer, or a corrupt tokenizer.model: 400 invalid_artifact saying so", async () => {
    const d = join(dir, "no-tokenizer");
    await cp(join(fixtures, "llama"), d, { recursive: true });
    await rm(join(d, "tokenizer.json"));
    await expect(convertCheckpoint(d, join(dir, "no-tokenizer.gguf"))).rejects.toMatchObject({
      status: 400,
      code: "invalid_artifact",
      message: expect.stringContaining("tokenizer.model"),
    });
    await writeFile(join(d, "tokenizer.model"), Buffer.from([0x0a, 0xff, 0xff, 0xff]));
    await expect(convertCheckpoint(d, join(dir, "no-tokenizer.gguf"))).rejects.toMatchObject({
      status: 400,
      code: "invalid_artifact",
      message: expect.stringContaining("tokenizer.model"),
    });
    expect(existsSync(join(dir, "no-tokenizer.gguf"))).toBe(false);
  });

  it("an unsupported setting: 400 saying which", async () => {
    const d = join(dir, "gelu");
    await cp(join(fixtures, "qwen2"), d, { recursive: true });
    const config = JSON.parse(await readFile(join(d, "config.json"), "utf8")) as Record<string, unknown>;
    await writeFile(join(d, "config.json"), JSON.stringify({ ...config, hidden_act: "gelu" }));
    await expect(convertCheckpoint(d, join(dir, "gelu.gguf"))).rejects.toMatchObject({
      status: 400,
      code: "invalid_artifact",
      message: expect.stringContaining("hidden_act"),
    });
  });
});

type RawTensor = { dtype: string; shape: number[]; bytes: Buffer };

async function readSafetensors(path: string): Promise<Map<string, RawTensor>> {
  const file = await readFile(path);
  const length = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + length).toString("utf8")) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const data = file.subarray(8 + length);
  const out = new Map<string, RawTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (name !== "__metadata__")
      out.set(name, { dtype: e.dtype, shape: e.shape, bytes: data.subarray(e.data_offsets[0], e.data_offsets[1]) });
  }
  return out;
}

function encodeSafetensors(tensors: Map<string, RawTensor>): Buffer {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes.length] };
    offset += t.bytes.length;
  }
  const json = Buffer.from(JSON.stringify(header));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([length, json, ...[...tensors.values()].map((t) => t.bytes)]);
}

/** The same safetensors file without one tensor. */
async function dropTensor(path: string, name: string): Promise<Buffer> {
  const tensors = await readSafetensors(path);
  tensors.delete(name);
  return encodeSafetensors(tensors);
}

/**
 * Mixtral's per-expert tensors (block_sparse_moe.experts.E.w1/w2/w3, as transformers saves them) in
 * transformers 5's fused in-memory form: mlp.gate, mlp.experts.gate_up_proj [E, 2*ff, hidden]
 * (each expert's gate rows, then its up rows) and mlp.experts.down_proj [E, hidden, ff].
 */
async function fuseExperts(path: string, layers: number, experts: number): Promise<Buffer> {
  const tensors = await readSafetensors(path);
  for (let i = 0; i < layers; i++) {
    const p = `model.layers.${i}.block_sparse_moe`;
    const take = (name: string): RawTensor => {
      const t = tensors.get(name)!;
      tensors.delete(name);
      return t;
    };
    tensors.set(`model.layers.${i}.mlp.gate.weight`, take(`${p}.gate.weight`));
    const gateUp: Buffer[] = [];
    const down: Buffer[] = [];
    let w1: RawTensor | undefined;
    let w2: RawTensor | undefined;
    for (let e = 0; e < experts; e++) {
      w1 = take(`${p}.experts.${e}.w1.weight`);
      gateUp.push(w1.bytes, take(`${p}.experts.${e}.w3.weight`).bytes);
      w2 = take(`${p}.experts.${e}.w2.weight`);
      down.push(w2.bytes);
    }
    const [ff, hidden] = w1!.shape as [number, number];
    tensors.set(`model.layers.${i}.mlp.experts.gate_up_proj`, {
      dtype: w1!.dtype,
      shape: [experts, 2 * ff, hidden],
      bytes: Buffer.concat(gateUp),
    });
    tensors.set(`model.layers.${i}.mlp.experts.down_proj`, {
      dtype: w2!.dtype,
      shape: [experts, hidden, ff],
      bytes: Buffer.concat(down),
    });
  }
  return encodeSafetensors(tensors);
}
