// Model files for tests: the shared real model when this checkout has one, and a
// self-made tiny model that is always available.
import { spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TinyLlamaOptions } from "../fixtures/tiny-llama.ts";
import { writeTinyLlamaGguf } from "../fixtures/tiny-llama.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

/** The real stories260K model, or undefined where ../shared is absent. */
export function sharedModelPath(): string | undefined {
  const fromEnv = process.env.PLATFORM_TEST_MODEL;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const candidate = join(repoRoot, "..", "shared", "models", "stories260K", "stories260K.gguf");
  return existsSync(candidate) ? candidate : undefined;
}

const pending = new Map<string, Promise<string>>();

/**
 * Path of a tiny llama GGUF built by test/fixtures/tiny-llama.ts. Files are cached
 * under the OS temp dir, keyed by the options and by the generator's own source,
 * so editing the generator never serves a stale model.
 */
export function tinyModelPath(options: TinyLlamaOptions = {}): Promise<string> {
  const key = JSON.stringify([options.chatTemplate ?? null, options.seed ?? null, options.contextLength ?? null]);
  let result = pending.get(key);
  if (result === undefined) {
    result = buildCached(key, options);
    // A failed build should be retried by the next caller, not remembered.
    result.catch(() => pending.delete(key));
    pending.set(key, result);
  }
  return result;
}

async function buildCached(key: string, options: TinyLlamaOptions): Promise<string> {
  const hash = createHash("sha256").update(key);
  for (const source of [
    "../fixtures/tiny-llama.ts",
    "../../src/formats/gguf/format.ts",
    "../../src/formats/gguf/write.ts",
  ]) {
    hash.update(await readFile(new URL(source, import.meta.url)));
  }
  const dir = join(tmpdir(), "platform-test-models");
  const path = join(dir, `tiny-llama-${hash.digest("hex").slice(0, 16)}.gguf`);
  if (existsSync(path)) return path;

  await mkdir(dir, { recursive: true });
  // Parallel test processes may build the same file: each writes its own temp
  // file and renames it into place, so no reader ever sees a partial model.
  const temp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  try {
    await writeTinyLlamaGguf(temp, options);
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  return path;
}

/**
 * The Python with the reference stack (torch, transformers, tokenizers, gguf, safetensors), for the
 * tests that check the platform against transformers: PLATFORM_TEST_PYTHON_REF, else the checkout's
 * `.venv-ref` (made by scripts/reference/setup.sh, which .ci/run calls); undefined where neither exists.
 */
export function referencePython(): string | undefined {
  const fromEnv = process.env.PLATFORM_TEST_PYTHON_REF;
  if (fromEnv !== undefined && fromEnv !== "") return existsSync(fromEnv) ? fromEnv : undefined;
  const venv = join(repoRoot, ".venv-ref", "bin", "python");
  return existsSync(venv) ? venv : undefined;
}

/**
 * The reference Python where it can run the image engine (torch, diffusers, transformers, PIL);
 * otherwise undefined, and a line saying that `test` skips.
 */
export function diffusersPython(test: string): string | undefined {
  const python = referencePython();
  const usable =
    python !== undefined &&
    spawnSync(python, ["-c", "import torch, diffusers, transformers, PIL"], { stdio: "ignore", timeout: 180_000 })
      .status === 0;
  if (usable) return python;
  console.warn(
    `${test}: skipped: no Python with torch and diffusers (.venv-ref or PLATFORM_TEST_PYTHON_REF; \`npm run setup:python\` makes it)`,
  );
  return undefined;
}

/** Makes the tiny random Stable Diffusion pipeline (64×64) at `dir` with diffusers itself. */
export function makeTinyPipeline(python: string, dir: string): void {
  const made = spawnSync(python, [join(repoRoot, "scripts/reference/make-tiny-diffusers.py"), dir], {
    encoding: "utf8",
    timeout: 300_000,
  });
  if (made.status !== 0) throw new Error(`make-tiny-diffusers failed (${made.status}):\n${made.stderr.slice(-3000)}`);
}
