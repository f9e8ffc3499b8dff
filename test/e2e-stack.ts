/**
 * The e2e tier's global setup: one `platform up` the files share (test/helpers/shared-stack.ts),
 * started before the first file and stopped after the last, and beside it a second one whose
 * artifact store is in S3 (s3rver, run here), for the files that test that store. Files keep apart
 * by the names they give their models, endpoints, organizations and keys; a file that needs a stack
 * of its own (other settings, signals, a Redis it kills) still starts one with `startStack`.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { TestProject } from "vitest/node";
import type { S3Settings } from "../src/storage/index.ts";
import { startS3 } from "./helpers/batch-env.ts";
import { fakeVllmPath, writeFakeVllmBin } from "./helpers/fake-vllm.ts";
import { referencePython, sharedModelPath } from "./helpers/models.ts";
import { type OwnStack, type StackHandle, startStack } from "./helpers/stack.ts";

declare module "vitest" {
  export interface ProvidedContext {
    sharedStack: StackHandle;
    /** Where the vLLM stand-in records its starts (and, beside it, the requests it got). */
    fakeVllmRecord: string;
    /** The stack whose artifact store is `s3://<s3Bucket>/artifacts` on the s3rver at `s3`. */
    s3Stack: StackHandle;
    s3: S3Settings;
    s3Bucket: string;
    /** The S3 stack's vLLM stand-in's record. */
    s3FakeVllmRecord: string;
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

/** The S3 stack's bucket: its artifacts under `artifacts/`, anything else a file puts beside them. */
const S3_BUCKET = "platform-e2e";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const logDir = await mkdtemp(join(tmpdir(), "platform-shared-stack-"));
  const logFile = join(logDir, "up.log");
  const s3LogFile = join(logDir, "up-s3.log");
  const real = sharedModelPath();
  // vllm-path.test.ts: vLLM endpoints' workers start the stand-in (test/helpers/fake-vllm.ts).
  const fakeVllmRecord = join(logDir, "vllm-record.json");
  const s3FakeVllmRecord = join(logDir, "vllm-record-s3.json");
  const vllmBin = await writeFakeVllmBin(logDir);
  const s3 = await startS3(join(logDir, "s3rver"), S3_BUCKET);
  const started = await Promise.allSettled([
    startStack({
      // The OS temp dir holds the tiny models and what files write; ../shared the real model.
      args: ["--storage-root", tmpdir(), ...(real ? ["--storage-root", dirname(real)] : [])],
      env: { ...SETTINGS, VLLM_BIN: vllmBin, FAKE_VLLM_RECORD: fakeVllmRecord },
      logFile,
    }),
    // adapters.test.ts and model-directories.test.ts: models kept in S3, as a cluster keeps them.
    startStack({
      env: {
        ...s3.env,
        PLATFORM_ARTIFACTS_URL: `s3://${S3_BUCKET}/artifacts`,
        VLLM_BIN: vllmBin,
        FAKE_VLLM_RECORD: s3FakeVllmRecord,
        PATH: fakeVllmPath(),
      },
      logFile: s3LogFile,
    }),
  ]);
  const stacks = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const stopAll = async () => {
    const codes = await Promise.all(stacks.map((st) => st.stop()));
    await s3.close();
    return codes;
  };
  const failed = started.find((r) => r.status === "rejected");
  if (failed) {
    await stopAll();
    throw (failed as PromiseRejectedResult).reason;
  }
  const [shared, s3Stack] = stacks as [OwnStack, OwnStack];
  const handle = (st: OwnStack, file: string): StackHandle => {
    const { baseUrl, metricsUrl, apiKey, redisUrl, dataDir, env } = st;
    return { baseUrl, metricsUrl, apiKey, redisUrl, dataDir, env, logFile: file };
  };
  project.provide("sharedStack", handle(shared, logFile));
  project.provide("fakeVllmRecord", fakeVllmRecord);
  project.provide("s3Stack", handle(s3Stack, s3LogFile));
  project.provide("s3", s3.settings);
  project.provide("s3Bucket", S3_BUCKET);
  project.provide("s3FakeVllmRecord", s3FakeVllmRecord);
  return async () => {
    const codes = await stopAll();
    for (const [i, st] of [shared, s3Stack].entries())
      if (codes[i] !== 0) throw new Error(`a shared platform up exited with ${codes[i]}:\n${st.output().slice(-4000)}`);
  };
}
