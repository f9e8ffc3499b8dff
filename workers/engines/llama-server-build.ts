/**
 * llama-server built from the llama.cpp source node-llama-cpp ships (its git bundle: no network),
 * for this CPU (GGML_NATIVE), at the lowest CPU priority: the decoder of PLATFORM_LLAMA_ENGINE=server
 * (llama-server.ts) and the serving benchmark's peer. Kept in the engine directory, named by the
 * llama.cpp release and this CPU, so a build is made once per machine kind and version.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { EngineSettings } from "../../src/settings/engine.ts";
import { BUNDLE_PATH, cpuKey, llamaCppTag, missingBuildTool } from "./llamacpp-binary.ts";

/** Where this CPU's llama-server build is kept in `engineDir`. */
export function llamaServerHome(engineDir: string, cpu = cpuKey()): string {
  return join(engineDir, "llama-server", `${llamaCppTag()}-${cpu}`);
}

/** The executable PLATFORM_LLAMA_ENGINE=server runs: the setting's, else the engine directory's build. */
export function llamaServerBin(settings: Pick<EngineSettings, "dir" | "llamaServerBin">): string {
  return settings.llamaServerBin ?? join(llamaServerHome(settings.dir), "llama-server");
}

function run(cmd: string, args: string[], log: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("nice", ["-n", "19", cmd, ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d: Buffer) => {
      err = (err + d.toString()).slice(-4000);
    });
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${args.slice(0, 2).join(" ")} … exited ${code}: ${err}`)),
    );
    log(`${cmd} ${args.slice(0, 2).join(" ")} …`);
  });
}

/**
 * Builds llama-server into `home` (default: the engine directory's place for this CPU), replacing
 * an earlier build there; only the executable is kept, not cmake's tree.
 */
export async function buildLlamaServer(
  settings: Pick<EngineSettings, "dir">,
  log: (line: string) => void = () => undefined,
  home = llamaServerHome(settings.dir),
): Promise<{ path: string; seconds: number; llamaCpp: string }> {
  const missing = missingBuildTool();
  if (missing)
    throw new Error(
      `${missing} is not installed: building llama-server needs cmake, git and a C++ compiler (Debian/Ubuntu: apt-get install cmake git g++ make)`,
    );
  const started = Date.now();
  const work = `${home}.build-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  try {
    const src = join(work, "src");
    await run("git", ["clone", "--quiet", BUNDLE_PATH, src], log);
    const build = join(work, "build");
    await run(
      "cmake",
      [
        ...["-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF"],
        ...[
          "-DLLAMA_BUILD_TESTS=OFF",
          "-DLLAMA_BUILD_EXAMPLES=OFF",
          "-DLLAMA_BUILD_SERVER=ON",
          "-DBUILD_SHARED_LIBS=OFF",
        ],
      ],
      log,
    );
    await run("cmake", ["--build", build, "--target", "llama-server", "-j", "2"], log);
    const bin = join(build, "bin", "llama-server");
    if (!existsSync(bin)) throw new Error(`the build finished without ${bin}`);
    await mkdir(home, { recursive: true });
    await copyFile(bin, join(home, "llama-server"));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return {
    path: join(home, "llama-server"),
    seconds: Math.round((Date.now() - started) / 1000),
    llamaCpp: llamaCppTag(),
  };
}

/** Whether a CPU replica decodes in a llama-server child under `settings` (PLATFORM_LLAMA_ENGINE): auto asks for the executable. */
export function wantsServer(settings: Pick<EngineSettings, "dir" | "llamaEngine" | "llamaServerBin">): boolean {
  return settings.llamaEngine === "server" || (settings.llamaEngine === "auto" && existsSync(llamaServerBin(settings)));
}

/** One line for `platform up` and `platform engine status`: where CPU replicas decode (PLATFORM_LLAMA_ENGINE). */
export function decoderNote(settings: Pick<EngineSettings, "dir" | "llamaEngine" | "llamaServerBin">): string {
  const bin = llamaServerBin(settings);
  if (settings.llamaEngine === "binding") return "in the replica's process (PLATFORM_LLAMA_ENGINE=binding)";
  if (existsSync(bin)) return `in a llama-server child (${bin})`;
  return settings.llamaEngine === "auto"
    ? "in the replica's process: no llama-server is built here (`platform engine build --server` makes one, which replicas then use)"
    : `PLATFORM_LLAMA_ENGINE=server, but there is no llama-server at ${bin}: \`platform engine build --server\` or PLATFORM_LLAMA_SERVER_BIN`;
}
