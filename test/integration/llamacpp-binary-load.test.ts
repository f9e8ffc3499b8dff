/**
 * Loading the CPU binary PLATFORM_LLAMA_BUILD chooses (workers/engines/llamacpp-build.ts), through
 * node-llama-cpp's own loader: with no build for this CPU the prebuilt binary loads and says so; a
 * cached build that does not load (here a fake one: nothing is compiled in the test tiers) falls
 * back to the prebuilt binary under `auto` and fails the replica under `native`.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { arch, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { buildsHome, LOCAL_BUILDS_DIR } from "../../workers/engines/llamacpp-binary.ts";
import { loadCpuLlama } from "../../workers/engines/llamacpp-build.ts";

let dir: string;
// A CPU name no real build has, so nothing else that loads llama.cpp meanwhile can find this build.
const cpu = `test-${randomBytes(4).toString("hex")}`;
/** node-llama-cpp's name for a local build with these cmake options (its getBuildFolderNameForBuildOptions). */
const folder = `linux-${arch()}-${[...createHash("sha1").update(`GGML_NATIVE=ON;PLATFORM_CPU=${cpu}`).digest()]
  .map((b) => b.toString(36))
  .join("")}`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "llama-load-"));
});
afterAll(async () => {
  await rm(join(LOCAL_BUILDS_DIR, folder), { force: true });
  await rm(dir, { recursive: true, force: true });
});

describe.runIf(process.platform === "linux")("loadCpuLlama", () => {
  it("loads the prebuilt binary where no build for this CPU is cached, and says so", async () => {
    const loaded = await loadCpuLlama({ llamaBuild: "auto", dir }, { cpu });
    expect(loaded.llama.buildType).toBe("prebuilt");
    expect(loaded.binary).toBe("prebuilt");
    expect(loaded.note).toContain("no build for this CPU");
    await loaded.llama.dispose();
  });

  it("falls back from a cached build that does not load under auto; fails under native", async () => {
    const build = join(buildsHome(dir), folder);
    await mkdir(join(build, "Release"), { recursive: true });
    await writeFile(join(build, "Release", "llama-addon.node"), "not a binary");
    await writeFile(
      join(build, "Release", "_nlcBuildMetadata.json"),
      JSON.stringify({
        buildOptions: { gpu: false, platformInfo: {}, customCmakeOptions: { GGML_NATIVE: "ON", PLATFORM_CPU: cpu } },
      }),
    );
    await writeFile(join(build, "buildDone.status"), "");
    // node-llama-cpp reports what it tried on the console, which reaches stderr.
    const said: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
      said.push(String(chunk));
      return true;
    });
    for (const level of ["error", "warn"] as const)
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => void said.push(args.join(" ")));
    try {
      const loaded = await loadCpuLlama({ llamaBuild: "auto", dir }, { cpu });
      // node-llama-cpp found the build under this CPU's name and tried it.
      expect(said.join("")).toMatch(
        /Failed to load a local build|local build binary was not built in the current system/,
      );
      expect(loaded).toMatchObject({ binary: "prebuilt" });
      expect(loaded.llama.buildType).toBe("prebuilt");
      expect(loaded.note).toContain(`${build} did not load`);
      await loaded.llama.dispose();
      await expect(loadCpuLlama({ llamaBuild: "native", dir }, { cpu })).rejects.toThrow(
        /PLATFORM_LLAMA_BUILD=native, but .* did not load/,
      );
    } finally {
      vi.restoreAllMocks();
    }
  });
});
