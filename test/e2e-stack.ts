/**
 * The e2e tier's global setup: one `platform up` the files share (test/helpers/shared-stack.ts),
 * started before the first file and stopped after the last. Files keep apart by the names they
 * give their models, endpoints, organizations and keys; a file that needs a stack of its own (other
 * settings, signals, a Redis it kills) still starts one with `startStack`.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { TestProject } from "vitest/node";
import { writeFakeVllmBin } from "./helpers/fake-vllm.ts";
import { referencePython, sharedModelPath } from "./helpers/models.ts";
import { type StackHandle, startStack } from "./helpers/stack.ts";

declare module "vitest" {
  export interface ProvidedContext {
    sharedStack: StackHandle;
    /** Where the vLLM stand-in records its starts (and, beside it, the requests it got). */
    fakeVllmRecord: string;
  }
}

const PYTHON = referencePython();

/** Settings beside the defaults: what some files need and none of the others notice. */
const SETTINGS: NodeJS.ProcessEnv = {
  // cli.test.ts imports a model from an HTTP server on loopback.
  PLATFORM_SOURCES_ALLOW_HTTP: "true",
  PLATFORM_SOURCES_ALLOW_PRIVATE: "true",
  // worker-metrics.test.ts scrapes a worker's own /metrics.
  PLATFORM_WORKER_METRICS: "true",
  // images-platform.test.ts and lifecycle.test.ts: the picture engine and the trainer run on the
  // reference venv the tests compare with (by default the checkout's .venv-ref, which
  // PLATFORM_TEST_PYTHON_REF may replace).
  ...(PYTHON ? { PLATFORM_IMAGES_PYTHON: PYTHON, PLATFORM_TRAINER_PYTHON: PYTHON } : {}),
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const logDir = await mkdtemp(join(tmpdir(), "platform-shared-stack-"));
  const logFile = join(logDir, "up.log");
  const real = sharedModelPath();
  // vllm-path.test.ts: vLLM endpoints' workers start the stand-in (test/helpers/fake-vllm.ts).
  const fakeVllmRecord = join(logDir, "vllm-record.json");
  const stack = await startStack({
    // The OS temp dir holds the tiny models and what files write; ../shared the real model.
    args: ["--storage-root", tmpdir(), ...(real ? ["--storage-root", dirname(real)] : [])],
    env: { ...SETTINGS, VLLM_BIN: await writeFakeVllmBin(logDir), FAKE_VLLM_RECORD: fakeVllmRecord },
    logFile,
  });
  const { baseUrl, metricsUrl, apiKey, redisUrl, dataDir, env } = stack;
  project.provide("sharedStack", { baseUrl, metricsUrl, apiKey, redisUrl, dataDir, env, logFile });
  project.provide("fakeVllmRecord", fakeVllmRecord);
  return async () => {
    const code = await stack.stop();
    if (code !== 0) throw new Error(`the shared platform up exited with ${code}:\n${stack.output().slice(-4000)}`);
  };
}
