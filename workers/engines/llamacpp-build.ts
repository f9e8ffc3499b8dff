/**
 * Loading the CPU binary llamacpp-binary.ts chooses, and saying which loaded; and building one for
 * this CPU (`platform engine build`).
 */
import { cp, mkdir, rm } from "node:fs/promises";
import { setPriority } from "node:os";
import { join } from "node:path";
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp";
import type { EngineSettings } from "../../src/settings/engine.ts";
import {
  type BinaryChoice,
  type BinaryPlaces,
  buildFor,
  buildsHome,
  chooseBinary,
  cpuKey,
  LOCAL_BUILDS_DIR,
  linkBuild,
  llamaCppTag,
  missingBuildTool,
  nativeCmakeOptions,
} from "./llamacpp-binary.ts";

/**
 * Loads the CPU binding as `settings` say, and says which loaded. A native build that is there but
 * fails to load (node-llama-cpp logs why) falls back to the prebuilt binary under `auto`, and fails
 * the replica under `native`.
 */
export async function loadCpuLlama(
  settings: Pick<EngineSettings, "llamaBuild" | "dir">,
  places?: Partial<BinaryPlaces>,
): Promise<{ llama: Llama } & BinaryChoice> {
  const choice = await chooseBinary(settings, places);
  const cpu = places?.cpu ?? cpuKey();
  let linked = false;
  if (choice.path) linked = await linkBuild(choice.path, places?.localBuildsDir);
  const llama = await getLlama({
    gpu: false,
    build: "never",
    logLevel: LlamaLogLevel.error,
    // Without them no local build is looked up under this CPU's name (the prebuilt one loads).
    ...(choice.path && linked ? { cmakeOptions: nativeCmakeOptions(cpu) } : {}),
  });
  const loaded = llama.buildType === "localBuild" ? "native" : "prebuilt";
  if (loaded === choice.binary) return { llama, ...choice };
  const why = !linked
    ? `${LOCAL_BUILDS_DIR} cannot be written, so node-llama-cpp cannot find ${choice.path}`
    : `${choice.path} did not load (node-llama-cpp's error above)`;
  if (settings.llamaBuild === "native") {
    await llama.dispose();
    throw new Error(`PLATFORM_LLAMA_BUILD=native, but ${why}`);
  }
  return loaded === "prebuilt"
    ? { llama, binary: "prebuilt", note: `the prebuilt binary (${why})` }
    : { llama, binary: "native", note: "a local build of node-llama-cpp's (llama/localBuilds)" };
}

/**
 * Builds llama.cpp for this CPU from node-llama-cpp's bundled source (no network: the source is its
 * git bundle) into the engine directory, at the lowest CPU priority so that whatever else runs
 * here keeps its share, and links it where node-llama-cpp looks. Replaces an earlier build for
 * this CPU.
 */
export async function buildNative(
  settings: Pick<EngineSettings, "llamaBuild" | "dir">,
  places?: Partial<BinaryPlaces>,
): Promise<{ path: string; seconds: number; llamaCpp: string }> {
  const missing = missingBuildTool();
  if (missing)
    throw new Error(
      `${missing} is not installed: building llama.cpp needs cmake, git and a C++ compiler (Debian/Ubuntu: apt-get install cmake git g++ make)`,
    );
  const started = Date.now();
  const cpu = places?.cpu ?? cpuKey();
  const localBuilds = places?.localBuildsDir ?? LOCAL_BUILDS_DIR;
  // The compilers the build starts inherit it.
  setPriority(19);
  const llama = await getLlama({
    gpu: false,
    build: "forceRebuild",
    cmakeOptions: nativeCmakeOptions(cpu),
    logLevel: LlamaLogLevel.error,
    progressLogs: "stderr",
  });
  await llama.dispose();
  const name = await buildFor(localBuilds, cpu);
  if (!name) throw new Error(`node-llama-cpp built llama.cpp, but no build for this CPU is in ${localBuilds}`);
  // Only what loads is kept (the binding, its libraries, its metadata), not cmake's objects.
  const target = join(buildsHome(places?.engineDir ?? settings.dir), name);
  await rm(target, { recursive: true, force: true });
  await mkdir(target, { recursive: true });
  await cp(join(localBuilds, name, "Release"), join(target, "Release"), { recursive: true, verbatimSymlinks: true });
  await cp(join(localBuilds, name, "buildDone.status"), join(target, "buildDone.status"));
  await rm(join(localBuilds, name), { recursive: true, force: true });
  if (!(await linkBuild(target, localBuilds))) throw new Error(`cannot link ${target} from ${localBuilds}`);
  return { path: target, seconds: Math.round((Date.now() - started) / 1000), llamaCpp: llamaCppTag() };
}
