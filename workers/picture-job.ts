/**
 * An image job on a replica (docs/images.md): the engine makes the PNG, this writes it to the artifact
 * store under `images/` (replies are bounded entries; the gateway reads the PNG from there) and
 * builds the job's result. Steps go on the reply stream as `progress` events when the job streams.
 */
import { randomBytes, randomInt } from "node:crypto";
import { PlatformError } from "../src/contracts/errors.ts";
import type { ImageJob, ImageResult } from "../src/contracts/job.ts";
import { MAX_IMAGE_SEED } from "../src/contracts/picture-params.ts";
import { pictureKey } from "../src/pictures/keys.ts";
import type { ObjectStore } from "../src/storage/store.ts";
import type { Engine } from "./engines/engine.ts";

export type PictureJobDeps = { engine: Engine; store: ObjectStore | undefined; replica: string };

export async function runPictureJob(
  deps: PictureJobDeps,
  job: ImageJob,
  signal: AbortSignal,
  onStep: (step: number, steps: number) => void,
): Promise<ImageResult> {
  const { engine, store } = deps;
  if (!engine.generateImage)
    throw new PlatformError(
      400,
      "model_not_image",
      `this replica's engine (${engine.name}) serves text, not images: use /v1/chat/completions or /v1/completions with it`,
      "model",
    );
  if (!store) throw new PlatformError(500, "internal_error", "this replica has no artifact store to write images to");
  // Drawn here when the job has none, and reported, so the image can be made again.
  const seed = job.params.seed ?? randomInt(0, Math.min(MAX_IMAGE_SEED, 2 ** 48 - 1));
  const out = await engine.generateImage(
    {
      prompt: job.prompt,
      negative_prompt: job.negative_prompt,
      width: job.width,
      height: job.height,
      steps: job.params.num_inference_steps,
      guidance: job.params.guidance_scale,
      seed,
    },
    { signal, onStep },
  );
  const key = pictureKey(Date.now(), randomBytes(16).toString("hex"));
  await store.put(key, out.png);
  return {
    type: "image",
    image: { key, bytes: out.png.length },
    width: job.width,
    height: job.height,
    seed,
    steps: out.steps,
    usage: {
      prompt_tokens: out.promptTokens,
      completion_tokens: 0,
      total_tokens: out.promptTokens,
      images: 1,
      steps: out.steps,
    },
    replica: deps.replica,
  };
}
