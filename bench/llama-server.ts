/**
 * llama-server built from the llama.cpp source node-llama-cpp ships (its gitRelease.bundle), for
 * the serving benchmark's peer: the same llama.cpp version as the platform's engine, built for
 * this CPU (GGML_NATIVE). Built once, under `nice` (other work shares small machines), and cached
 * outside the checkout (PLATFORM_BENCH_CACHE, default ~/.cache/platform-bench); skipped, saying
 * why, where cmake or a C++ compiler is missing.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const LLAMA_DIR = fileURLToPath(new URL("../node_modules/node-llama-cpp/llama/", import.meta.url));

export function benchCache(): string {
  return process.env.PLATFORM_BENCH_CACHE ?? join(homedir(), ".cache", "platform-bench");
}

function run(cmd: string, args: string[], cwd?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("nice", ["-n", "19", cmd, ...args], { cwd, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d: Buffer) => {
      err = (err + d.toString()).slice(-4000);
    });
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(" ")} exited ${code}: ${err}`)),
    );
  });
}

/** The llama-server executable, built on first use; `{ skipped }` says why there is none. */
export async function llamaServer(log: (line: string) => void = console.error): Promise<string | { skipped: string }> {
  const tag = (JSON.parse(readFileSync(join(LLAMA_DIR, "llama.cpp.info.json"), "utf8")) as { tag: string }).tag;
  const dir = join(benchCache(), `llama-server-${tag}-native`);
  const bin = join(dir, "build", "bin", "llama-server");
  if (existsSync(bin)) return bin;
  // Another run building it now: wait for that one rather than start over.
  const lock = `${dir}.building`;
  const builder = Number(await readFile(lock, "utf8").catch(() => "0"));
  if (builder > 0 && alive(builder)) {
    log(`llama-server is being built by process ${builder}; waiting for it`);
    while (alive(builder) && !existsSync(bin)) await new Promise((r) => setTimeout(r, 5000));
    return existsSync(bin) ? bin : { skipped: `process ${builder} did not finish building ${bin}` };
  }
  for (const tool of ["cmake", "git", "c++"])
    if (spawnSync(tool, ["--version"], { stdio: "ignore" }).status !== 0)
      return { skipped: `${tool} is not installed: llama-server cannot be built from node-llama-cpp's source` };
  log(`building llama-server ${tag} from node-llama-cpp's bundled source into ${dir} (once; ~10 minutes on 2 cores)`);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  await writeFile(lock, String(process.pid));
  const src = join(dir, "src");
  await run("git", ["clone", "--quiet", join(LLAMA_DIR, "gitRelease.bundle"), src]);
  await run("cmake", [
    "-S",
    src,
    "-B",
    join(dir, "build"),
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",
  ]);
  await run("cmake", ["--build", join(dir, "build"), "--target", "llama-server", "-j", "2"]);
  await rm(lock, { force: true });
  if (!existsSync(bin)) return { skipped: `the build finished without ${bin}` };
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
