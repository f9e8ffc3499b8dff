/**
 * Which llama.cpp binary a CPU replica loads: one built here from the source node-llama-cpp
 * bundles, for this CPU (`platform engine build`; prompts ~1.5× faster than the prebuilt binary
 * on the issue-39 machine), or the prebuilt one node-llama-cpp ships, as the fallback.
 *
 * A build is kept under the engine directory (PLATFORM_ENGINE_DIR, default <data dir>/engines),
 * one folder per node-llama-cpp version and CPU, and node-llama-cpp's own local-build folder links
 * to it, because that folder is where its loader looks. The CPU is named by a hash of its
 * architecture and instruction-set flags, passed to the build as a cmake variable: node-llama-cpp
 * names a local build by its cmake options, so on another CPU (an image built elsewhere, a data
 * directory shared between machines) the lookup finds nothing and the prebuilt binary loads,
 * rather than a binary whose instructions this CPU lacks (SIGILL). docs/engines.md, "A build
 * for this CPU". This file chooses without loading node-llama-cpp (`up` and doctor ask it too);
 * llamacpp-build.ts loads and builds.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { lstat, mkdir, readdir, readFile, readlink, rm, symlink } from "node:fs/promises";
import { createRequire } from "node:module";
import { arch, cpus, platform } from "node:os";
import { basename, dirname, join } from "node:path";
import type { EngineSettings } from "../../src/settings/engine.ts";

/** node-llama-cpp's package folder: its local builds live in llama/localBuilds. */
const PACKAGE_DIR = dirname(dirname(createRequire(import.meta.url).resolve("node-llama-cpp")));
const PACKAGE_VERSION = (JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8")) as { version: string })
  .version;
/** The bundled llama.cpp's release; read when asked, since a build in progress rewrites the file (briefly absent). */
export function llamaCppTag(): string {
  try {
    return (JSON.parse(readFileSync(join(PACKAGE_DIR, "llama", "llama.cpp.info.json"), "utf8")) as { tag: string }).tag;
  } catch {
    return "unknown";
  }
}
/** The llama.cpp source node-llama-cpp ships, as a git bundle (builds need no network). */
export const BUNDLE_PATH = join(PACKAGE_DIR, "llama", "gitRelease.bundle");
/** Where node-llama-cpp's loader looks for local builds (not configurable in the library). */
export const LOCAL_BUILDS_DIR = join(PACKAGE_DIR, "llama", "localBuilds");
/** The cmake variable that carries the CPU's name; llama.cpp ignores it, node-llama-cpp names the build by it. */
export const CPU_VARIABLE = "PLATFORM_CPU";

/** Where a place's paths are, so tests can point them at a scratch directory. */
export type BinaryPlaces = { engineDir: string; localBuildsDir?: string; cpu?: string };

export type BinaryChoice = {
  /** native: built here for this CPU; prebuilt: node-llama-cpp's shipped binary. */
  binary: "native" | "prebuilt";
  /** One line for logs and `platform doctor`: which, and why. */
  note: string;
  /** The native build's folder, when one is there for this CPU. */
  path?: string;
};

/** This CPU's name for builds: its architecture and instruction-set flags (/proc/cpuinfo), hashed. */
export function cpuKey(cpuinfo: string | undefined = readCpuinfo()): string {
  const flags = /^(?:flags|Features)\s*:\s*(.*)$/m.exec(cpuinfo ?? "")?.[1];
  const what = flags ? flags.trim().split(/\s+/).sort().join(" ") : (cpus()[0]?.model ?? "unknown");
  return createHash("sha256").update(`${platform()}-${arch()}:${what}`).digest("hex").slice(0, 16);
}

function readCpuinfo(): string | undefined {
  try {
    return readFileSync("/proc/cpuinfo", "utf8");
  } catch {
    return undefined;
  }
}

/** The cmake options a native build is made with, and looked up by. */
export function nativeCmakeOptions(cpu: string): Record<string, string> {
  return { GGML_NATIVE: "ON", [CPU_VARIABLE]: cpu };
}

/** This node-llama-cpp version's builds under the engine directory. */
export function buildsHome(engineDir: string): string {
  return join(engineDir, "llama.cpp", `node-llama-cpp-${PACKAGE_VERSION}`);
}

/** The folder (node-llama-cpp's name for it) whose build names `cpu`, in `dir`; complete builds only. */
export async function buildFor(dir: string, cpu: string): Promise<string | undefined> {
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const name of names) {
    const folder = join(dir, name);
    if (!existsSync(join(folder, "buildDone.status"))) continue;
    const metadata = await readFile(join(folder, "Release", "_nlcBuildMetadata.json"), "utf8").catch(() => "");
    try {
      const options = (JSON.parse(metadata) as { buildOptions?: { customCmakeOptions?: Record<string, string> } })
        .buildOptions?.customCmakeOptions;
      if (options?.[CPU_VARIABLE] === cpu && existsSync(join(folder, "Release", "llama-addon.node"))) return name;
    } catch {
      // Not a build of ours (or a half-written one): skipped.
    }
  }
  return undefined;
}

/** Which binary a replica here would load under `settings`, without loading it (doctor, `up`, the worker). */
export async function chooseBinary(
  settings: Pick<EngineSettings, "llamaBuild" | "dir">,
  places?: Partial<BinaryPlaces>,
): Promise<BinaryChoice> {
  const engineDir = places?.engineDir ?? settings.dir;
  const home = buildsHome(engineDir);
  if (settings.llamaBuild === "prebuilt")
    return { binary: "prebuilt", note: "the prebuilt binary (PLATFORM_LLAMA_BUILD=prebuilt)" };
  const cpu = places?.cpu ?? cpuKey();
  const name = await buildFor(home, cpu);
  if (name) return { binary: "native", note: `built for this CPU (${join(home, name)})`, path: join(home, name) };
  const why = `no build for this CPU in ${home}: \`platform engine build\` makes one (cmake, a C++ compiler, ~10-30 minutes)`;
  if (settings.llamaBuild === "native")
    throw new Error(`PLATFORM_LLAMA_BUILD=native, but there is ${why}; or set PLATFORM_LLAMA_BUILD=auto to fall back`);
  return { binary: "prebuilt", note: `the prebuilt binary (${why})` };
}

/**
 * Makes node-llama-cpp's local-build entry for `build` a link to it (after `npm ci` replaced the
 * package folder, say); false where that folder cannot be written (a read-only install).
 */
export async function linkBuild(build: string, localBuildsDir = LOCAL_BUILDS_DIR): Promise<boolean> {
  const link = join(localBuildsDir, basename(build));
  const there = await lstat(link).catch(() => undefined);
  if (there?.isSymbolicLink() && (await readlink(link)) === build) return true;
  try {
    await mkdir(localBuildsDir, { recursive: true });
    await rm(link, { recursive: true, force: true });
    await symlink(build, link, "dir");
    return true;
  } catch {
    return false;
  }
}

/** What a build needs on PATH; the first missing one, or none. */
export function missingBuildTool(): string | undefined {
  return ["cmake", "git", "c++"].find((tool) => spawnSync(tool, ["--version"], { stdio: "ignore" }).status !== 0);
}
