/**
 * Real image tooling for the publish tests (docs/publish.md): Debian's `docker-registry` on a free
 * loopback port with htpasswd authentication (its config and storage in a temp dir), and a private
 * buildah: its own storage (vfs, under a temp dir: vfs grows by hundreds of MB a build, so it is
 * removed after) and its own sessions (`XDG_RUNTIME_DIR`, 0700; a REGISTRY_AUTH_FILE that does not
 * exist yet would break every buildah command). `imageToolsUnavailable()` says what is missing,
 * for a skip that names it. Also: a stand-in base image pushed, and an image run with `buildah run`.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "../../src/process/free-port.ts";
import { fileURLToPath } from "node:url";
import { waitUntil } from "./wait.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const run = promisify(execFile);

const TOOLS: [string, string][] = [
  ["buildah", "buildah"],
  ["docker-registry", "docker-registry"],
  ["htpasswd", "apache2-utils"],
  ["skopeo", "skopeo"],
];

/** Why the publish tests cannot run here, or undefined when they can. */
export function imageToolsUnavailable(): string | undefined {
  const missing = TOOLS.filter(
    ([bin]) => !["/usr/bin", "/usr/sbin", "/usr/local/bin"].some((d) => existsSync(join(d, bin))),
  );
  if (missing.length > 0)
    return `missing ${missing.map(([bin, pkg]) => (bin === pkg ? bin : `${bin} (${pkg})`)).join(", ")}: apt-get install ${missing.map(([, pkg]) => pkg).join(" ")} (.ci/run installs them)`;
  if (process.getuid?.() !== 0) return "buildah builds here as root only (vfs storage, chroot isolation)";
  return undefined;
}

/**
 * A token-signing key for the gateway (PEM EC P-256) and a self-signed certificate of it for the
 * registry's rootcertbundle, in `dir`.
 */
export async function tokenKeyPair(dir: string): Promise<{ key: string; cert: string }> {
  const [key, cert] = [join(dir, "registry-token.key"), join(dir, "registry-token.crt")];
  await run("openssl", ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key]);
  await run("openssl", ["req", "-new", "-x509", "-key", key, "-out", cert, "-days", "2", "-subj", "/CN=platform"]);
  return { key, cert };
}

/** Feeds `input` to a program's stdin (a password: never an argument). */
export function withStdin(program: string, args: string[], input: string, env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { env, stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`${program} exited ${code}: ${out}`))));
    child.stdin.end(input);
  });
}

export type Registry = {
  /** `127.0.0.1:PORT` */
  host: string;
  stop: () => Promise<void>;
};

/** Docker Distribution's token authentication: the token server (a platform gateway) and the certificate of its key. */
export type TokenAuth = { realm: string; service: string; issuer: string; rootCertBundle: string };

/** A registry that lets in `users` (name → password) and no one else; with `token`, whoever its token server vouches for instead. */
export async function startRegistry(users: Record<string, string>, token?: TokenAuth): Promise<Registry> {
  const dir = await mkdtemp(join(tmpdir(), "platform-registry-"));
  let htpasswd = "";
  for (const [user, password] of Object.entries(users))
    htpasswd += await withStdin("htpasswd", ["-Bin", user], `${password}\n`);
  await writeFile(join(dir, "htpasswd"), htpasswd);
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  await writeFile(
    join(dir, "config.yml"),
    [
      "version: 0.1",
      "log:",
      "  level: warn",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${join(dir, "data")}`,
      "http:",
      `  addr: ${host}`,
      "auth:",
      ...(token
        ? [
            "  token:",
            `    realm: ${token.realm}`,
            `    service: ${token.service}`,
            `    issuer: ${token.issuer}`,
            `    rootcertbundle: ${token.rootCertBundle}`,
          ]
        : ["  htpasswd:", "    realm: platform-test", `    path: ${join(dir, "htpasswd")}`]),
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn("docker-registry", ["serve", join(dir, "config.yml")], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout?.on("data", (d) => (log += d));
  child.stderr?.on("data", (d) => (log += d));
  await waitUntil(
    `docker-registry to start on ${host}`,
    async () => child.exitCode !== null || (await fetch(`http://${host}/v2/`)).status === 401,
    { timeoutMs: 15_000, detail: () => log },
  );
  if (child.exitCode !== null) throw new Error(`docker-registry exited (${child.exitCode}):\n${log}`);
  return {
    host,
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export type PrivateBuildah = {
  /** CONTAINERS_STORAGE_CONF (private vfs storage) and a fresh XDG_RUNTIME_DIR: no session yet. */
  env: NodeJS.ProcessEnv;
  /** Another private XDG_RUNTIME_DIR over the same storage, for logins apart from `env`'s. */
  sessionEnv: () => Promise<NodeJS.ProcessEnv>;
  remove: () => Promise<void>;
};

export async function privateBuildah(base: NodeJS.ProcessEnv = process.env): Promise<PrivateBuildah> {
  const dir = await mkdtemp(join(tmpdir(), "platform-buildah-"));
  const conf = join(dir, "storage.conf");
  await writeFile(
    conf,
    `[storage]\ndriver = "vfs"\ngraphroot = "${join(dir, "graph")}"\nrunroot = "${join(dir, "run")}"\n`,
  );
  let sessions = 0;
  const sessionEnv = async (): Promise<NodeJS.ProcessEnv> => {
    const xdg = join(dir, `xdg-${sessions++}`);
    await mkdir(xdg, { mode: 0o700 });
    await chmod(xdg, 0o700);
    return {
      ...base,
      CONTAINERS_STORAGE_CONF: conf,
      XDG_RUNTIME_DIR: xdg,
      REGISTRY_AUTH_FILE: undefined,
      STORAGE_DRIVER: undefined,
      BUILDAH_ISOLATION: undefined,
    };
  };
  const env = await sessionEnv();
  return {
    env,
    sessionEnv,
    remove: async () => {
      // Working containers first (`buildah from`), so nothing in the storage is in use.
      await run("buildah", ["rm", "--all"], { env }).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A stand-in base image (scripts/services/make-base-image.sh) pushed to `registry` through an
 * operator's session of its own, apart from the team's (`buildah.env`), which has none yet.
 */
export async function pushBaseImage(
  buildah: PrivateBuildah,
  registry: Registry,
  user: string,
  password: string,
  kind: "node" | "python",
): Promise<string> {
  const operator = await buildah.sessionEnv();
  await withStdin(
    "buildah",
    ["login", "--tls-verify=false", "--username", user, "--password-stdin", registry.host],
    `${password}\n`,
    operator,
  );
  const reference = `${registry.host}/base/${kind === "node" ? "node:24-slim" : "python:3.11-slim"}`;
  await run(join(ROOT, "scripts/services/make-base-image.sh"), [kind, reference], { env: operator, timeout: 300_000 });
  return reference;
}

export type RunningImage = { output: () => string; stop: () => Promise<void> };

/**
 * Runs an image's `command` as the image would (its user, working directory and environment, plus
 * `env`) with `buildah run` and chroot isolation, in a process group of its own; `stop` ends the
 * group and removes the working container.
 */
export function runImage(
  buildahEnv: NodeJS.ProcessEnv,
  reference: string,
  command: string[],
  env: Record<string, string>,
): RunningImage {
  const container = execFileSync("buildah", ["from", "-q", reference], { env: buildahEnv, encoding: "utf8" }).trim();
  const child = spawn(
    "buildah",
    [
      "run",
      "--isolation",
      "chroot",
      ...Object.entries(env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
      container,
      "--",
      ...command,
    ],
    { env: buildahEnv, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  let out = "";
  child.stdout?.on("data", (d) => (out += d));
  child.stderr?.on("data", (d) => (out += d));
  return {
    output: () => out,
    stop: async () => {
      if (child.pid !== undefined && child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        process.kill(-child.pid, "SIGTERM");
        await exited;
      }
      execFileSync("buildah", ["rm", container], { env: buildahEnv });
    },
  };
}

/**
 * A containers auth.json with `user`'s login to `registry` (mode 0600, in a temp dir): what
 * `platform up` is given as PLATFORM_IMAGE_PULL_AUTH_FILE to pull published images with.
 */
export async function pullAuthFile(registry: Registry, user: string, password: string): Promise<string> {
  const file = join(await mkdtemp(join(tmpdir(), "platform-pull-")), "auth.json");
  const auth = Buffer.from(`${user}:${password}`).toString("base64");
  await writeFile(file, JSON.stringify({ auths: { [registry.host]: { auth } } }), { mode: 0o600 });
  return file;
}
