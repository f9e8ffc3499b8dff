/**
 * Image builders from the CLI's side (docs/publish.md): finding one (docker, then podman, then
 * buildah, or the one named), and running its build, push and login with the flags each needs.
 * buildah builds with `--isolation chroot`: its default (oci) needs a runtime and cgroups that
 * containers-in-containers and CI machines often lack, chroot works wherever buildah runs as root,
 * and it shares the host's network, so `npm ci` in a build reaches the registry the machine uses.
 * Its storage driver is buildah's own setting (storage.conf, CONTAINERS_STORAGE_CONF or
 * STORAGE_DRIVER=vfs where overlay is unavailable): a driver forced here would not match the
 * images already stored.
 */
import { spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { CommandError } from "../process/command-error.ts";
import { loadToolSettings } from "../settings/tools.ts";
import { loopbackHosts, withLoopbackRegistries } from "./registries-conf.ts";

/** In the order `platform publish` looks for them when a workspace's `build.builder` names none. */
export const BUILDERS = ["docker", "podman", "buildah"] as const;
export type Builder = (typeof BUILDERS)[number];

export type RunResult = { code: number; output: string };

/**
 * Runs a program, its output collected (and copied to stderr when `echo`, so a long build shows its
 * progress); `input` goes to its stdin (a password: never an argument, which `ps` shows). Resolves
 * undefined when the program is not installed.
 */
export function runTool(
  program: string,
  args: string[],
  options: { cwd?: string; input?: string; echo?: boolean; env?: Record<string, string> } = {},
): Promise<RunResult | undefined> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, {
      cwd: options.cwd,
      ...(options.env ? { env: { ...process.env, ...options.env } } : {}),
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    let output = "";
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      // Only the tail matters for errors; a build's full log can be megabytes.
      if (output.length > 200_000) output = output.slice(-100_000);
      if (options.echo) process.stderr.write(chunk);
    };
    child.stdout?.on("data", take);
    child.stderr?.on("data", take);
    child.once("error", (e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? resolve(undefined) : reject(e)));
    child.once("close", (code) => resolve({ code: code ?? 1, output }));
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

/**
 * Each builder's "are you working" command: docker's needs its daemon (a docker CLI without one is
 * common), buildah's and podman's their storage.
 */
export const BUILDER_INFO: Record<Builder, string[]> = {
  docker: ["info", "--format", "{{.ServerVersion}}"],
  podman: ["info", "--format", "{{.Version.Version}}"],
  buildah: ["info"],
};

/** Why a builder cannot build now (not installed, or its info command fails), or undefined when it can. */
async function whyNot(builder: Builder): Promise<string | undefined> {
  const version = await runTool(builder, ["--version"]);
  if (version?.code !== 0) return `${builder} is not installed`;
  const info = await runTool(builder, BUILDER_INFO[builder]);
  if (info?.code === 0) return undefined;
  return `\`${builder} ${BUILDER_INFO[builder][0]}\` fails: ${tail(info?.output ?? "", 2).replace(/\n/g, " ")}`;
}

/**
 * The builder to use: the one named (flag, then `.platformrc.json`), else the first of BUILDERS
 * that is installed and working, so a docker CLI without a daemon does not hide a working buildah.
 */
export async function findBuilder(named?: Builder): Promise<Builder> {
  if (named) {
    const why = await whyNot(named);
    if (why)
      throw new CommandError(
        `${why} (named by --builder or build.builder in .platformrc.json): mend it or name another`,
      );
    return named;
  }
  const reasons: string[] = [];
  for (const builder of BUILDERS) {
    const why = await whyNot(builder);
    if (!why) return builder;
    reasons.push(why);
  }
  throw new CommandError(
    `no working image builder: ${reasons.join("; ")}. Install or start one of ${BUILDERS.join(", ")} (docs/publish.md)`,
  );
}

/** `--tls-verify=false` where the registry is plain HTTP (image-session.ts says when); docker decides that itself. */
function tlsFlags(builder: Builder, plainHttp: boolean): string[] {
  return plainHttp && builder !== "docker" ? ["--tls-verify=false"] : [];
}

/** The tail of a tool's output, for an error: enough to see why, not a whole build log. */
export function tail(output: string, lines = 15): string {
  return output.trimEnd().split("\n").slice(-lines).join("\n");
}

/** Output that says the registry refused the credentials (or wanted some): each builder words it its own way. */
export function isAuthFailure(output: string): boolean {
  return /unauthorized|invalid username\/password|authentication required|401 Unauthorized|no basic auth credentials|denied: requested access|access to the requested resource is not authorized|status: 401/i.test(
    output,
  );
}

/**
 * The build's secrets: the user's npm and pip configuration, where they exist, as build secrets
 * (`RUN --mount=type=secret,id=npmrc,target=/root/.npmrc npm ci`): a build reaches the registry the
 * machine uses, with its credentials, and none of it lands in a layer of the image.
 */
async function buildSecrets(): Promise<string[]> {
  const candidates: [string, string][] = [
    ["npmrc", join(homedir(), ".npmrc")],
    ["pipconf", join(homedir(), ".config", "pip", "pip.conf")],
  ];
  const found: string[] = [];
  for (const [id, path] of candidates)
    if (
      await readFile(path).then(
        () => true,
        () => false,
      )
    )
      found.push("--secret", `id=${id},src=${path}`);
  return found;
}

export type BuildRequest = {
  builder: Builder;
  context: string;
  dockerfile: string;
  reference: string;
  buildArgs: Record<string, string>;
  labels: Record<string, string>;
};

export async function buildImage(req: BuildRequest): Promise<void> {
  const args = [
    "build",
    ...(req.builder === "buildah" ? ["--isolation", "chroot"] : []),
    // Docker's image format: the OCI format that buildah and podman default to has no HEALTHCHECK,
    // and they drop the Dockerfile's (with a warning).
    ...(req.builder === "docker" ? [] : ["--format", "docker"]),
    "-f",
    req.dockerfile,
    "-t",
    req.reference,
    ...Object.entries(req.labels).flatMap(([k, v]) => ["--label", `${k}=${v}`]),
    ...Object.entries(req.buildArgs).flatMap(([k, v]) => ["--build-arg", `${k}=${v}`]),
    // docker's legacy builder has no --secret (BuildKit has); buildah and podman always do.
    ...(req.builder === "docker" ? [] : await buildSecrets()),
    req.context,
  ];
  // docker allows loopback registries itself; buildah and podman need them named (registries-conf.ts).
  const hosts = req.builder === "docker" ? [] : loopbackHosts(await readFile(req.dockerfile, "utf8"), req.buildArgs);
  const ran = await withLoopbackRegistries(hosts, loadToolSettings().registriesConfFiles, (env) =>
    runTool(req.builder, args, { cwd: req.context, echo: true, env }),
  );
  if (!ran) throw new CommandError(`${req.builder} is not installed`);
  if (ran.code !== 0)
    throw new CommandError(`${req.builder} build failed (exit ${ran.code}); its output is above:\n${tail(ran.output)}`);
}

/**
 * Pushes the reference and answers the digest the registry stored it under. A refusal for want of
 * a session is the one line that says to log in (image-session.ts), never the builder's error alone.
 */
export async function pushImage(
  builder: Builder,
  reference: string,
  options: { plainHttp: boolean; notLoggedIn: string },
): Promise<string> {
  let ran: RunResult | undefined;
  let digest: string | undefined;
  if (builder === "docker") {
    ran = await runTool("docker", ["push", reference], { echo: true });
    digest = /digest: (sha256:[0-9a-f]{64})/.exec(ran?.output ?? "")?.[1];
  } else {
    const dir = await mkdtemp(join(tmpdir(), "platform-push-"));
    const file = join(dir, "digest");
    try {
      ran = await runTool(
        builder,
        ["push", ...tlsFlags(builder, options.plainHttp), "--digestfile", file, reference, `docker://${reference}`],
        { echo: true },
      );
      digest = await readFile(file, "utf8").then(
        (t) => t.trim(),
        () => undefined,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  if (!ran) throw new CommandError(`${builder} is not installed`);
  if (ran.code !== 0) {
    if (isAuthFailure(ran.output)) throw new CommandError(options.notLoggedIn, 1, { plain: true });
    throw new CommandError(`${builder} push of ${reference} failed (exit ${ran.code}):\n${tail(ran.output)}`);
  }
  if (!digest || !/^sha256:[0-9a-f]{64}$/.test(digest))
    throw new CommandError(`${builder} pushed ${reference} but did not say its digest; check the registry`);
  return digest;
}

/**
 * `<builder> login --username U --password-stdin HOST`. A REGISTRY_AUTH_FILE that does not exist yet
 * breaks every buildah command (buildah 1.28), so the file the builder writes is created first
 * (`{}`, 0600, in a 0700 directory) where missing.
 */
export async function loginBuilder(
  builder: Builder,
  host: string,
  credentials: { username: string; password: string },
  options: { plainHttp: boolean; authFile: string },
): Promise<void> {
  if (builder !== "docker") {
    await mkdir(dirname(options.authFile), { recursive: true, mode: 0o700 });
    await writeFile(options.authFile, "{}\n", { flag: "wx", mode: 0o600 }).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== "EEXIST") throw e;
    });
    await chmod(options.authFile, 0o600).catch(() => undefined);
  }
  const ran = await runTool(
    builder,
    ["login", ...tlsFlags(builder, options.plainHttp), "--username", credentials.username, "--password-stdin", host],
    { input: `${credentials.password}\n` },
  );
  if (!ran) throw new CommandError(`${builder} is not installed`);
  if (ran.code === 0) return;
  // The builder's output never holds the password (it came on stdin), but it is cut to its tail anyway.
  if (isAuthFailure(ran.output))
    throw new CommandError(
      `${host} refused the username or password for ${credentials.username}: check them and try again`,
    );
  throw new CommandError(`${builder} login ${host} failed (exit ${ran.code}):\n${tail(ran.output, 5)}`);
}
