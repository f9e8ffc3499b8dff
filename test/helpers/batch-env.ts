/**
 * What the batch suites share: a real S3-compatible server (s3rver, in this
 * process), batch coordinators as child processes (so they can be SIGKILLed),
 * and waiting for a job to reach a state.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type { BatchJobs } from "../../src/batch/index.ts";
import type { BatchJob } from "../../src/batch/record.ts";
import type { S3Settings } from "../../src/storage/index.ts";
import { readUntil, sleep } from "./wait.ts";

type S3rverInstance = { run(): Promise<{ port: number }>; close(): Promise<void> };
type S3rverOptions = {
  address: string;
  port: number;
  silent: boolean;
  directory: string;
  configureBuckets: { name: string; configs: string[] }[];
};
const S3rver = createRequire(import.meta.url)("s3rver") as new (options: S3rverOptions) => S3rverInstance;

export type S3Server = { settings: S3Settings; env: NodeJS.ProcessEnv; close: () => Promise<void> };

export async function startS3(directory: string, bucket: string): Promise<S3Server> {
  const server = new S3rver({
    address: "127.0.0.1",
    port: 0,
    silent: true,
    directory,
    configureBuckets: [{ name: bucket, configs: [] }],
  });
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    settings: { region: "us-east-1", endpoint, forcePathStyle: true, accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
    env: {
      AWS_ENDPOINT_URL_S3: endpoint,
      AWS_REGION: "us-east-1",
      AWS_ACCESS_KEY_ID: "S3RVER",
      AWS_SECRET_ACCESS_KEY: "S3RVER",
      PLATFORM_S3_FORCE_PATH_STYLE: "true",
    },
    close: () => server.close(),
  };
}

const COORDINATOR = fileURLToPath(new URL("./coordinator-process.ts", import.meta.url));

export type CoordinatorProcess = {
  process: ChildProcess;
  output: () => string;
  kill: () => Promise<void>;
  stop: () => Promise<void>;
};

export async function spawnCoordinator(env: NodeJS.ProcessEnv): Promise<CoordinatorProcess> {
  const child = spawn(process.execPath, [COORDINATOR], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const t0 = Date.now();
  while (!out.includes("coordinator ready")) {
    if (child.exitCode !== null) throw new Error(`coordinator exited early:\n${out}`);
    if (Date.now() - t0 > 30_000) throw new Error(`coordinator did not start:\n${out}`);
    await sleep(50);
  }
  return {
    process: child,
    output: () => out,
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

export async function waitForJob(
  jobs: BatchJobs,
  id: string,
  until: (job: BatchJob) => boolean = (job) => ["completed", "failed", "cancelled"].includes(job.state),
  timeoutMs = 120_000,
): Promise<BatchJob> {
  return readUntil(`batch job ${id} to get there`, () => jobs.get(id), until, timeoutMs);
}
