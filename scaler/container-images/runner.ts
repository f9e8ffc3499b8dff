/**
 * The local services backend's ImageRunner (scaler/backends/services/local.ts): a published image
 * pulled by digest and verified (pull.ts), with the organization's pull credential
 * (scaler/backends/services/pull-auth.ts), unpacked (unpack.ts) and run unprivileged in a sandbox of its own (run.ts). The cache is
 * shared by digest, so a cached image is run for an organization only once a manifest request
 * with that organization's credential (or none) succeeded: no organization runs an image it could
 * not pull itself. A success is remembered ACCESS_MEMO_MS, so restarts cost no registry request.
 */
import type { ImageRunner } from "../backends/services/local.ts";
import { registryAddresses } from "../../src/container-images/registries.ts";
import type { RegistryPolicy } from "../../src/settings/registries.ts";
import { pullImage } from "./pull.ts";
import { type PullAuthSource, refusedHint, withAuthFile } from "../backends/services/pull-auth.ts";
import { type ImageProcessSpec, imageProcessSpec, spawnImageProcess } from "./run.ts";
import { unpackImage } from "./unpack.ts";

const ACCESS_MEMO_MS = 10 * 60_000;

export function imageRunner(options: {
  cacheDir: string;
  auth: PullAuthSource;
  registries?: RegistryPolicy;
  allowRoot?: boolean;
  /** PLATFORM_SERVICE_HOST_PORTS: ports of the host's loopback a replica may reach. */
  hostPorts?: number[];
}): ImageRunner {
  /** "<org>\0<repository>@<digest>" → until when a pull by that organization is known to be allowed. */
  const allowed = new Map<string, number>();
  const { registries } = options;
  return {
    prepare: async (repository, digest, org) => {
      const auth = await options.auth(org, repository);
      const key = `${org}\0${repository}@${digest}`;
      const checkAccess = (allowed.get(key) ?? 0) <= Date.now();
      const pulled = await withAuthFile(auth, (authFile) =>
        pullImage({
          repository,
          digest,
          cacheDir: options.cacheDir,
          authFile,
          refusedHint: refusedHint(auth, repository.split("/")[0] as string),
          checkAccess,
          // Where skopeo may connect: the registry policy's addresses per host (src/container-images/registries.ts).
          ...(registries ? { addresses: (host: string) => registryAddresses(host, registries) } : {}),
        }),
      );
      if (allowed.size > 10_000) allowed.clear();
      allowed.set(key, Date.now() + ACCESS_MEMO_MS);
      return imageProcessSpec(pulled, await unpackImage(pulled, options.cacheDir), undefined, {
        allowRoot: options.allowRoot,
      });
    },
    spawn: (prepared, env, ports) =>
      spawnImageProcess(prepared as ImageProcessSpec, env, ports, options.hostPorts ?? []),
  };
}
