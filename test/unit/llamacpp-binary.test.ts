/**
 * Which llama.cpp binary a CPU replica loads (workers/engines/llamacpp-binary.ts): a build for this
 * CPU when the engine directory holds one, else the prebuilt binary, as PLATFORM_LLAMA_BUILD says;
 * on fake build folders (nothing compiled here: CI stays fast).
 */
import { lstat, mkdir, mkdtemp, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { decoderNote, llamaServerBin, wantsServer } from "../../workers/engines/llama-server-build.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { buildsHome, chooseBinary, cpuKey, linkBuild } from "../../workers/engines/llamacpp-binary.ts";

const X86 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2\n";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "llama-binary-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A build folder as `platform engine build` leaves one (node-llama-cpp's layout), for `cpu`. */
async function fakeBuild(name: string, cpu: string, { done = true } = {}): Promise<string> {
  const folder = join(buildsHome(dir), name);
  await mkdir(join(folder, "Release"), { recursive: true });
  await writeFile(join(folder, "Release", "llama-addon.node"), "not a binary");
  await writeFile(
    join(folder, "Release", "_nlcBuildMetadata.json"),
    JSON.stringify({ buildOptions: { customCmakeOptions: { GGML_NATIVE: "ON", PLATFORM_CPU: cpu } } }),
  );
  if (done) await writeFile(join(folder, "buildDone.status"), "");
  return folder;
}

describe("cpuKey", () => {
  it("names a CPU by its flags, in any order, and tells CPUs with other flags apart", () => {
    expect(cpuKey(X86)).toBe(cpuKey("flags\t\t: avx2 avx sse2 sse fpu\n"));
    expect(cpuKey(X86)).not.toBe(cpuKey("flags\t\t: fpu sse sse2 avx avx2 avx512f\n"));
    // Arm's /proc/cpuinfo says Features.
    expect(cpuKey("Features\t: fp asimd\n")).not.toBe(cpuKey("Features\t: fp asimd sve\n"));
    expect(cpuKey(X86)).toMatch(/^[0-9a-f]{16}$/);
  });
});

describe("chooseBinary", () => {
  const settings = (llamaBuild: "auto" | "native" | "prebuilt") => ({
    ...loadSettings({ PLATFORM_LLAMA_BUILD: llamaBuild, PLATFORM_ENGINE_DIR: dir }).engine,
  });

  it("reads PLATFORM_LLAMA_BUILD and PLATFORM_ENGINE_DIR, auto under the data dir by default", () => {
    expect(loadSettings({ PLATFORM_DATA_DIR: "/d" }).engine).toEqual({
      llamaBuild: "auto",
      dir: "/d/engines",
      llamaEngine: "auto",
    });
    expect(() => loadSettings({ PLATFORM_LLAMA_BUILD: "fast" })).toThrow(
      /PLATFORM_LLAMA_BUILD: expected "auto", "native" or "prebuilt"/,
    );
  });

  it("reads PLATFORM_LLAMA_ENGINE and PLATFORM_LLAMA_SERVER_BIN; the server's default place is the engine directory's", () => {
    const engine = loadSettings({ PLATFORM_DATA_DIR: "/d", PLATFORM_LLAMA_ENGINE: "server" }).engine;
    expect(engine.llamaEngine).toBe("server");
    expect(llamaServerBin(engine)).toMatch(/^\/d\/engines\/llama-server\/[^/]+\/llama-server$/);
    expect(llamaServerBin({ ...engine, llamaServerBin: "/opt/llama-server" })).toBe("/opt/llama-server");
    expect(decoderNote({ ...engine, llamaServerBin: "/nonexistent/llama-server" })).toMatch(
      /no llama-server at \/nonexistent\/llama-server: `platform engine build --server`/,
    );
    expect(decoderNote({ ...engine, llamaEngine: "binding" })).toContain("in the replica's process");
    // auto: the server only where it is built.
    expect(wantsServer({ ...engine, llamaEngine: "auto", llamaServerBin: "/nonexistent/llama-server" })).toBe(false);
    expect(wantsServer({ ...engine, llamaEngine: "auto", llamaServerBin: process.execPath })).toBe(true);
    expect(wantsServer({ ...engine, llamaEngine: "server", llamaServerBin: "/nonexistent/llama-server" })).toBe(true);
    expect(decoderNote({ ...engine, llamaEngine: "auto", llamaServerBin: "/nonexistent/x" })).toMatch(
      /in the replica's process: no llama-server is built here/,
    );
    expect(() => loadSettings({ PLATFORM_LLAMA_ENGINE: "remote" })).toThrow(
      /PLATFORM_LLAMA_ENGINE: expected "auto", "binding" or "server"/,
    );
  });

  it("auto: this CPU's build when there is one", async () => {
    const folder = await fakeBuild("linux-x64-abc", cpuKey(X86));
    await fakeBuild("linux-x64-other", cpuKey("flags: fpu\n"));
    const choice = await chooseBinary(settings("auto"), { cpu: cpuKey(X86) });
    expect(choice).toMatchObject({ binary: "native", path: folder });
    expect(choice.note).toContain(folder);
  });

  it("auto: the prebuilt binary when the build there is another CPU's, or unfinished, saying how to build one", async () => {
    await fakeBuild("linux-x64-other", cpuKey("flags: fpu\n"));
    await fakeBuild("linux-x64-half", cpuKey(X86), { done: false });
    const choice = await chooseBinary(settings("auto"), { cpu: cpuKey(X86) });
    expect(choice.binary).toBe("prebuilt");
    expect(choice.path).toBeUndefined();
    expect(choice.note).toContain("`platform engine build`");
  });

  it("native: fails without this CPU's build, naming the fix; prebuilt: never looks", async () => {
    await expect(chooseBinary(settings("native"), { cpu: cpuKey(X86) })).rejects.toThrow(
      /PLATFORM_LLAMA_BUILD=native, but there is no build for this CPU in .*`platform engine build`/,
    );
    await fakeBuild("linux-x64-abc", cpuKey(X86));
    expect((await chooseBinary(settings("native"), { cpu: cpuKey(X86) })).binary).toBe("native");
    expect(await chooseBinary(settings("prebuilt"), { cpu: cpuKey(X86) })).toEqual({
      binary: "prebuilt",
      note: "the prebuilt binary (PLATFORM_LLAMA_BUILD=prebuilt)",
    });
  });
});

describe("linkBuild", () => {
  it("links node-llama-cpp's local-build entry to the cached build, again after it was replaced", async () => {
    const folder = await fakeBuild("linux-x64-abc", cpuKey(X86));
    const localBuilds = join(dir, "localBuilds");
    expect(await linkBuild(folder, localBuilds)).toBe(true);
    const link = join(localBuilds, "linux-x64-abc");
    expect(await readlink(link)).toBe(folder);
    expect(await linkBuild(folder, localBuilds)).toBe(true);
    // A folder in its place (node-llama-cpp's own build of the same name) gives way to the link.
    await rm(link);
    await mkdir(link);
    expect(await linkBuild(folder, localBuilds)).toBe(true);
    expect((await lstat(link)).isSymbolicLink()).toBe(true);
  });

  it("says false where node-llama-cpp's folder cannot be written", async () => {
    const folder = await fakeBuild("linux-x64-abc", cpuKey(X86));
    await writeFile(join(dir, "file"), "");
    expect(await linkBuild(folder, join(dir, "file", "localBuilds"))).toBe(false);
  });
});
