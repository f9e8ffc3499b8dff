/**
 * The onboarding path from a scaffold to a running image, as a team walks it (issue 23's "done
 * when"): `service create items --lang node --example` in an empty git workspace, `npm install`
 * (the lock file the image's `npm ci` needs) and its own tests, a commit, `platform publish` before
 * `registry login` (the one line saying to log in), then after it: the image `<version>-<sha>` pushed,
 * `skopeo inspect` showing its labels, and the image run with `buildah run` answering CreateItem,
 * GetItem and ListItems over Connect as its non-root user, NotFound as Connect's 404. The same for
 * `--lang python`: its image, with the Dockerfile's HEALTHCHECK, answers over gRPC (the scaffold
 * serves gRPC; docs/scaffolds.md, "Python"), its `pip install` reaching the machine's pip mirrors,
 * served to the build over HTTP on loopback (they are file:// indexes here).
 *
 * Real parts: a `platform up` (image records, the organization's key), Debian's docker-registry with
 * htpasswd, buildah with private vfs storage, the stand-in base image of
 * scripts/services/make-base-image.sh. The image's own `npm ci` reaches the npm registry from inside
 * the build. Skipped, saying why, where the image tools or the npm registry are missing, and the
 * Python part where .venv-grpc or the pip mirrors are.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { promisify } from "node:util";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../src/process/free-port.ts";
import { grpcPython, writeItemsWorkspace } from "../helpers/protos.ts";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  pullAuthFile,
  type Registry,
  pushBaseImage,
  runImage,
  startRegistry,
} from "../helpers/registry.ts";
import {
  ITEMS_PY_CLIENT,
  ITEMS_PY_CLIENT_CALL,
  npmInstall,
  npmRegistryUnavailable,
  step,
} from "../helpers/scaffold.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";
import { waitUntil } from "../helpers/wait.ts";

const unavailable = imageToolsUnavailable() ?? (await npmRegistryUnavailable());
if (unavailable) console.warn(`scaffold image test skipped: ${unavailable}`);

const run = promisify(execFile);
const PYTHON = grpcPython();
/** pip's mirrors as this machine configures them (file:// indexes), served to the image's build over HTTP. */
const PIP_MIRRORS = execFileSync("python3", ["-m", "pip", "config", "get", "global.extra-index-url"], {
  encoding: "utf8",
  stdio: ["ignore", "pipe", "ignore"],
})
  .trim()
  .split(/\s+/)
  .filter((u) => u.startsWith("file:///opt/"));
const noPythonImage = !PYTHON
  ? "no .venv-grpc (scripts/protos/setup-python.sh makes it)"
  : PIP_MIRRORS.length === 0
    ? "no file:///opt/ pip mirrors configured to serve to the build (pip config get global.extra-index-url)"
    : undefined;
if (!unavailable && noPythonImage) console.warn(`the Python scaffold's image test skipped: ${noPythonImage}`);

const USER = "team";
// Only for the throwaway registry this test starts; it reaches htpasswd and logins through stdin.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

let stack: OwnStack;
let registry: Registry;
let buildah: PrivateBuildah;
let work: string;
let env: NodeJS.ProcessEnv;
let repository: string;
let devKey: string;
const timings: Record<string, number> = {};

const cli = (args: string[]) => runCli(args, env, work);
const git = (...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd: work,
    encoding: "utf8",
  }).trim();

const registryLogin = () =>
  runCli(["registry", "login", "--username", USER, "--password-stdin"], env, work, `${PASSWORD}\n`);

describe.skipIf(unavailable !== undefined)("a scaffold, published and run as an image", () => {
  beforeAll(async () => {
    registry = await startRegistry({ [USER]: PASSWORD });
    // What the dev center's local backend pulls with (the Python image is deployed below).
    const pullAuth = await pullAuthFile(registry, USER, PASSWORD);
    stack = await startStack({ env: { PLATFORM_IMAGE_PULL_AUTH_FILE: pullAuth } });
    expect((await stack.admin("POST", "/admin/v1/orgs", { id: "acme" })).status).toBe(201);
    const key = await stack.admin<{ key: string }>("POST", "/admin/v1/keys", {
      name: "dev",
      org: "acme",
      role: "user",
    });
    devKey = key.body.key;
    buildah = await privateBuildah();
    const baseImage = await pushBaseImage(buildah, registry, USER, PASSWORD, "node");

    work = await mkdtemp(join(tmpdir(), "platform-scaffold-image-"));
    repository = `${registry.host}/acme/items`;
    await writeItemsWorkspace(work, {
      registryUrl: stack.baseUrl,
      imageRepository: repository,
      build: { builder: "buildah", args: { NODE_IMAGE: baseImage } },
    });
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
    await npmInstall(timings, "npm ci", work);
    await step(timings, "npm test", work, "npm", ["test"]);
    git("add", "-A");
    git("commit", "-q", "-m", "scaffold the service");
    const sha = git("rev-parse", "--short", "HEAD");

    const refused = await cli(["publish"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(`not logged in to ${registry.host}: run platform registry login\n`);
    const login = await registryLogin();
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
    // The image's own command (node dist/index.js), its user (1000) and working directory.
    const image = runImage(env, `${repository}:${tag}`, ["node", "dist/index.js"], { PORT: String(port) });
    try {
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
      expect(created.status, image.output()).toBe(200);
      const id = created.body.item.id as string;
      expect(created.body.item).toEqual({ id, name: "lamp", description: "from the image" });
      expect(await call("GetItem", { id })).toEqual({ status: 200, body: created.body });
      expect(await call("ListItems", {})).toMatchObject({ status: 200, body: { items: [created.body.item] } });
      expect(await call("GetItem", { id: "nope" })).toEqual({
        status: 404,
        body: { code: "not_found", message: "item nope not found" },
      });
      expect(image.output()).toContain('"store":"memory"');
    } finally {
      await image.stop();
    }
  }, 120_000);

  describe.skipIf(noPythonImage !== undefined)("the Python scaffold", () => {
    let dir: string;
    let mirror: ChildProcess | undefined;
    let pyRepository: string;
    let pyTag: string;

    beforeAll(async () => {
      // The mirrors' directory over HTTP on loopback: the build (chroot isolation) shares this network.
      const port = await freePort();
      mirror = spawn("python3", ["-m", "http.server", "--bind", "127.0.0.1", "--directory", "/opt", String(port)], {
        stdio: "ignore",
      });
      const [index, ...extra] = PIP_MIRRORS.map((u) => u.replace("file:///opt/", `http://127.0.0.1:${port}/`));
      await waitUntil(`the pip mirror server at ${index}`, async () => (await fetch(index as string)).status === 200);
      const baseImage = await pushBaseImage(buildah, registry, USER, PASSWORD, "python");
      dir = await mkdtemp(join(tmpdir(), "platform-scaffold-image-py-"));
      pyRepository = `${registry.host}/acme/items-py`;
      const args = { PYTHON_IMAGE: baseImage, PIP_INDEX_URL: index as string, PIP_EXTRA_INDEX_URL: extra.join(" ") };
      await writeItemsWorkspace(
        dir,
        {
          registryUrl: stack.baseUrl,
          imageRepository: pyRepository,
          language: "python",
          build: { builder: "buildah", args },
        },
        ["client.py"],
      );
    }, 300_000);

    afterAll(async () => {
      mirror?.kill();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("service create --lang python --example → commit → publish: <version>-<sha>, HEALTHCHECK kept", async () => {
      const created = await runCli(["service", "create", "items", "--lang", "python", "--example"], env, dir);
      expect(created.code, created.stderr).toBe(0);
      const stubs = await runCli(["proto", "generate", "--lang", "python", "--python", PYTHON as string], env, dir);
      expect(stubs.code, stubs.stderr).toBe(0);
      const gitIn = (...args: string[]) =>
        execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
          cwd: dir,
          encoding: "utf8",
        }).trim();
      gitIn("add", "-A");
      gitIn("commit", "-q", "-m", "scaffold the service");
      // The team's session with the image registry (the Node test may have made it already).
      const login = await registryLogin();
      expect(login.code, login.stderr).toBe(0);
      const started = Date.now();
      const published = await runCli(["publish"], env, dir);
      timings["python publish"] = Math.round((Date.now() - started) / 100) / 10;
      expect(published.code, published.stderr).toBe(0);
      pyTag = `0.1.0-${gitIn("rev-parse", "--short", "HEAD")}`;
      expect(published.stdout).toMatch(
        new RegExp(`^pushed ${pyRepository.replace(/[.]/g, "\\.")}:${pyTag}@sha256:[0-9a-f]{64}\\n`),
      );
      const config = JSON.parse(
        execFileSync(
          "skopeo",
          ["inspect", "--config", "--raw", "--tls-verify=false", `docker://${pyRepository}:${pyTag}`],
          {
            env,
            encoding: "utf8",
          },
        ),
      );
      expect(config.config.Healthcheck.Test).toEqual(["CMD", "python", "-m", "items_service.healthcheck"]);
      expect(config.config.User).toBe("10001:10001");
    }, 900_000);

    it("the image runs and answers CreateItem, GetItem and ListItems over gRPC; NOT_FOUND names the item", async () => {
      expect(pyTag).toBeDefined();
      const port = await freePort();
      const image = runImage(env, `${pyRepository}:${pyTag}`, ["python", "-m", "items_service"], {
        PORT: String(port),
        METRICS_PORT: "off",
      });
      try {
        await expect.poll(image.output, { timeout: 60_000 }).toContain('"ready"');
        await writeFile(join(dir, "client.py"), ITEMS_PY_CLIENT);
        const call = async (...args: string[]) =>
          JSON.parse(
            (
              await run(
                PYTHON as string,
                ["-c", `${ITEMS_PY_CLIENT_CALL}(${JSON.stringify([String(port), ...args])})`],
                {
                  cwd: dir,
                },
              )
            ).stdout,
          );
        const created = await call("create", "lamp", "from the image");
        expect(created, image.output()).toMatchObject({ name: "lamp", description: "from the image" });
        expect(await call("get", created.id)).toEqual(created);
        expect(await call("list")).toEqual([created]);
        expect(await call("get", "nope")).toEqual({ code: "NOT_FOUND", message: "item nope not found" });
      } finally {
        await image.stop();
      }
    }, 120_000);

    it("deployed by the dev center, it answers Connect calls through the gateway, transcoded to gRPC", async () => {
      expect(pyTag).toBeDefined();
      const deployed = await runCli(
        ["dev-center", "service", "deploy", "items-py", "--tag", pyTag, "--wait"],
        env,
        dir,
      );
      expect(deployed.code, `${deployed.stdout}${deployed.stderr}\n${stack.output()}`).toBe(0);
      const rpc = async (method: string, body: unknown) => {
        const res = await fetch(`${stack.baseUrl}/rpc/platform.items.v1.ItemService/${method}`, {
          method: "POST",
          headers: { authorization: `Bearer ${devKey}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        return { status: res.status, body: (await res.json()) as Record<string, any> };
      };
      const created = await rpc("CreateItem", { name: "kettle", description: "through the gateway" });
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      expect(await rpc("GetItem", { id: created.body.item.id })).toEqual(created);
      expect(await rpc("GetItem", { id: "nope" })).toEqual({
        status: 404,
        body: { code: "not_found", message: "item nope not found" },
      });
      const status = JSON.parse(
        (await runCli(["dev-center", "rollout", "status", "items-py", "--json"], env, dir)).stdout,
      );
      expect(status.replicas).toEqual([expect.objectContaining({ tag: pyTag, state: "ready" })]);
    }, 300_000);
  });
});
