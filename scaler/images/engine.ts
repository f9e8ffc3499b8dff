/**
 * Services through a container engine, where one is present and working (docs/services.md, "Local
 * backend"): `docker` or `podman` pulls the published image by digest and runs it on the host's
 * network (`--network host`: the platform gives each replica its PORT on loopback, as for the
 * unshare runner), removed when it exits (`--rm`). The service's variables and secrets are passed
 * by name (`-e NAME`, the value taken from the engine CLI's own environment), so no value is ever
 * in a command line that `ps` shows. SIGTERM to the CLI reaches the container (docker and podman
 * proxy signals of an attached `run`), so the backend stops it as it stops any replica.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ImageRunner } from "../backends/local-services.ts";
import { spawnWatched } from "../../src/process/watchdog.ts";
import type { PullAuth } from "../../src/pull-credentials/resolve.ts";
import { registryAddresses, registryHostOf } from "../../src/images/registries.ts";
import type { RegistryPolicy } from "../../src/settings/registries.ts";
import { pullFailure } from "../../src/images/pull-failure.ts";
import { checkReachable, isLoopbackRegistry } from "./pull.ts";
import { type PullAuthSource, refusedHint, withAuthFile } from "../pull-auth.ts";
import { STOP_TIMEOUT_S } from "./run.ts";

export type ContainerEngine = "docker" | "podman";

type Prepared = { reference: string; env: NodeJS.ProcessEnv };

function run(bin: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(bin, args, { env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) =>
      error ? reject(Object.assign(error, { stderr: String(stderr) })) : resolve(String(stdout)),
    ),
  );
}

/** The first of docker and podman that is installed and answers `info`, or undefined. */
export async function workingEngine(
  bins: Record<ContainerEngine, string> = { docker: "docker", podman: "podman" },
): Promise<ContainerEngine | undefined> {
  for (const engine of ["docker", "podman"] as const) {
    const works = await run(bins[engine], ["info"], process.env, 20_000).then(
      () => true,
      () => false,
    );
    if (works) return engine;
  }
  return undefined;
}

export function engineRunner(
  engine: ContainerEngine,
  options: { authFile?: string; auth?: PullAuthSource; bin?: string; registries?: RegistryPolicy } = {},
): ImageRunner {
  const bin = options.bin ?? engine;
  const operator: PullAuth = options.authFile ? { source: "operator", authFile: options.authFile } : { source: "none" };
  const base = () => ({ PATH: process.env.PATH, HOME: process.env.HOME, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR });
  return {
    prepare: async (repository, digest, org) => {
      const reference = `${repository}@${digest}`;
      const auth = options.auth ? await options.auth(org, repository) : operator;
      // The engine resolves the registry itself (docker's daemon: no proxy of ours), so the
      // address is checked here first; docs/security.md says what remains.
      if (options.registries)
        await checkReachable({ repository, digest }, registryAddresses(registryHostOf(repository), options.registries));
      await withAuthFile(auth, async (authFile) => {
        // docker reads credentials from DOCKER_CONFIG/config.json, whose "auths" are an auth.json's:
        // a private copy for this pull, removed with it.
        const dockerConfig =
          engine === "docker" && authFile ? await mkdtemp(join(tmpdir(), "platform-docker-config-")) : undefined;
        try {
          if (dockerConfig && authFile)
            await writeFile(join(dockerConfig, "config.json"), await readFile(authFile), { mode: 0o600 });
          const args =
            engine === "podman"
              ? [
                  "pull",
                  "--quiet",
                  ...(authFile ? ["--authfile", authFile] : []),
                  ...(isLoopbackRegistry(repository) ? ["--tls-verify=false"] : []),
                  reference,
                ]
              : ["pull", "--quiet", reference];
          await run(bin, args, dockerConfig ? { ...base(), DOCKER_CONFIG: dockerConfig } : base(), 30 * 60_000);
        } catch (e) {
          // In the platform's words (pull.ts): nothing the engine or the registry printed is echoed.
          if ((e as NodeJS.ErrnoException).code === "ENOENT")
            throw new Error(`pulling ${reference} with ${engine} failed: ${bin} is not installed`);
          const text = ((e as { stderr?: string }).stderr || (e as Error).message).trim();
          throw pullFailure(
            { repository, digest, authFile, refusedHint: refusedHint(auth, registryHostOf(repository)) },
            text,
            [],
            engine,
          );
        } finally {
          if (dockerConfig) await rm(dockerConfig, { recursive: true, force: true });
        }
      });
      // The image is local now (`run --pull=never`): running it needs no credential.
      return { reference, env: base() } satisfies Prepared;
    },
    spawn: (prepared, env) => {
      const { reference, env: engineEnvironment } = prepared as Prepared;
      const names = Object.keys(env);
      return spawnWatched(
        bin,
        ["run", "--rm", "--pull=never", "--network", "host", ...names.flatMap((name) => ["-e", name]), reference],
        // Under the watchdog, as the unshare runner's (run.ts): the CLI, and so its container, ends with the platform.
        { env: { ...engineEnvironment, ...env }, output: "pipe", killAfterSeconds: STOP_TIMEOUT_S },
      ).process;
    },
  };
}
