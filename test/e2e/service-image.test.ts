/**
 * The onboarding path from a scaffold to a running image, as a team walks it (issue 23's "done
 * when"): `service create items --lang node --example` in an empty git workspace, `npm install`
 * (the lock file the image's `npm ci` needs) and its own tests, a commit, `platform publish` before
 * `registry login` (the one line saying to log in), then after it: the image `<version>-<sha>` pushed,
 * `skopeo inspect` showing its labels, and the image run with `buildah run` answering CreateItem,
 * GetItem and ListItems over Connect as its non-root user, NotFound as Connect's 404.
 *
 * Real parts: a `platform up` (image records, the organization's key), Debian's docker-registry with
 * htpasswd, buildah with private vfs storage, the stand-in base image of
 * scripts/services/make-base-image.sh. The image's own `npm ci` reaches the npm registry from inside
 * the build. Skipped, saying why, where the image tools or the npm registry are missing.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../src/process/free-port.ts";
import { BUF_YAML, ITEMS_PATH, ITEMS_PROTO, writeFiles } from "../helpers/protos.ts";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  type Registry,
  startRegistry,
  withStdin,
} from "../helpers/registry.ts";
import { npmInstall, npmRegistryUnavailable, step } from "../helpers/scaffold.ts";
import { BIN, type CliResult, runCli, type Stack, startStack } from "../helpers/stack.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const unavailable = imageToolsUnavailable() ?? (await npmRegistryUnavailable());
if (unavailable) console.warn(`scaffold image test skipped: ${unavailable}`);

const USER = "team";
// Only for the throwaway registry this test starts; it reaches htpasswd and logins through stdin.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

let stack: Stack;
let registry: Registry;
let buildah: PrivateBuildah;
let work: string;
let env: NodeJS.ProcessEnv;
let repository: string;
const timings: Record<string, number> = {};

const cli = (args: string[]) => runCli(args, env, work);
const git = (...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd: work,
    encoding: "utf8",
  }).trim();

function loginWithStdin(): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, "registry", "login", "--username", USER, "--password-stdin"], {
      cwd: work,
      env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(`${PASSWORD}\n`);
  });
}

describe.skipIf(unavailable !== undefined)("a scaffold, published and run as an image", () => {
  beforeAll(async () => {
    stack = await startStack();
    expect((await stack.admin("POST", "/admin/v1/orgs", { id: "acme" })).status).toBe(201);
    const key = await stack.admin<{ key: string }>("POST", "/admin/v1/keys", {
      name: "dev",
      org: "acme",
      role: "user",
    });
    registry = await startRegistry({ [USER]: PASSWORD });
    buildah = await privateBuildah();
    const operator = await buildah.sessionEnv();
    await withStdin(
      "buildah",
      ["login", "--tls-verify=false", "--username", USER, "--password-stdin", registry.host],
      `${PASSWORD}\n`,
      operator,
    );
    const baseImage = `${registry.host}/base/node:24-slim`;
    execFileSync(join(ROOT, "scripts/services/make-base-image.sh"), ["node", baseImage], { env: operator });

    work = await mkdtemp(join(tmpdir(), "platform-scaffold-image-"));
    repository = `${registry.host}/acme/items`;
    await writeFiles(work, {
      ".platformrc.json": `${JSON.stringify(
        {
          registryUrl: stack.baseUrl,
          orgId: "acme",
          imageRepository: repository,
          build: { builder: "buildah", args: { NODE_IMAGE: baseImage } },
        },
        null,
        2,
      )}\n`,
      "buf.yaml": BUF_YAML,
      [ITEMS_PATH]: ITEMS_PROTO,
      ".git/info/exclude": ".config/\n",
    });
    git("init", "-q");
    env = {
      ...buildah.env,
      PLATFORM_BASE_URL: undefined,
      PLATFORM_API_KEY: key.body.key,
      PLATFORM_CONFIG_DIR: join(work, ".config"),
    };
    const proto = await cli(["proto", "publish"]);
    expect(proto.code, proto.stderr).toBe(0);
  }, 300_000);

  afterAll(async () => {
    await stack?.stop();
    await registry?.stop();
    await buildah?.remove();
    if (work) await rm(work, { recursive: true, force: true });
    if (Object.keys(timings).length > 0) console.log("scaffold image timings (s):", JSON.stringify(timings));
  });

  let tag: string;

  it("service create → npm install and test → commit → publish refused before login → publish after it", async () => {
    const created = await cli(["service", "create", "items", "--lang", "node", "--example"]);
    expect(created.code, created.stderr).toBe(0);
    await npmInstall(timings, "npm install", work);
    await step(timings, "npm test", work, "npm", ["test"]);
    git("add", "-A");
    git("commit", "-q", "-m", "scaffold the service");
    const sha = git("rev-parse", "--short", "HEAD");

    const refused = await cli(["publish"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(`not logged in to ${registry.host}: run platform registry login\n`);
    const login = await loginWithStdin();
    expect(login.code, login.stderr).toBe(0);

    const started = Date.now();
    const published = await cli(["publish"]);
    timings.publish = Math.round((Date.now() - started) / 100) / 10;
    expect(published.code, published.stderr).toBe(0);
    tag = `0.1.0-${sha}`;
    expect(published.stdout).toMatch(
      new RegExp(`^pushed ${repository.replace(/[.]/g, "\\.")}:${tag}@sha256:[0-9a-f]{64}\\n`),
    );
    expect(published.stdout).toContain(`recorded items:${tag} in organization acme (implements platform.items.v1@`);
    const inspected = JSON.parse(
      execFileSync("skopeo", ["inspect", "--tls-verify=false", `docker://${repository}:${tag}`], {
        env,
        encoding: "utf8",
      }),
    );
    expect(inspected.RepoTags).toContain(tag);
    // The Dockerfile's HEALTHCHECK, kept: Docker's image format, which publish asks buildah for.
    const config = JSON.parse(
      execFileSync("skopeo", ["inspect", "--config", "--raw", "--tls-verify=false", `docker://${repository}:${tag}`], {
        env,
        encoding: "utf8",
      }),
    );
    expect(config.config.Healthcheck.Test).toEqual(["CMD", "node", "-e", expect.stringContaining("/readyz")]);
    expect(config.config.User).toBe("1000:1000");
    expect(inspected.Labels).toMatchObject({
      "org.opencontainers.image.version": "0.1.0",
      "org.opencontainers.image.revision": git("rev-parse", "HEAD"),
    });
  }, 900_000);

  it("the image runs as its non-root user and answers CreateItem, GetItem and ListItems; NotFound is Connect's 404", async () => {
    expect(tag).toBeDefined();
    const port = await freePort();
    const container = execFileSync("buildah", ["from", "-q", `${repository}:${tag}`], {
      env,
      encoding: "utf8",
    }).trim();
    let child: ChildProcess | undefined;
    let out = "";
    try {
      // The image's own command (node dist/index.js), its user (1000) and working directory.
      child = spawn(
        "buildah",
        ["run", "--isolation", "chroot", "--env", `PORT=${port}`, container, "--", "node", "dist/index.js"],
        { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
      );
      child.stdout?.on("data", (d) => (out += d));
      child.stderr?.on("data", (d) => (out += d));
      const base = `http://127.0.0.1:${port}/platform.items.v1.ItemService`;
      await expect
        .poll(
          () =>
            fetch(`http://127.0.0.1:${port}/readyz`).then(
              (r) => r.status,
              () => 0,
            ),
          { timeout: 60_000 },
        )
        .toBe(200);
      const call = async (method: string, body: unknown) => {
        const res = await fetch(`${base}/${method}`, {
          method: "POST",
          headers: { "content-type": "application/json", "connect-protocol-version": "1" },
          body: JSON.stringify(body),
        });
        return { status: res.status, body: (await res.json()) as Record<string, any> };
      };
      const created = await call("CreateItem", { name: "lamp", description: "from the image" });
      expect(created.status, out).toBe(200);
      const id = created.body.item.id as string;
      expect(created.body.item).toEqual({ id, name: "lamp", description: "from the image" });
      expect(await call("GetItem", { id })).toEqual({ status: 200, body: created.body });
      expect(await call("ListItems", {})).toMatchObject({ status: 200, body: { items: [created.body.item] } });
      expect(await call("GetItem", { id: "nope" })).toEqual({
        status: 404,
        body: { code: "not_found", message: "item nope not found" },
      });
      expect(out).toContain('"store":"memory"');
    } finally {
      if (child?.pid !== undefined && child.exitCode === null) {
        const exited = new Promise((r) => child?.once("exit", r));
        process.kill(-child.pid, "SIGTERM");
        await exited;
      }
      execFileSync("buildah", ["rm", container], { env });
    }
  }, 120_000);
});
