/**
 * llama-server built from the llama.cpp source node-llama-cpp ships (its gitRelease.bundle), for
 * the serving benchmark's peer: the same llama.cpp version as the platform's engine, built for
 * this CPU (GGML_NATIVE). Built once, under `nice` (other work shares small machines), and cached
 * outside the checkout (PLATFORM_BENCH_CACHE, default ~/.cache/platform-bench); skipped, saying
 * why, where cmake or a C++ compiler is missing.
 */
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildLlamaServer } from "../workers/engines/llama-server-build.ts";
import { llamaCppTag, missingBuildTool } from "../workers/engines/llamacpp-binary.ts";

export function benchCache(): string {
  return process.env.PLATFORM_BENCH_CACHE ?? join(homedir(), ".cache", "platform-bench");
}

/** The llama-server executable, built on first use; `{ skipped }` says why there is none. */
export async function llamaServer(log: (line: string) => void = console.error): Promise<string | { skipped: string }> {
  const tag = llamaCppTag();
  const home = join(benchCache(), `llama-server-${tag}-native`);
  const bin = join(home, "llama-server");
  if (existsSync(bin)) return bin;
  // Another run building it now: wait for that one rather than start over.
  const lock = `${home}.building`;
  const builder = Number(await readFile(lock, "utf8").catch(() => "0"));
  if (builder > 0 && alive(builder)) {
    log(`llama-server is being built by process ${builder}; waiting for it`);
    while (alive(builder) && !existsSync(bin)) await new Promise((r) => setTimeout(r, 5000));
    return existsSync(bin) ? bin : { skipped: `process ${builder} did not finish building ${bin}` };
  }
  const missing = missingBuildTool();
  if (missing)
    return { skipped: `${missing} is not installed: llama-server cannot be built from node-llama-cpp's source` };
  log(`building llama-server ${tag} from node-llama-cpp's bundled source into ${home} (once; ~10 minutes on 2 cores)`);
  await mkdir(benchCache(), { recursive: true });
  await writeFile(lock, String(process.pid));
  try {
    await buildLlamaServer({ dir: benchCache() }, log, home);
  } finally {
    await rm(lock, { force: true });
  }
  return bin;
}
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(await llamaServer());
