/**
 * The engine section: which llama.cpp binary a CPU replica loads (docs/engines.md, "A build for
 * this CPU"): one built here for this CPU when there is one (`platform engine build`), else the
 * prebuilt binary node-llama-cpp ships; and where such builds are kept.
 */
import { join } from "node:path";
import { z } from "zod";
import { optional } from "./parse.ts";

export const LLAMA_BUILDS = ["auto", "native", "prebuilt"] as const;
export type LlamaBuild = (typeof LLAMA_BUILDS)[number];

/** Where a CPU replica decodes: in its own process (node-llama-cpp), or in a llama-server child (docs/engines.md). */
export const LLAMA_ENGINES = ["auto", "binding", "server"] as const;
export type LlamaEngine = (typeof LLAMA_ENGINES)[number];

export const engineShape = {
  /**
   * auto: this CPU's build when one is cached, else the prebuilt binary; native: this CPU's build
   * or the replica fails to start (saying how to build it); prebuilt: never a local build.
   */
  PLATFORM_LLAMA_BUILD: z.enum(LLAMA_BUILDS, { message: 'expected "auto", "native" or "prebuilt"' }).default("auto"),
  /** Where `platform engine build` keeps its builds (default: <data dir>/engines). */
  PLATFORM_ENGINE_DIR: optional(z.string().min(1)),
  /**
   * server: decode in a llama-server child (PLATFORM_LLAMA_SERVER_BIN), the replica rendering,
   * tokenizing and supervising it; binding: in the replica's process through node-llama-cpp;
   * auto: the server when its executable is there, else the binding.
   */
  PLATFORM_LLAMA_ENGINE: z.enum(LLAMA_ENGINES, { message: 'expected "auto", "binding" or "server"' }).default("auto"),
  /** The llama-server executable for PLATFORM_LLAMA_ENGINE=server (default: `platform engine build --server`'s, in the engine directory). */
  PLATFORM_LLAMA_SERVER_BIN: optional(z.string().min(1)),
};

export type EngineSettings = {
  llamaBuild: LlamaBuild;
  dir: string;
  llamaEngine: LlamaEngine;
  /** Absent: the engine directory's build, found when the replica starts. */
  llamaServerBin?: string;
};

export function engineSettings(e: z.infer<z.ZodObject<typeof engineShape>>, dataDir: string): EngineSettings {
  return {
    llamaBuild: e.PLATFORM_LLAMA_BUILD,
    dir: e.PLATFORM_ENGINE_DIR ?? join(dataDir, "engines"),
    llamaEngine: e.PLATFORM_LLAMA_ENGINE,
    ...(e.PLATFORM_LLAMA_SERVER_BIN === undefined ? {} : { llamaServerBin: e.PLATFORM_LLAMA_SERVER_BIN }),
  };
}
