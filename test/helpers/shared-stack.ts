/**
 * The `platform up` the e2e files share (started by test/e2e-stack.ts). A file gets it with
 * `sharedStack()`, with a CLI config dir of its own, and keeps to names of its own: `unique(...)`
 * makes them. Its models may live anywhere under the OS temp dir, a storage root of the stack.
 */
import { readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inject } from "vitest";
import { attach, type Stack } from "./stack.ts";

export async function sharedStack(): Promise<Stack> {
  const handle = inject("sharedStack");
  const config = await mkdtemp(join(tmpdir(), "platform-cli-"));
  const logFile = handle.logFile as string;
  const stack = attach(handle, () => readFileSync(logFile, "utf8"));
  return { ...stack, env: { ...stack.env, PLATFORM_CONFIG_DIR: config } };
}

/** A name no other file on the shared stack uses: `prefix` and a few random letters. */
export function unique(prefix: string): string {
  return `${prefix}-${Math.random().toString(36).slice(2, 7)}`;
}
