/**
 * Services through a container engine, where one is present and working (docs/services.md, "Local
 * backend"): `docker` or `podman` pulls the published image by digest and runs it removed when it
 * exits (`--rm`), sandboxed as the unshare runner's (docs/security.md, "Service sandbox and replica
 * network"): the image's user, or UNPRIVILEGED_ID where it names none or root (unless the operator
 * allows root), `--cap-drop ALL`, `--security-opt no-new-privileges`, a read-only root with a
 * tmpfs /tmp, and `--network none`: the container's namespace has its loopback alone, and a socat
 * entered into it (nsenter, as the unshare runner's forwarder) carries the gateway's connections in
 * from a Unix socket, the host side being forward.ts. The service's variables and secrets go in an
 * `--env-file` (0600, in the replica's runtime directory, removed once the container runs): the
 * engine's CLI itself runs with the platform's fixed environment, never a tenant's. SIGTERM to the
 * CLI reaches the container (docker and podman proxy signals of an attached `run`), so the backend
 * stops it as it stops any replica.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ImageRunner } from "../backends/services/local.ts";
import { spawnWatched } from "../../src/process/watchdog.ts";
import type { PullAuth } from "../../src/registry-credentials/resolve.ts";
import { registryAddresses, registryHostOf } from "../../src/container-images/registries.ts";
import type { RegistryPolicy } from "../../src/settings/registries.ts";
import { pullFailure } from "../../src/container-images/pull-failure.ts";
import { checkReachable, isLoopbackRegistry } from "./pull.ts";
import { type PullAuthSource, refusedHint, withAuthFile } from "../backends/services/pull-auth.ts";
import { forwardPorts, replicaRuntimeDir } from "./forward.ts";
import { STOP_TIMEOUT_S } from "./run.ts";
import { UNPRIVILEGED_ID } from "./sandbox.ts";

export type ContainerEngine = "docker" | "podman";

type Prepared = { reference: string; env: NodeJS.ProcessEnv; user: string };

/** The image's `User` as `--user` takes it, root (by name or id, or none) replaced unless allowed. */
export function engineUser(user: string, allowRoot: boolean): string {
  const name = user.split(":")[0] ?? "";
  return !allowRoot && (name === "" || name === "0" || name === "root")
    ? `${UNPRIVILEGED_ID}:${UNPRIVILEGED_ID}`
    : user;
}

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
  options: {
    authFile?: string;
    auth?: PullAuthSource;
    bin?: string;
    registries?: RegistryPolicy;
    allowRoot?: boolean;
  } = {},
): ImageRunner {
  const bin = options.bin ?? engine;
  const operator: PullAuth = options.authFile ? { source: "operator", authFile: options.authFile } : { source: "none" };
  // The operator's own: a tenant's variable never reaches the CLI, which runs with this alone.
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
      const user = (
        await run(bin, ["image", "inspect", "--format", "{{.Config.User}}", reference], base(), 60_000)
      ).trim();
      return { reference, env: base(), user: engineUser(user, options.allowRoot ?? false) } satisfies Prepared;
    },
    spawn: (prepared, env, ports) => {
      const { reference, env: engineEnvironment, user } = prepared as Prepared;
      for (const [name, value] of Object.entries(env))
        if (/[\n\r]/.test(value))
          throw new Error(
            `${name}: ${engine}'s --env-file holds one line a variable; a value with a line break needs the unshare runner (PLATFORM_SERVICE_RUNTIME=unshare) or an encoding such as base64`,
          );
      const { dir: runtime, remove } = replicaRuntimeDir();
      const envFile = join(runtime, "env");
      writeFileSync(
        envFile,
        Object.entries(env)
          .map(([k, v]) => `${k}=${v}\n`)
          .join(""),
        { mode: 0o600 },
      );
      const name = `platform-replica-${randomBytes(6).toString("hex")}`;
      const child = spawnWatched(
        bin,
        [
          "run",
          "--rm",
          "--pull=never",
          "--name",
          name,
          "--network",
          "none",
          "--user",
          user,
          "--cap-drop",
          "ALL",
          "--security-opt",
          "no-new-privileges",
          "--read-only",
          "--tmpfs",
          "/tmp",
          "--env-file",
          envFile,
          reference,
        ],
        // Under the watchdog, as the unshare runner's (run.ts): the CLI, and so its container, ends with the platform.
        { env: engineEnvironment, output: "pipe", killAfterSeconds: STOP_TIMEOUT_S },
      ).process;
      const forwarders: Array<() => void> = [];
      const forwarding = forwardPorts(runtime, ports, (e) => {
        child.stderr?.emit("data", Buffer.from(`${e.message}\n`));
        child.kill("SIGTERM");
      });
      let gone = false;
      child.once("exit", () => {
        gone = true;
        for (const stop of forwarders) stop();
        forwarding.close();
        remove();
      });
      void enterWhenRunning(bin, name, engineEnvironment, () => gone).then(
        (pid) => {
          rmSync(envFile, { force: true });
          if (gone || pid === undefined) return;
          for (const port of ports)
            forwarders.push(
              spawnWatched(
                "/usr/bin/nsenter",
                [
                  `--target=${pid}`,
                  "--net",
                  "--",
                  "/usr/bin/socat",
                  `UNIX-LISTEN:${runtime}/${port}.sock,fork,su=${UNPRIVILEGED_ID}`,
                  `TCP4:127.0.0.1:${port}`,
                ],
                { env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }, output: "ignore" },
              ).stop,
            );
        },
        (e: Error) => child.stderr?.emit("data", Buffer.from(`${e.message}\n`)),
      );
      return child;
    },
  };
}

/** The container's pid once it runs (for nsenter), or undefined if the CLI ended first. */
async function enterWhenRunning(
  bin: string,
  name: string,
  env: NodeJS.ProcessEnv,
  gone: () => boolean,
): Promise<number | undefined> {
  while (!gone()) {
    const pid = Number(
      (await run(bin, ["inspect", "--format", "{{.State.Pid}}", name], env, 10_000).catch(() => "0")).trim(),
    );
    if (pid > 0) return pid;
    await new Promise((r) => setTimeout(r, 200));
  }
  return undefined;
}
