/**
 * A published image turned into a running process without a container engine (scaler/container-images/,
 * issue 24), for real: Debian's docker-registry with htpasswd, buildah with private vfs storage, the
 * stand-in node base image, and on it a tiny server image (a file added then deleted by a later
 * `RUN rm`, so a whiteout; ENV, WORKDIR, USER 1000:1000, CMD). It is pulled by digest through the
 * team's auth.json, unpacked and run on a free port, and its answer says who it runs as, where, with
 * which environment (the image's, PORT, and none of the platform's own, e.g. REDIS_URL) and that the
 * deleted file is gone. A wrong digest is a clear error; a second pull comes from the cache without
 * skopeo; stopping kills the process group. Skipped, saying why, where the image tools are missing.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullImage, repositoryKey } from "../../scaler/container-images/pull.ts";
import { imageProcessSpec, spawnImageProcess } from "../../scaler/container-images/run.ts";
import { unpackImage } from "../../scaler/container-images/unpack.ts";
import { freePort } from "../../src/process/free-port.ts";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  pushBaseImage,
  type Registry,
  startRegistry,
  withStdin,
} from "../helpers/registry.ts";
import { readUntil } from "../helpers/wait.ts";

const unavailable = imageToolsUnavailable();
if (unavailable) console.warn(`image runner test skipped: ${unavailable}`);

const run = promisify(execFile);
const USER = "team";
// Only for the throwaway registry this test starts; it reaches htpasswd and logins through stdin.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

const SERVER_JS = `
const http = require("node:http");
const fs = require("node:fs");
http
  .createServer((req, res) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({
      uid: process.getuid(),
      gid: process.getgid(),
      cwd: process.cwd(),
      greeting: process.env.GREETING,
      redis: process.env.REDIS_URL ?? null,
      env: Object.keys(process.env).sort(),
      oldExists: fs.existsSync("/app/old.txt"),
      random: require("node:crypto").randomBytes(4).toString("hex").length,
      // Both need the mounts run.ts makes: os.cpus() reads /proc; a child with ignored stdio opens /dev/null.
      cpus: require("node:os").cpus().length,
      devNull: (fs.writeFileSync("/dev/null", "x"), true),
    }));
  })
  .listen(Number(process.env.PORT), process.env.HOST, () => console.log("listening on " + process.env.PORT));
`;

let registry: Registry;
let buildah: PrivateBuildah;
let work: string;
let authFile: string;
let repository: string;
let digest: string;
const timings: Record<string, number> = {};

async function timed<T>(name: string, f: () => Promise<T>): Promise<T> {
  const start = Date.now();
  try {
    return await f();
  } finally {
    timings[name] = Date.now() - start;
  }
}

describe.skipIf(unavailable !== undefined)("a published image, pulled by digest and run as a process", () => {
  beforeAll(async () => {
    registry = await startRegistry({ [USER]: PASSWORD });
    buildah = await privateBuildah();
    const base = await timed("base image", () => pushBaseImage(buildah, registry, USER, PASSWORD, "node"));
    await withStdin(
      "buildah",
      ["login", "--tls-verify=false", "--username", USER, "--password-stdin", registry.host],
      `${PASSWORD}\n`,
      buildah.env,
    );
    authFile = join(buildah.env.XDG_RUNTIME_DIR as string, "containers", "auth.json");
    work = await mkdtemp(join(tmpdir(), "platform-image-runner-"));
    await writeFile(join(work, "server.js"), SERVER_JS);
    await writeFile(join(work, "old.txt"), "to be deleted by a later layer\n");
    await writeFile(
      join(work, "Containerfile"),
      [
        `FROM ${base}`,
        "COPY server.js old.txt /app/",
        "RUN rm /app/old.txt",
        "ENV GREETING=hello",
        "WORKDIR /app",
        "USER 1000:1000",
        'CMD ["node", "server.js"]',
        "",
      ].join("\n"),
    );
    repository = `${registry.host}/acme/runner`;
    await timed("build and push", async () => {
      await run(
        "buildah",
        ["build", "--isolation", "chroot", "-f", join(work, "Containerfile"), "-t", `${repository}:1`, work],
        { env: buildah.env, timeout: 120_000 },
      );
      await run("buildah", ["push", "--tls-verify=false", "--digestfile", join(work, "digest"), `${repository}:1`], {
        env: buildah.env,
        timeout: 120_000,
      });
    });
    digest = (await readFile(join(work, "digest"), "utf8")).trim();
  }, 300_000);

  afterAll(async () => {
    console.log(`image runner timings (ms): ${JSON.stringify(timings)}`);
    await registry?.stop();
    await buildah?.remove();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("pulls by digest, unpacks and runs it as its user, in its directory, with its environment and no other", async () => {
    const cacheDir = join(work, "cache");
    // Two pulls at once share one skopeo.
    const [image, again] = await timed("pull", () =>
      Promise.all([
        pullImage({ repository, digest, cacheDir, authFile }),
        pullImage({ repository, digest, cacheDir, authFile }),
      ]),
    );
    expect(again).toEqual(image);
    expect(image.manifestDigest).toBe(digest);
    expect(image.config.config?.User).toBe("1000:1000");
    const rootfs = await timed("unpack", () => unpackImage(image, cacheDir));
    expect(existsSync(join(rootfs, "app/server.js"))).toBe(true);
    expect(existsSync(join(rootfs, "app/old.txt"))).toBe(false);

    const spec = imageProcessSpec(image, rootfs);
    expect(spec).toMatchObject({ argv: ["node", "server.js"], workingDir: "/app", uid: 1000, gid: 1000 });
    expect(spec.env.GREETING).toBe("hello");

    const port = await freePort();
    // A platform variable in this (the platform's) process: it must not reach the service.
    process.env.REDIS_URL = "redis://platform-secret@127.0.0.1:6379";
    const child = spawnImageProcess(spec, { PORT: String(port), HOST: "127.0.0.1" }, [port]);
    const exited = new Promise((res) => child.once("exit", (code, signal) => res(signal ?? code)));
    let out = "";
    child.stdout?.on("data", (d) => (out += d));
    child.stderr?.on("data", (d) => (out += d));
    try {
      const answer = await timed("start and answer", async () => {
        const r = await readUntil(
          "the image's process to answer",
          () => fetch(`http://127.0.0.1:${port}/`).catch(() => undefined),
          (res) => res !== undefined || child.exitCode !== null,
          { detail: () => `exit ${child.exitCode}:\n${out}` },
        );
        if (!r) throw new Error(`the image's process exited (${child.exitCode}):\n${out}`);
        return (await r.json()) as Record<string, unknown>;
      });
      expect(answer).toMatchObject({
        uid: 1000,
        gid: 1000,
        cwd: "/app",
        greeting: "hello",
        redis: null,
        oldExists: false,
        random: 8,
        devNull: true,
      });
      expect(answer.cpus).toBeGreaterThan(0);
      // Exactly the image's Env (with docker's defaults) and what the caller passed.
      expect(answer.env).toEqual([...new Set([...Object.keys(spec.env), "PORT", "HOST"])].sort());
      expect(out).toContain(`listening on ${port}`);
    } finally {
      delete process.env.REDIS_URL;
      if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, "SIGTERM");
      expect(await exited).toBe("SIGTERM");
    }
    // Stopped, the port is free again and the cached rootfs is as unpacked.
    await expect(fetch(`http://127.0.0.1:${port}/`)).rejects.toThrow();
    expect(existsSync(join(rootfs, "proc/self"))).toBe(false);
  });

  it("a second pull comes from the cache without skopeo", async () => {
    const cacheDir = join(work, "cache");
    // No skopeo to run: the cache alone answers (how fast: npm run bench:image-pull).
    const image = await pullImage({ repository, digest, cacheDir, authFile, skopeo: "/nonexistent/skopeo" });
    expect(image.manifestDigest).toBe(digest);
    expect(await unpackImage(image, cacheDir)).toBe(
      join(cacheDir, "rootfs", repositoryKey(repository), digest.slice("sha256:".length)),
    );
  });

  it("a manifest list's digest pulls this machine's image from it", async () => {
    const list = `${repository}:list`;
    await run("buildah", ["manifest", "create", list], { env: buildah.env });
    await run("buildah", ["manifest", "add", list, `containers-storage:${repository}:1`], { env: buildah.env });
    await run(
      "buildah",
      [
        "manifest",
        "push",
        "--all",
        "--tls-verify=false",
        "--digestfile",
        join(work, "list-digest"),
        list,
        `docker://${list}`,
      ],
      { env: buildah.env, timeout: 60_000 },
    );
    const listDigest = (await readFile(join(work, "list-digest"), "utf8")).trim();
    expect(listDigest).not.toBe(digest);
    const image = await pullImage({ repository, digest: listDigest, cacheDir: join(work, "cache-list"), authFile });
    expect([image.digest, image.manifestDigest, image.config.config?.User]).toEqual([listDigest, digest, "1000:1000"]);
  });

  it("a digest the registry does not hold, or no session, is a clear error without the password", async () => {
    const cacheDir = join(work, "cache-errors");
    const wrong = `sha256:${"0".repeat(64)}`;
    const missing = pullImage({ repository, digest: wrong, cacheDir, authFile });
    await expect(missing).rejects.toThrow(
      `pulling ${repository}@${wrong} failed: the registry holds no image with that digest in ${repository}`,
    );
    await expect(missing).rejects.not.toThrow(PASSWORD);
    const noSession = join(work, "empty-auth.json");
    await writeFile(noSession, "{}");
    const refused = pullImage({ repository, digest, cacheDir, authFile: noSession });
    await expect(refused).rejects.toThrow(`not logged in to ${registry.host}`);
    await expect(pullImage({ repository, digest, cacheDir, authFile, skopeo: "/nonexistent/skopeo" })).rejects.toThrow(
      /needs skopeo, which is not installed: apt-get install skopeo/,
    );
    expect(existsSync(join(cacheDir, "pulled", repositoryKey(repository), digest.slice("sha256:".length)))).toBe(false);
    console.log(
      `image runner errors:\n${(await Promise.all([missing, refused].map((p) => p.catch((e: Error) => e.message)))).join("\n")}`,
    );
  });
});
