/**
 * The `platform up`s the e2e files share (started by test/e2e-stack.ts). A file gets the main one with
 * `sharedStack()`, with a CLI config dir of its own, and keeps to names of its own: `unique(...)`
 * makes them. Its models may live anywhere under the OS temp dir, a storage root of the stack.
 */
import { readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inject } from "vitest";
import type { S3Settings } from "../../src/storage/index.ts";
import { attach, type Stack, type StackHandle } from "./stack.ts";

export function sharedStack(): Promise<Stack> {
  return attachShared(inject("sharedStack"));
}

/**
 * The shared stack whose artifact store is in S3 (`s3://<bucket>/artifacts` on the s3rver the
 * setup runs): for the files that test that store. `s3`: how to reach the server; `bucket`: its bucket.
 */
export async function s3Stack(): Promise<{ stack: Stack; s3: S3Settings; bucket: string; fakeVllmRecord: string }> {
  return {
    stack: await attachShared(inject("s3Stack")),
    s3: inject("s3"),
    bucket: inject("s3Bucket"),
    fakeVllmRecord: inject("s3FakeVllmRecord"),
  };
}

async function attachShared(handle: StackHandle): Promise<Stack> {
  const config = await mkdtemp(join(tmpdir(), "platform-cli-"));
  const logFile = handle.logFile as string;
  const stack = attach(handle, () => readFileSync(logFile, "utf8"));
  return { ...stack, env: { ...stack.env, PLATFORM_CONFIG_DIR: config } };
}

/** A name no other file on the shared stack uses: `prefix` and a few random letters. */
export function unique(prefix: string): string {
  return `${prefix}-${Math.random().toString(36).slice(2, 7)}`;
}
