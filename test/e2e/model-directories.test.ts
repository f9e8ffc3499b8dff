/**
 * Checkpoint directories end to end on `platform up` with its artifact store in S3 (s3rver): the
 * CLI uploads a Hugging Face-style directory (`training submit --source <dir>`); a `framework: vllm`
 * deployment goes through the gateway, the queue and a real worker whose `vllm serve` is the fake
 * (test/helpers/fake-vllm.ts), which must be given the directory materialised in the node's cache and
 * `--quantization` for a full-precision checkpoint (not for a pre-quantized one); a llama.cpp
 * deployment of a checkpoint gets it converted to GGUF, or fails with the converter's message in
 * `status` when its architecture has no converter. Bring-your-own weights as a user does it: the
 * committed tiny Llama checkpoint, uploaded and served by llama.cpp through the `openai` client,
 * generates what transformers generates; a sentence-transformers BERT directory with CLS pooling in
 * 1_Pooling/config.json embeds as the reference forward pass pools it.
 */
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";
import OpenAI from "openai";
import type { Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { supportedArchitectures } from "../../src/formats/convert/index.ts";
import { startS3, type S3Server } from "../helpers/batch-env.ts";
import { expectedManifest, TEST_ARCHITECTURE, writeCheckpoint } from "../helpers/checkpoints.ts";
import { CHAT_REPLY } from "../helpers/fake-vllm.ts";
import { type OwnStack, runCli, startStack, waitAvailable } from "../helpers/stack.ts";
import { TINY_BERT, writeTinyBert } from "../fixtures/tiny-bert.ts";
import { bertEmbedding, bertInput, cosine } from "../helpers/bert-reference.ts";
import { openModel } from "../helpers/quality.ts";

const BUCKET = "platform-e2e-models";
/** The converter's own tiny Llama checkpoint (src/formats/convert's fixtures), when this tree has it. */
const LLAMA_FIXTURE = fileURLToPath(new URL("../fixtures/hf/llama", import.meta.url));

type Status = { state: string; errors: string[]; weights: string[]; replicas: { ready: number; failed: number } };

let s3: S3Server;
let stack: OwnStack;
let work: string;
let record: string;
let plain: string;
let plainNames: string[];
let quantized: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "platform-e2e-dirs-"));
  s3 = await startS3(join(work, "s3rver"), BUCKET);
  const fake = fileURLToPath(new URL("../helpers/fake-vllm.ts", import.meta.url));
  const bin = join(work, "vllm");
  await writeFile(bin, `#!/usr/bin/env node\nimport { main } from ${JSON.stringify(fake)};\nmain();\n`);
  await chmod(bin, 0o755);
  record = join(work, "vllm-record.json");
  plain = join(work, "plain");
  plainNames = await writeCheckpoint(plain, { sharded: true });
  quantized = join(work, "awq");
  await writeCheckpoint(quantized, { quantMethod: "awq" });
  stack = await startStack({
    env: {
      ...s3.env,
      PLATFORM_ARTIFACTS_URL: `s3://${BUCKET}/artifacts`,
      VLLM_BIN: bin,
      FAKE_VLLM_RECORD: record,
      // The launcher's `#!/usr/bin/env node` must find this Node (type stripping), not an older one on PATH.
      PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`,
    },
  });
});

afterAll(async () => {
  await stack?.stop();
  await s3?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

const status = async (name: string) => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${name}`)).body;

async function submit(name: string, framework: string, source: string): Promise<RegisteredVersion> {
  const r = await runCli(
    ["training", "submit", "--name", name, "--framework", framework, "--source", source, "--json"],
    stack.env,
  );
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as RegisteredVersion;
}

async function deploy(name: string, runtime: Record<string, unknown> = {}): Promise<void> {
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${name}`, { model: { name }, runtime });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function started(): Promise<string[]> {
  return (JSON.parse(await readFile(record, "utf8")) as { argv: string[] }).argv;
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

describe("checkpoint directories on a running platform", () => {
  it("`training submit --source <dir>` uploads the directory: one version with its manifest and metadata, shown in `training list`", async () => {
    const human = await runCli(
      ["training", "submit", "--name", "ckpt", "--framework", "vllm", "--source", plain],
      stack.env,
    );
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(/registered ckpt@v1/);
    expect(human.stdout).toContain(`${TEST_ARCHITECTURE} · `);
    expect(human.stdout).toMatch(/context 2048 · float32 · LlamaTokenizerFast · chat template · 7 files/);
    expect(human.stderr).toMatch(/uploading .*100%/);
    const models = await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models");
    const rec = models.body.data.find((m) => m.name === "ckpt");
    expect(rec).toMatchObject({ kind: "hf", framework: "vllm", manifest: await expectedManifest(plain, plainNames) });
    const list = await runCli(["training", "list"], stack.env);
    expect(list.stdout).toMatch(new RegExp(`ckpt[\\s│]+v1[\\s│]+vllm[\\s│]+generate[\\s│]+${TEST_ARCHITECTURE}`));
  });

  it("a vLLM deployment gets the directory materialised from S3 into the node's cache, and --quantization for a full-precision checkpoint", async () => {
    const rec = (await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models")).body.data.find(
      (m) => m.name === "ckpt",
    )!;
    await deploy("ckpt", { quantization: "int8" });
    await waitAvailable(stack, "ckpt", 90_000);
    const argv = await started();
    const dir = join(stack.dataDir, "cache", "models", rec.sha256);
    expect(argv.slice(0, 2)).toEqual(["serve", dir]);
    expect(flag(argv, "--quantization")).toBe("fp8");
    expect((await readdir(dir)).sort()).toEqual(rec.manifest!.map((f) => f.path).sort());
    const res = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "ckpt", messages: [{ role: "user", content: "Hi" }] }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe(
      CHAT_REPLY.join(""),
    );
    expect((await stack.admin("DELETE", "/admin/v1/endpoints/ckpt")).status).toBe(200);
  });

  it("a pre-quantized checkpoint is served without --quantization", async () => {
    const rec = await submit("awq", "vllm", `file://${quantized}`);
    expect(rec.checkpoint?.quantization).toBe("awq");
    await deploy("awq", { quantization: "int8" });
    await waitAvailable(stack, "awq", 90_000);
    const argv = await started();
    expect(argv[1]).toBe(join(stack.dataDir, "cache", "models", rec.sha256));
    expect(argv).not.toContain("--quantization");
    expect((await stack.admin("DELETE", "/admin/v1/endpoints/awq")).status).toBe(200);
  });

  it("refuses to register a checkpoint for llama.cpp whose architecture has no converter, naming those there are", async () => {
    const refused = await runCli(
      ["training", "submit", "--name", "ckpt-llama", "--framework", "llamacpp", "--source", plain],
      stack.env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `the architecture "${TEST_ARCHITECTURE}" cannot be converted to GGUF for llama.cpp; supported: BertForMaskedLM, BertModel, LlamaForCausalLM`,
    );
    expect(refused.stderr).toContain("register it with --framework vllm");
    const models = (await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models")).body.data;
    expect(models.some((m) => m.name === "ckpt-llama")).toBe(false);
  });

  it("`platform up --model <dir>` refuses a directory llama.cpp cannot serve before starting anything", async () => {
    await expect(startStack({ model: plain, waitAvailable: false })).rejects.toThrow(
      /platform up exited early \(1\)[\s\S]*cannot be converted to GGUF for llama\.cpp/,
    );
  });

  const convertible =
    supportedArchitectures().includes("LlamaForCausalLM") && existsSync(join(LLAMA_FIXTURE, "config.json"));
  it.skipIf(!convertible)(
    "a Llama checkpoint uploaded with `training submit` is converted once, stored, and generates at temperature 0 what transformers generates",
    async () => {
      const reference = JSON.parse(await readFile(join(LLAMA_FIXTURE, "reference.json"), "utf8")) as {
        prompt: string;
        output_ids: number[];
      };
      const submitted = await runCli(["training", "submit", "--name", "tiny-hf", "--source", LLAMA_FIXTURE], stack.env);
      expect(submitted.code, submitted.stderr).toBe(0);
      expect(submitted.stdout).toMatch(/registered tiny-hf@v1 .*task generate/);
      expect(submitted.stdout).toContain("LlamaForCausalLM · ");
      const list = await runCli(["training", "list"], stack.env);
      expect(list.stdout).toMatch(/tiny-hf[\s│]+v1[\s│]+llamacpp[\s│]+generate[\s│]+LlamaForCausalLM/);
      const rec = (await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models")).body.data.find(
        (m) => m.name === "tiny-hf",
      )!;
      expect(rec.manifest!.map((f) => f.path)).not.toContain("reference.json");

      await deploy("tiny-hf");
      await waitAvailable(stack, "tiny-hf");
      // The conversion is in the artifact store and the node's cache, under the checkpoint's manifest digest, and status says the replica loads it.
      const gguf = join(stack.dataDir, "cache", "models", `${rec.sha256}.model.gguf`);
      expect(existsSync(gguf)).toBe(true);
      expect((await status("tiny-hf")).weights).toEqual(["GGUF converted from the checkpoint (made by this replica)"]);
      const shown = await runCli(["inference", "status", "tiny-hf"], stack.env);
      expect(shown.stdout).toContain("weights: GGUF converted from the checkpoint (made by this replica)");
      const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
      const completion = await client.completions.create({
        model: "tiny-hf",
        prompt: reference.prompt,
        max_tokens: reference.output_ids.length,
        temperature: 0,
      });
      expect(completion.usage?.completion_tokens).toBe(reference.output_ids.length);
      // transformers' ids, as text through the converted model's own tokenizer.
      const m = await openModel(gguf);
      let expected: string;
      try {
        expected = m.model.detokenize(reference.output_ids as Token[]);
      } finally {
        await m.dispose();
      }
      expect(completion.choices[0]!.text).toBe(expected);
      expect(expected.length).toBeGreaterThan(0);
      // The checkpoint's chat template came through the conversion: chat works too.
      const chat = await client.chat.completions.create({
        model: "tiny-hf",
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 8,
        temperature: 0,
      });
      expect(chat.usage?.completion_tokens).toBeGreaterThan(0);
      expect(typeof chat.choices[0]!.message.content).toBe("string");
      expect((await stack.admin("DELETE", "/admin/v1/endpoints/tiny-hf")).status).toBe(200);
    },
  );

  it("a sentence-transformers BERT directory keeps its 1_Pooling/config.json: registered as embed, served with CLS pooling through the openai client", async () => {
    const dir = join(work, "st-bert");
    const fixture = await writeTinyBert(dir, { pooling: "cls", normalize: true, seed: 23 });
    // What sentence-transformers' save() writes besides: its settings, and an empty Normalize module directory.
    await writeFile(
      join(dir, "sentence_bert_config.json"),
      JSON.stringify({ max_seq_length: TINY_BERT.maxPositions, do_lower_case: false }),
    );
    await writeFile(
      join(dir, "config_sentence_transformers.json"),
      JSON.stringify({ __version__: { sentence_transformers: "3.0.1" }, prompts: {}, similarity_fn_name: "cosine" }),
    );
    await mkdir(join(dir, "2_Normalize"));
    const submitted = await runCli(["training", "submit", "--name", "st-bert", "--source", dir], stack.env);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stdout).toContain("task embed");
    const rec = (await stack.admin<{ data: RegisteredVersion[] }>("GET", "/admin/v1/models")).body.data.find(
      (m) => m.name === "st-bert",
    )!;
    expect(rec.manifest!.map((f) => f.path)).toEqual(
      expect.arrayContaining([
        "1_Pooling/config.json",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "config.json",
      ]),
    );

    const deployed = await stack.admin("PUT", "/admin/v1/endpoints/st-bert", {
      model: { name: "st-bert" },
      resources: { replicas: 1, parallel: 1 },
    });
    expect(deployed.status, JSON.stringify(deployed.body)).toBe(200);
    await waitAvailable(stack, "st-bert");
    expect((await status("st-bert")).weights).toEqual(["GGUF converted from the checkpoint (made by this replica)"]);
    // Materialised from S3 with its module subdirectory.
    expect(existsSync(join(stack.dataDir, "cache", "models", rec.sha256, "1_Pooling", "config.json"))).toBe(true);
    const texts = ["The quick brown fox jumped over the lazy dog.", "hello, world!", "once upon a time"];
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: stack.apiKey, maxRetries: 0 });
    const res = await client.embeddings.create({ model: "st-bert", input: texts, encoding_format: "float" });
    expect(res.data).toHaveLength(texts.length);
    texts.forEach((text, i) => {
      const ids = bertInput(text, fixture.vocab);
      const got = res.data[i]!.embedding;
      expect(cosine(got, bertEmbedding(ids, fixture.weights, TINY_BERT, "cls", true)), text).toBeGreaterThanOrEqual(
        0.999,
      );
      // Mean pooling (what a dropped 1_Pooling/config.json would give) is told apart.
      expect(cosine(got, bertEmbedding(ids, fixture.weights, TINY_BERT, "mean", true)), text).toBeLessThan(0.999);
    });
    expect((await stack.admin("DELETE", "/admin/v1/endpoints/st-bert")).status).toBe(200);
  });
});
