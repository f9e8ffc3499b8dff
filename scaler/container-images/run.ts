/**
 * An unpacked image run as a supervised child process, without a container engine (issue 24), in a
 * sandbox (issue 38; docs/security.md, "Service sandbox and replica network"). Its config resolved
 * as docker would (Entrypoint + Cmd, Env, WorkingDir, User by id or by name in the image's own
 * /etc/passwd and /etc/group); a root or unnamed user becomes UNPRIVILEGED_ID unless the operator
 * allows root (PLATFORM_SERVICE_ALLOW_ROOT). Then, with util-linux and perl-base, no tool of the
 * image's (sandbox.ts has both scripts):
 *
 *   unshare --mount --net --ipc --uts -- sh -c <prepare> …        (root, a fixed environment)
 *     mounts, seen by this sandbox alone and gone when it ends: a tmpfs as scratch, and over it an
 *     overlay of the cached rootfs (read-only below, so a process never changes the cache its next
 *     replica starts from), a /dev tmpfs with null, zero, full, random, urandom and tty bound from
 *     the host's, /dev/shm, its own /etc/hosts; the network namespace's loopback up, and a socat
 *     per port carrying the gateway's connections in from a Unix socket (forward.ts is the host side)
 *     exec unshare --pid --fork --mount-proc=<root>/proc -- perl …     (PID 1 of a new PID namespace)
 *       the bounding set emptied, the image's uid and gid (and no other group), no_new_privs, a
 *       user namespace mapping that uid and gid alone, chroot, the working directory; it stays
 *       as the namespace's init (passing signals on) and its child execs <argv> with the
 *       tenant's environment (the image's Env, PORT, variables, secrets)
 *
 * Without the /proc and /dev mounts an image's runtime half works: Node starts, but os.cpus() (which
 * sizes its pools) reads /proc and finds none, and a child with ignored stdio opens /dev/null. The
 * service sees its own processes alone (its init, PID 1, and what it starts); `detached` makes the
 * chain a process group leader: stopping signals the group, and the init passes the signal on.
 * The tenant's environment travels in a 0600 file of the replica's runtime directory, read and
 * removed by the last step, so no host process (sh, mount, unshare, perl) runs with a tenant's
 * LD_PRELOAD or PATH, and nothing of the platform's own (REDIS_URL, keys) reaches a service.
 *
 * Needs root (namespaces, overlay, chroot); without it, a clear error: run the image with
 * `buildah run` instead (docs/publish.md, "Running an image without a container engine").
 */
import type { ChildProcess } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { spawnWatched } from "../../src/process/watchdog.ts";
import { forwardPorts, replicaRuntimeDir } from "./forward.ts";
import type { ImageConfig } from "./pull.ts";
import { UNPRIVILEGED_ID, prepareScript } from "./sandbox.ts";
import { resolveInRoot } from "./unpack.ts";

export type ImageProcessSpec = {
  /** The unpacked rootfs (unpack.ts), never written to: the process writes to an overlay over it. */
  rootfs: string;
  /** Entrypoint + Cmd; argv[0] without a `/` is looked up on the image's PATH inside the rootfs. */
  argv: string[];
  /** The image's Env, with PATH and HOME as docker defaults them. */
  env: Record<string, string>;
  /** Absolute, inside the rootfs. */
  workingDir: string;
  uid: number;
  gid: number;
};

/** docker's PATH for an image that sets none. */
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** A service still running this long after the platform is gone is killed. */
export const STOP_TIMEOUT_S = 30;

type PasswdEntry = { name: string; uid: number; gid: number; home: string };

/** `/etc/passwd` or `/etc/group` of the image, resolved inside the rootfs (never the host's): lines split on `:`. */
function imageTable(rootfs: string, file: string): string[][] {
  const path = resolveInRoot(rootfs, file, true);
  if (!lstatSync(path, { throwIfNoEntry: false })?.isFile()) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => l.split(":"));
}

const ID = /^\d+$/;

/** The image's `User` (`uid[:gid]`, `name[:group]`): ids, and the home directory where /etc/passwd names one. */
export function resolveUser(rootfs: string, user: string | undefined): { uid: number; gid: number; home: string } {
  if (!user) return { uid: 0, gid: 0, home: "/root" };
  const colon = user.indexOf(":");
  const [u, g] = colon === -1 ? [user, undefined] : [user.slice(0, colon), user.slice(colon + 1)];
  const passwd: PasswdEntry[] = imageTable(rootfs, "/etc/passwd")
    .filter((f) => f.length >= 6 && ID.test(f[2] ?? "") && ID.test(f[3] ?? ""))
    .map((f) => ({ name: f[0] as string, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || "/" }));
  const entry = ID.test(u) ? passwd.find((p) => p.uid === Number(u)) : passwd.find((p) => p.name === u);
  if (!ID.test(u) && !entry) throw new Error(`the image's user ${JSON.stringify(u)} is not in its /etc/passwd`);
  const uid = ID.test(u) ? Number(u) : (entry as PasswdEntry).uid;
  let gid = entry?.gid ?? 0;
  if (g !== undefined && g !== "") {
    if (ID.test(g)) gid = Number(g);
    else {
      const group = imageTable(rootfs, "/etc/group").find((f) => f[0] === g && ID.test(f[2] ?? ""));
      if (!group) throw new Error(`the image's group ${JSON.stringify(g)} is not in its /etc/group`);
      gid = Number(group[2]);
    }
  }
  return { uid, gid, home: entry?.home ?? "/" };
}

/**
 * How the image runs, from its config (docker's semantics): `command`, where given, replaces Cmd
 * as `docker run IMAGE command…` does. An image with neither Entrypoint nor Cmd is refused.
 * WorkingDir is made in the rootfs where missing, as docker does.
 */
export function imageProcessSpec(
  image: { config: ImageConfig },
  rootfs: string,
  command?: string[],
  options: { allowRoot?: boolean } = {},
): ImageProcessSpec {
  const config = image.config.config ?? {};
  const argv = [...(config.Entrypoint ?? []), ...(command ?? config.Cmd ?? [])];
  if (argv.length === 0) throw new Error("the image has no Entrypoint or Cmd: nothing to run");
  const env: Record<string, string> = {};
  for (const entry of config.Env ?? []) {
    const eq = entry.indexOf("=");
    // docker reads a bare NAME as "from the host": never here, where the host is the platform.
    if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  const named = resolveUser(rootfs, config.User);
  // Root only where the operator allows it; else the fixed unprivileged id (group too), as `--user` would.
  const user =
    named.uid === 0 && !options.allowRoot ? { uid: UNPRIVILEGED_ID, gid: UNPRIVILEGED_ID, home: "/" } : named;
  env.PATH ??= DEFAULT_PATH;
  env.HOME ??= user.home;
  const workingDir = posix.resolve("/", config.WorkingDir || "/");
  const wd = resolveInRoot(rootfs, workingDir, true);
  if (!existsSync(wd)) mkdirSync(wd, { recursive: true, mode: 0o755 });
  return { rootfs, argv, env, workingDir, uid: user.uid, gid: user.gid };
}

/** The first of the usual system folders holding `tool`: never a PATH a tenant could have set. */
function hostTool(tool: string, pkg: string): string {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]) if (existsSync(join(dir, tool))) return join(dir, tool);
  throw new Error(`running an image needs ${tool}, which is not installed: apt-get install ${pkg}`);
}

/** What every host helper of a replica starts with: this, and nothing of the tenant's or the platform's. */
const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LC_ALL: "C" };

/**
 * Starts the image's process in its sandbox (see the top of this file): its own process group
 * (stop it with `process.kill(-child.pid, signal)`), stdout and stderr piped, stdin closed. Its
 * environment is the spec's overlaid with `extraEnv` (PORT, HOST, the service's variables and
 * secrets) and nothing else, and only the image's command ever sees it. Each of `ports` is
 * reachable on the host's 127.0.0.1 (forward.ts) and nowhere else; each of `hostPorts` (the
 * host's loopback) on the replica's own 127.0.0.1.
 */
export function spawnImageProcess(
  spec: ImageProcessSpec,
  extraEnv: Record<string, string>,
  ports: number[] = [],
  hostPorts: number[] = [],
): ChildProcess {
  if (process.getuid?.() !== 0)
    throw new Error(
      "running an image as a process needs root (namespaces, an overlay, chroot): run platform up as root, or give it docker or podman (PLATFORM_SERVICE_RUNTIME; docs/services.md)",
    );
  const env = { ...spec.env, ...extraEnv };
  for (const [name, value] of Object.entries(env))
    if (name === "" || name.includes("=") || name.includes("\0") || value.includes("\0"))
      throw new Error(`the environment variable ${JSON.stringify(name)} cannot be passed to a process`);
  if (/[,:\\\s]/.test(spec.rootfs))
    throw new Error(
      `the image cache's path (PLATFORM_IMAGE_CACHE_DIR) cannot hold ",", ":", "\\" or spaces (overlay mount options)`,
    );
  const tools = {
    mount: hostTool("mount", "mount"),
    mkdir: hostTool("mkdir", "coreutils"),
    rm: hostTool("rm", "coreutils"),
    ln: hostTool("ln", "coreutils"),
    ip: hostTool("ip", "iproute2"),
    socat: hostTool("socat", "socat"),
    unshare: hostTool("unshare", "util-linux"),
    perl: hostTool("perl", "perl-base"),
  };
  // The scratch mount point: an empty folder beside the rootfs; each process mounts its own tmpfs
  // over it in its own namespace, so any number share it.
  const scratch = join(dirname(spec.rootfs), ".run");
  mkdirSync(scratch, { recursive: true });
  const { dir: runtime, remove } = replicaRuntimeDir();
  writeFileSync(
    join(runtime, "env"),
    Object.entries(env)
      .map(([k, v]) => `${k}=${v}\0`)
      .join(""),
    { mode: 0o600 },
  );
  const child = spawnWatched(
    tools.unshare,
    [
      "--mount",
      "--propagation",
      "private",
      "--net",
      "--ipc",
      "--uts",
      "--",
      hostTool("sh", "dash"),
      "-c",
      prepareScript(tools),
      "sh",
      scratch,
      spec.rootfs,
      spec.workingDir,
      String(spec.uid),
      String(spec.gid),
      runtime,
      ports.join(","),
      hostPorts.join(","),
      ...spec.argv,
    ],
    // Under the watchdog: the service stops when the platform process ends, even by SIGKILL
    // (a parent-death signal would not survive the change of user).
    { env: HOST_ENV, cwd: "/", output: "pipe", killAfterSeconds: STOP_TIMEOUT_S },
  ).process;
  const forwarding = forwardPorts(
    runtime,
    ports,
    (e) => {
      child.stderr?.emit("data", Buffer.from(`${e.message}\n`));
      signalGroup(child, "SIGTERM");
    },
    hostPorts,
  );
  child.once("exit", () => {
    forwarding.close();
    remove();
  });
  return child;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    child.kill(signal);
  }
}
