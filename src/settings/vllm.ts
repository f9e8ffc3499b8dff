/** The vLLM section: which `vllm` a GPU worker runs, and how long it may take to load a model. */
import { z } from "zod";
import { positiveMs } from "./parse.ts";

/** Large weights read from slow disks or downloaded at start take minutes: 15 of them. */
export const VLLM_DEFAULTS = { bin: "vllm", startTimeoutMs: 15 * 60_000 } as const;

export const vllmShape = {
  /** Empty counts as unset, as it always has. */
  VLLM_BIN: z
    .string()
    .default("")
    .transform((bin) => bin || VLLM_DEFAULTS.bin),
  PLATFORM_VLLM_START_TIMEOUT_MS: positiveMs(VLLM_DEFAULTS.startTimeoutMs),
};

export type VllmSettings = { bin: string; startTimeoutMs: number };

export function vllmSettings(e: z.infer<z.ZodObject<typeof vllmShape>>): VllmSettings {
  return { bin: e.VLLM_BIN, startTimeoutMs: e.PLATFORM_VLLM_START_TIMEOUT_MS };
}
