/**
 * The images section (docs/images.md): the Python that runs the diffusers engine's child, how long it
 * may take to load a pipeline, how many same-shaped images one pipeline call may make, and how long a
 * `url` answer's image is kept.
 */
import { z } from "zod";
import { pythonOf } from "./finetuning.ts";
import { optional, positiveMs } from "./parse.ts";

export const picturesShape = {
  /** The interpreter that runs workers/engines/diffusers/server.py (torch, diffusers, transformers). */
  PLATFORM_IMAGES_PYTHON: optional(z.string().min(1)),
  PLATFORM_IMAGES_START_TIMEOUT_MS: positiveMs(10 * 60_000),
  /**
   * Images of the same size, steps and guidance made in one pipeline call. 1 (the default): one at a
   * time, because a batched call's images differ from the ones each request makes alone by float
   * rounding (measured: up to 1 of 255 in some pixels, docs/images.md).
   */
  PLATFORM_IMAGES_MAX_BATCH: z.coerce
    .number({ message: "expected a whole number from 1 to 64" })
    .int()
    .min(1)
    .max(64)
    .default(1),
  /** How long the image behind a `url` answer can be fetched. */
  PLATFORM_IMAGES_URL_TTL_MS: positiveMs(60 * 60_000),
};

export type PicturesSettings = { python: string; startTimeoutMs: number; maxBatch: number; urlTtlMs: number };

export function picturesSettings(e: z.infer<z.ZodObject<typeof picturesShape>>): PicturesSettings {
  return {
    python: pythonOf(e.PLATFORM_IMAGES_PYTHON),
    startTimeoutMs: e.PLATFORM_IMAGES_START_TIMEOUT_MS,
    maxBatch: e.PLATFORM_IMAGES_MAX_BATCH,
    urlTtlMs: e.PLATFORM_IMAGES_URL_TTL_MS,
  };
}
