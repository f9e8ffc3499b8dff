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

export const engineShape = {
  /**
   * auto: this CPU's build when one is cached, else the prebuilt binary; native: this CPU's build
   * or the replica fails to start (saying how to build it); prebuilt: never a local build.
   */
  PLATFORM_LLAMA_BUILD: z.enum(LLAMA_BUILDS, { message: 'expected "auto", "native" or "prebuilt"' }).default("auto"),
  /** Where `platform engine build` keeps its builds (default: <data dir>/engines). */
  PLATFORM_ENGINE_DIR: optional(z.string().min(1)),
};

export type EngineSettings = { llamaBuild: LlamaBuild; dir: string };

export function engineSettings(e: z.infer<z.ZodObject<typeof engineShape>>, dataDir: string): EngineSettings {
  return { llamaBuild: e.PLATFORM_LLAMA_BUILD, dir: e.PLATFORM_ENGINE_DIR ?? join(dataDir, "engines") };
}
