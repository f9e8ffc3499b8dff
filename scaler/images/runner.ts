/**
 * The local services backend's ImageRunner (scaler/backends/local-services.ts): a published image
 * pulled by digest and verified (pull.ts), unpacked (unpack.ts) and run as its own user in its own
 * root filesystem (run.ts). Preparing one digest twice costs a look at the cache.
 */
import type { ImageRunner } from "../backends/local-services.ts";
import { pullImage } from "./pull.ts";
import { type ImageProcessSpec, imageProcessSpec, spawnImageProcess } from "./run.ts";
import { unpackImage } from "./unpack.ts";

export function imageRunner(options: { cacheDir: string; authFile?: string }): ImageRunner {
  return {
    prepare: async (repository, digest) => {
      const pulled = await pullImage({ repository, digest, cacheDir: options.cacheDir, authFile: options.authFile });
      return imageProcessSpec(pulled, await unpackImage(pulled, options.cacheDir));
    },
    spawn: (prepared, env) => spawnImageProcess(prepared as ImageProcessSpec, env),
  };
}
