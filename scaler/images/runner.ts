/**
 * The local services backend's ImageRunner (scaler/backends/local-services.ts): a published image
 * pulled by digest and verified (pull.ts), with the organization's pull credential (pull-auth.ts),
 * unpacked (unpack.ts) and run as its own user in its own root filesystem (run.ts). Preparing one
 * digest twice costs a look at the cache, and a manifest request with the organization's
 * credential where it has its own: a cached image runs only for those who may pull it.
 */
import type { ImageRunner } from "../backends/local-services.ts";
import { pullImage } from "./pull.ts";
import { type PullAuthSource, refusedHint, withAuthFile } from "./pull-auth.ts";
import { type ImageProcessSpec, imageProcessSpec, spawnImageProcess } from "./run.ts";
import { unpackImage } from "./unpack.ts";

export function imageRunner(options: { cacheDir: string; auth: PullAuthSource }): ImageRunner {
  return {
    prepare: async (repository, digest, org) => {
      const auth = await options.auth(org, repository);
      const pulled = await withAuthFile(auth, (authFile) =>
        pullImage({
          repository,
          digest,
          cacheDir: options.cacheDir,
          authFile,
          refusedHint: refusedHint(auth, repository.split("/")[0] as string),
          checkAccess: auth.source === "organization" || auth.source === "token_server",
        }),
      );
      return imageProcessSpec(pulled, await unpackImage(pulled, options.cacheDir));
    },
    spawn: (prepared, env) => spawnImageProcess(prepared as ImageProcessSpec, env),
  };
}
