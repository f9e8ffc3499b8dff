/**
 * `platform inference deploy --quantization` on the shared `platform up` stack: the replica quantizes the
 * registered F32 model with the platform's own quantizer, caches the copy in the artifact store,
 * becomes available and answers; `status` no longer lists quantization as not applied; a model
 * that is already quantized to another type is refused at deploy time.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGgufInfo } from "../../src/formats/gguf/read.ts";
import { quantizeGguf } from "../../src/formats/quantize/file.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack, waitAvailable } from "../helpers/stack.ts";

const MODEL = unique("tiny");
const Q4 = `${MODEL}-q4`;
const Q8 = `${MODEL}-q8`;

let stack: Stack;
let work: string;
let sha256: string;

beforeAll(async () => {
  stack = await sharedStack();
  work = await mkdtemp(join(tmpdir(), "platform-quantize-e2e-"));
  const submit = await runCli(
    // A tiny model of a context length no other file uses: the quantized copies are kept under the
    // source's sha256, and other files on the shared stack quantize the default tiny model too.
    ["training", "submit", "--name", MODEL, "--framework", "llamacpp", "--source", await source(), "--json"],
    stack.env,
  );
  expect(submit.code, submit.stderr).toBe(0);
  sha256 = JSON.parse(submit.stdout).sha256;
});

afterAll(async () => {
  await undeploy(stack, MODEL, Q4, Q8);
  if (work) await rm(work, { recursive: true, force: true });
});

const source = () => tinyModelPath({ contextLength: 1024 });

type Status = { state: string; not_applied: string[]; errors: string[] };

async function completion(model: string): Promise<{ status: number; text: string; tokens: number }> {
  const res = await fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 }),
  });
  const body = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number } };
  return { status: res.status, text: body.choices?.[0]?.text ?? "", tokens: body.usage?.completion_tokens ?? 0 };
}

describe("deploy --quantization on llama.cpp", () => {
  it("int8: the endpoint becomes available on a Q8_0 copy and answers; quantization counts as applied", async () => {
    const deploy = await runCli(
      ["inference", "deploy", "--model", MODEL, "--quantization", "int8", "--json"],
      stack.env,
    );
    expect(deploy.code, deploy.stderr).toBe(0);
    expect(JSON.parse(deploy.stdout).config.runtime.quantization).toBe("int8");
    await waitAvailable(stack, MODEL);

    const answer = await completion(MODEL);
    expect(answer.status).toBe(200);
    expect(answer.tokens).toBe(8);
    expect(answer.text.trim().length).toBeGreaterThan(0);

    const status = JSON.parse((await runCli(["inference", "status", MODEL, "--json"], stack.env)).stdout) as Status;
    expect(status.not_applied).not.toContain("runtime.quantization");
    const table = await runCli(["inference", "status", MODEL], stack.env);
    expect(table.stdout).not.toMatch(/not applied/);

    // Made once, kept in the artifact store under the source's sha256.
    const cached = join(stack.dataDir, "artifacts", "quantized", sha256);
    expect(await readdir(cached)).toEqual(["Q8_0.gguf"]);
    const info = await readGgufInfo(join(cached, "Q8_0.gguf"));
    expect(info.metadata.get("general.file_type")).toEqual({ type: "uint32", value: 7 });
    // The replica says what it did, in its own log.
    const log = new RegExp(`replica ${MODEL}-\\S+ starting .*log (\\S+\\.log)\\)`).exec(stack.output())?.[1];
    expect(log, stack.output()).toBeDefined();
    expect(await readFile(log!, "utf8")).toMatch(/int8 model \(produced: \d+ of \d+ tensors to Q8_0/);
  });

  it("int4 from a YAML file on a second endpoint of the same model", async () => {
    const yaml = join(work, "q4.yaml");
    await writeFile(
      yaml,
      [
        `endpoint: ${Q4}`,
        "model:",
        `  name: ${MODEL}`,
        "runtime:",
        "  quantization: int4",
        "resources:",
        "  replicas: 1",
        "",
      ].join("\n"),
    );
    const deploy = await runCli(["inference", "deploy", "--config", yaml], stack.env);
    expect(deploy.code, deploy.stderr).toBe(0);
    await waitAvailable(stack, Q4);
    expect((await completion(Q4)).tokens).toBe(8);
    expect((await readdir(join(stack.dataDir, "artifacts", "quantized", sha256))).sort()).toEqual([
      "Q4_0.gguf",
      "Q8_0.gguf",
    ]);
  });

  it("each quantization has a queue of its own, so one endpoint's replicas never answer the other's requests", async () => {
    const redis = new Redis(stack.redisUrl, { lazyConnect: true });
    try {
      const queues = new Set(
        (await redis.keys(`platform:{${MODEL}@v1*`)).map((k) => /^platform:(\{[^}]*\})/.exec(k)?.[1]),
      );
      // Both endpoints serve the model's v1; their requests and replicas met only on their own queues.
      expect([...queues].sort()).toEqual([`{${MODEL}@v1~int4}`, `{${MODEL}@v1~int8}`]);
    } finally {
      redis.disconnect();
    }
  });

  it("refuses at deploy time a model already quantized to another type", async () => {
    const q8 = join(work, "tiny-q8.gguf");
    await quantizeGguf(await source(), q8, "int8");
    const submit = await runCli(["training", "submit", "--name", Q8, "--source", q8, "--json"], stack.env);
    expect(submit.code, submit.stderr).toBe(0);
    expect(JSON.parse(submit.stdout).gguf.quantization).toBe("Q8_0");
    const refused = await runCli(
      ["inference", "deploy", "--model", Q8, "--quantization", "int4", "--replicas", "0"],
      stack.env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/runtime\.quantization: the model is already quantized \(Q8_0\)/);
    const same = await runCli(
      ["inference", "deploy", "--model", Q8, "--quantization", "int8", "--replicas", "0"],
      stack.env,
    );
    expect(same.code, same.stderr).toBe(0);
  });
});
