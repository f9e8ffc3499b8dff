/** How one picture is made (an image job's parameters) and the bounds a job's fields are held to. */
import { z } from "zod";

/** The longest image prompt (or negative prompt) a job takes, in characters; text encoders read far less. */
export const MAX_IMAGE_PROMPT_CHARS = 16_000;
/** The most denoising steps a job may ask for; diffusers' schedulers are trained for 1000. */
export const MAX_IMAGE_STEPS = 500;
/** The largest image side a job may ask for, in pixels; the model's own supported sizes are checked at the gateway. */
export const MAX_IMAGE_SIDE = 4096;
/** The largest random seed: torch takes 64 bits, JSON numbers are exact to 2^53. */
export const MAX_IMAGE_SEED = Number.MAX_SAFE_INTEGER;

/**
 * How one image is made. Absent: the pipeline's own defaults (diffusers': 50 steps, guidance 7.5
 * for Stable Diffusion) and, for the random seed, one drawn that the result reports.
 */
export const ImageParams = z.object({
  num_inference_steps: z.number().int().min(1).max(MAX_IMAGE_STEPS).optional(),
  guidance_scale: z.number().min(0).max(100).optional(),
  /** The same seed, prompt, size, steps and guidance give the same image on the same replica build. */
  seed: z.number().int().min(0).max(MAX_IMAGE_SEED).optional(),
});
export type ImageParams = z.infer<typeof ImageParams>;
