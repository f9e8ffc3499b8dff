/**
 * An unpacked image run as a supervised child process, without a container engine (issue 24): its
 * config resolved as docker would (Entrypoint + Cmd, Env, WorkingDir, User by id or by name in the
 * image's own /etc/passwd and /etc/group), then util-linux `unshare`, which needs no shell or any
 * other tool in the image (chroot(8) would need one to change directory):
 *
 *   unshare --mount --propagation private -- sh -c <prepare> …      (the host's sh and mount)
 *     mounts, seen by this process alone and gone when it ends, so nothing needs cleaning up:
 *       a tmpfs as scratch, and over it an overlay of the cached rootfs (read-only below, so a
 *       process never changes the cache its next replica starts from; what it writes lives in
 *       memory and goes with it), /proc, a /dev tmpfs with null, zero, full, random, urandom and
 *       tty bound from the host's, /dev/shm, and the host's /etc/resolv.conf and /etc/hosts
 *       (the network is the host's)
 *     exec unshare --root=<overlay> --wd=<WorkingDir> --setuid U --setgid G -- <argv>
 *
 * Without them an image's runtime half works: Node starts, but os.cpus() (which sizes its pools)
 * reads /proc and finds none, and a child with ignored stdio, or Python's subprocess, opens /dev/null.
 * Each exec replaces the one before, so the child's pid is the service's own, and `detached` makes
 * it a process group leader: stopping kills the group. The environment is exactly the image's Env
 * with `extraEnv` over it: nothing of the platform's own (REDIS_URL, keys) reaches a service.
 * Caveat: the host's sh, mount and unshare run under that environment until the last exec, so an
 * image's LD_PRELOAD or LD_LIBRARY_PATH applies to them too (resolved on the host).
 *
 * Needs root (a mount namespace, overlay, chroot); without it, a clear error: run the image with
 * `buildah run` instead (docs/publish.md, "Running an image without a container engine").
 */
import type { ChildProcess } from "node:child_process";
import { spawnWatched } from "../../src/process/watchdog.ts";
import { existsSync, lstatSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import type { ImageConfig } from "./pull.ts";
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
export function imageProcessSpec(image: { config: ImageConfig }, rootfs: string, command?: string[]): ImageProcessSpec {
  const config = image.config.config ?? {};
  const argv = [...(config.Entrypoint ?? []), ...(command ?? config.Cmd ?? [])];
  if (argv.length === 0) throw new Error("the image has no Entrypoint or Cmd: nothing to run");
  const env: Record<string, string> = {};
  for (const entry of config.Env ?? []) {
    const eq = entry.indexOf("=");
    // docker reads a bare NAME as "from the host": never here, where the host is the platform.
    if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  const user = resolveUser(rootfs, config.User);
  env.PATH ??= DEFAULT_PATH;
  env.HOME ??= user.home;
  const workingDir = posix.resolve("/", config.WorkingDir || "/");
  const wd = resolveInRoot(rootfs, workingDir, true);
  if (!existsSync(wd)) mkdirSync(wd, { recursive: true, mode: 0o755 });
  return { rootfs, argv, env, workingDir, uid: user.uid, gid: user.gid };
}

/** The first of the usual system folders holding `tool`: never the image's PATH, which the env carries. */
function hostTool(tool: string, pkg: string): string {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]) if (existsSync(join(dir, tool))) return join(dir, tool);
  throw new Error(`running an image needs ${tool}, which is not installed: apt-get install ${pkg}`);
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The mounts (see the top of this file), then the last exec into the image. Arguments: scratch, rootfs, working dir, uid, gid, whether the env names PWD (`1`, `0`) and its value, argv…. */
function prepareScript(): string {
  const [mount, mkdir, rm, ln, unshare] = [
    hostTool("mount", "mount"),
    hostTool("mkdir", "coreutils"),
    hostTool("rm", "coreutils"),
    hostTool("ln", "coreutils"),
    hostTool("unshare", "util-linux"),
  ].map(q);
  return [
    "set -e",
    // sh exports PWD itself (the host's directory): keep it only where the env named one.
    'if [ "$6" = 1 ]; then export PWD="$7"; else unset PWD; fi',
    'M="$1"; L="$2"; W="$3"; U="$4"; G="$5"; shift 7',
    `${mount} -t tmpfs -o mode=0755 tmpfs "$M"`,
    `${mkdir} "$M/upper" "$M/work" "$M/root"`,
    `${mount} -t overlay overlay -o "lowerdir=$L,upperdir=$M/upper,workdir=$M/work" "$M/root"`,
    'R="$M/root"',
    // A symlink or file where /proc or /dev should be is replaced (in the overlay): a mount never follows the image's links.
    `for d in proc dev; do if [ -L "$R/$d" ] || [ ! -d "$R/$d" ]; then ${rm} -rf "$R/$d"; ${mkdir} "$R/$d"; fi; done`,
    `${mount} -t proc -o nosuid,nodev,noexec proc "$R/proc"`,
    `${mount} -t tmpfs -o nosuid,mode=0755 tmpfs "$R/dev"`,
    `for n in null zero full random urandom tty; do if [ -e "/dev/$n" ]; then : > "$R/dev/$n"; ${mount} --bind "/dev/$n" "$R/dev/$n"; fi; done`,
    `${mkdir} "$R/dev/shm" "$R/dev/pts"`,
    `${mount} -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$R/dev/shm"`,
    `${ln} -s /proc/self/fd "$R/dev/fd"; ${ln} -s /proc/self/fd/0 "$R/dev/stdin"; ${ln} -s /proc/self/fd/1 "$R/dev/stdout"; ${ln} -s /proc/self/fd/2 "$R/dev/stderr"`,
    `if [ -d "$R/etc" ] && [ ! -L "$R/etc" ]; then for f in resolv.conf hosts; do if [ -f "/etc/$f" ]; then`,
    `  if [ -L "$R/etc/$f" ] || [ -d "$R/etc/$f" ]; then ${rm} -rf "$R/etc/$f"; fi; [ -e "$R/etc/$f" ] || : > "$R/etc/$f"`,
    `  ${mount} --bind "/etc/$f" "$R/etc/$f"; ${mount} -o remount,bind,ro "$R/etc/$f"`,
    "fi; done; fi",
    `exec ${unshare} --root="$R" --wd="$W" --setuid "$U" --setgid "$G" -- "$@"`,
  ].join("\n");
}

/**
 * Starts the image's process (see the top of this file): its own process group (stop it with
 * `process.kill(-child.pid, signal)`), stdout and stderr piped, stdin closed. The environment is
 * the spec's overlaid with `extraEnv` (PORT, HOST, the service's variables and secrets) and
 * nothing else.
 */
export function spawnImageProcess(spec: ImageProcessSpec, extraEnv: Record<string, string>): ChildProcess {
  if (process.getuid?.() !== 0)
    throw new Error(
      "running an image as a process needs root (a mount namespace, an overlay and chroot): run platform up as root, or give it docker or podman (PLATFORM_SERVICE_RUNTIME; docs/services.md)",
    );
  const env = { ...spec.env, ...extraEnv };
  for (const [name, value] of Object.entries(env))
    if (name === "" || name.includes("=") || name.includes("\0") || value.includes("\0"))
      throw new Error(`the environment variable ${JSON.stringify(name)} cannot be passed to a process`);
  // The scratch mount point: an empty folder beside the rootfs; each process mounts its own tmpfs
  // over it in its own namespace, so any number share it.
  const scratch = join(dirname(spec.rootfs), ".run");
  if (/[,:\\\s]/.test(spec.rootfs))
    throw new Error(
      `the image cache's path (PLATFORM_IMAGE_CACHE_DIR) cannot hold ",", ":", "\\" or spaces (overlay mount options)`,
    );
  mkdirSync(scratch, { recursive: true });
  return spawnWatched(
    hostTool("unshare", "util-linux"),
    [
      "--mount",
      "--propagation",
      "private",
      "--",
      hostTool("sh", "dash"),
      "-c",
      prepareScript(),
      "sh",
      scratch,
      spec.rootfs,
      spec.workingDir,
      String(spec.uid),
      String(spec.gid),
      env.PWD === undefined ? "0" : "1",
      env.PWD ?? "",
      ...spec.argv,
    ],
    // Under the watchdog: the service stops when the platform process ends, even by SIGKILL
    // (a parent-death signal would not survive the change of user at exec).
    { env, cwd: "/", output: "pipe", killAfterSeconds: STOP_TIMEOUT_S },
  ).process;
}
