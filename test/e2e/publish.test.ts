/**
 * `platform publish` and `platform registry login` with real parts (docs/publish.md): a real
 * `platform up` for the image records and the organization's keys, Debian's docker-registry on
 * loopback with htpasswd authentication, buildah with private vfs storage and sessions, a stand-in
 * Node base image made by scripts/services/make-base-image.sh and passed as NODE_IMAGE. A small
 * fixture service (a package.json and a Node HTTP server answering a Connect unary JSON call) in a
 * temp git workspace whose ItemService proto is published first. The base image is only in the
 * loopback registry (plain HTTP), so the build pulls it from there. Publishing before logging in is
 * the one line saying to log in; after `registry login`, publish pushes `<version>-<sha>`, which
 * `skopeo inspect` shows with its digest and labels; the record is listed for the organization and
 * not found by another's; a dirty tree is refused, or tagged -dirty with --allow-dirty; doctor's
 * image checks follow the session; and the image runs (`buildah run`) and answers the Connect call.
 * Skipped, saying why, where buildah, docker-registry, htpasswd or skopeo is missing.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../src/process/free-port.ts";
import { BUF_YAML, ITEMS_PATH, ITEMS_PROTO, writeFiles } from "../helpers/protos.ts";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  type Registry,
  startRegistry,
  pushBaseImage,
  runImage,
  tokenKeyPair,
} from "../helpers/registry.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";

const unavailable = imageToolsUnavailable();
if (unavailable) console.warn(`publish tests skipped: ${unavailable}`);

const USER = "team";
// Only for the throwaway registry this test starts; it goes to htpasswd and logins through stdin.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

type ImageRec = {
  org: string;
  service: string;
  repository: string;
  tag: string;
  digest: string;
  git_sha: string;
  dirty: boolean;
  version: string;
  protos: { package: string; version: string }[];
  published_by: { name: string };
};
type Doctor = { checks: { id: string; status: string; summary: string; fix?: string }[] };

const SERVER = `// A stand-in service: answers the Connect protocol's unary JSON form of ItemService.GetItem.
import { createServer } from "node:http";

const server = createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const reply = (status, json) =>
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(json));
    if (req.method !== "POST" || req.url !== "/platform.items.v1.ItemService/GetItem")
      return reply(404, { code: "unimplemented", message: \`\${req.url} is not served\` });
    if (!req.headers["content-type"]?.startsWith("application/json"))
      return reply(415, { code: "invalid_argument", message: "expected application/json" });
    const { id } = JSON.parse(body || "{}");
    reply(200, { item: { id, name: "fixture", description: \`served by uid \${process.getuid()}\` } });
  });
});
server.listen(Number(process.env.PORT ?? 8080), () => console.log("listening"));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
`;

const DOCKERFILE = `ARG NODE_IMAGE=node:24-slim
FROM \${NODE_IMAGE}
WORKDIR /app
COPY package.json server.mjs ./
USER node
ENV PORT=8080
EXPOSE 8080
CMD ["node", "server.mjs"]
`;

let stack: OwnStack;
let registry: Registry;
/** A second registry, trusting the platform's tokens instead of passwords. */
let tokenRegistry: Registry;
let keys: string;
let buildah: PrivateBuildah;
let work: string;
let env: NodeJS.ProcessEnv;
let rivalKey: string;
let baseImage: string;
let repository: string;
let sha: string;
const t0 = Date.now();

function git(...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd: work,
    encoding: "utf8",
  }).trim();
}

const cli = (args: string[]) => runCli(args, env, work);

function skopeoInspect(reference: string): { Digest: string; RepoTags: string[]; Labels: Record<string, string> } {
  const out = execFileSync("skopeo", ["inspect", "--tls-verify=false", `docker://${reference}`], {
    env,
    encoding: "utf8",
  });
  return JSON.parse(out);
}

describe.skipIf(unavailable !== undefined)("platform publish", () => {
  beforeAll(async () => {
    keys = await mkdtemp(join(tmpdir(), "platform-token-keys-"));
    const pair = await tokenKeyPair(keys);
    stack = await startStack({ env: { PLATFORM_REGISTRY_TOKEN_KEY: pair.key } });
    for (const id of ["acme", "rival"]) expect((await stack.admin("POST", "/admin/v1/orgs", { id })).status).toBe(201);
    const key = async (name: string, org: string, role: string) => {
      const r = await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name, org, role });
      expect(r.status).toBe(201);
      return r.body.key;
    };
    const acmeKey = await key("acme-dev", "acme", "user");
    rivalKey = await key("rival-admin", "rival", "admin");
    registry = await startRegistry({ [USER]: PASSWORD });
    tokenRegistry = await startRegistry(
      {},
      {
        realm: `${stack.baseUrl}/auth/registry-token`,
        service: "test-registry",
        issuer: "platform",
        rootCertBundle: pair.cert,
      },
    );
    buildah = await privateBuildah();

    baseImage = await pushBaseImage(buildah, registry, USER, PASSWORD, "node");
    // Only in the loopback registry (plain HTTP) from here: publish's build has to pull it from there.
    execFileSync("buildah", ["rmi", baseImage], { env: buildah.env, stdio: "ignore" });

    work = await mkdtemp(join(tmpdir(), "platform-publish-"));
    repository = `${registry.host}/acme/items`;
    await writeFiles(work, {
      ".platformrc.json": `${JSON.stringify(
        {
          registryUrl: stack.baseUrl,
          orgId: "acme",
          imageRepository: repository,
          // buildah by name: on a machine with a working docker, publish would build with that.
          build: { builder: "buildah", args: { NODE_IMAGE: baseImage } },
        },
        null,
        2,
      )}\n`,
      "buf.yaml": BUF_YAML,
      [ITEMS_PATH]: ITEMS_PROTO,
      "package.json": `${JSON.stringify({ name: "items", version: "1.4.0", private: true, type: "module" }, null, 2)}\n`,
      "server.mjs": SERVER,
      Dockerfile: DOCKERFILE,
      ".dockerignore": ".git\n",
    });
    git("init", "-q");
    git("remote", "add", "origin", "https://git.example.com/acme/items.git");
    git("add", "-A");
    git("commit", "-q", "-m", "items service");
    sha = git("rev-parse", "--short", "HEAD");
    env = {
      ...buildah.env,
      PLATFORM_BASE_URL: undefined,
      PLATFORM_API_KEY: acmeKey,
      PLATFORM_CONFIG_DIR: join(work, ".config"),
    };
    await writeFile(join(work, ".git", "info", "exclude"), ".config/\n");
    const proto = await cli(["proto", "publish"]);
    expect(proto.code, proto.stderr).toBe(0);
  }, 240_000);

  afterAll(async () => {
    await stack?.stop();
    await registry?.stop();
    await tokenRegistry?.stop();
    if (keys) await rm(keys, { recursive: true, force: true });
    await buildah?.remove();
    if (work) await rm(work, { recursive: true, force: true });
    console.log(`publish tests: ${((Date.now() - t0) / 1000).toFixed(1)} s in all`);
  });

  it("before `registry login`: exits 1 with the one line saying to log in, before building; doctor says the same", async () => {
    const r = await cli(["publish"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`not logged in to ${registry.host}: run platform registry login\n`);
    const doctor = JSON.parse((await cli(["doctor", "--json"])).stdout) as Doctor;
    const check = (id: string) => doctor.checks.find((c) => c.id === id);
    expect(check("builder")).toMatchObject({
      status: "ok",
      summary: expect.stringMatching(/^buildah version .*, working/),
    });
    expect(check("image-registry")).toMatchObject({
      status: "ok",
      summary: `http://${registry.host}/v2/ answers (login needed)`,
    });
    expect(check("image-session")).toMatchObject({
      status: "warn",
      summary: `no buildah session with ${registry.host}`,
      fix: "run `platform registry login`",
    });
  });

  it("outside a git repository, or before the first commit: a clear error saying to commit", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-nogit-"));
    try {
      await writeFiles(dir, {
        ".platformrc.json": JSON.stringify({ registryUrl: stack.baseUrl, orgId: "acme", imageRepository: repository }),
        "package.json": JSON.stringify({ name: "items", version: "1.0.0" }),
        Dockerfile: DOCKERFILE,
      });
      const outside = await runCli(["publish"], env, dir);
      expect(outside.code).toBe(1);
      expect(outside.stderr).toBe(
        `error: ${dir} is not in a git repository: \`git init\` and commit first; images are tagged <version>-<short commit>\n`,
      );
      execFileSync("git", ["init", "-q"], { cwd: dir });
      const uncommitted = await runCli(["publish"], env, dir);
      expect(uncommitted.code).toBe(1);
      expect(uncommitted.stderr).toBe(
        `error: no commit yet in ${dir}: commit first; images are tagged <version>-<short commit>\n`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("registry login: a wrong password is refused without echoing it; the right one through --password-stdin logs buildah in", async () => {
    const usage = await cli(["registry", "login", "--username", USER]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--username needs --password-stdin");
    const wrong = await runCli(["registry", "login", "--username", USER, "--password-stdin"], env, work, "not-it\n");
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toBe(
      `error: ${registry.host} refused the username or password for ${USER}: check them and try again\n`,
    );
    const r = await runCli(["registry", "login", "--username", USER, "--password-stdin"], env, work, `${PASSWORD}\n`);
    expect(r.code, r.stderr).toBe(0);
    const authFile = join(env.XDG_RUNTIME_DIR as string, "containers", "auth.json");
    expect(r.stdout).toBe(`logged in to ${registry.host} as ${USER} (buildah; session in ${authFile})\n`);
    expect(r.stdout + r.stderr).not.toContain(PASSWORD);
    console.log(`registry login said: ${r.stdout}`);
    const doctor = JSON.parse((await cli(["doctor", "--json"])).stdout) as Doctor;
    expect(doctor.checks.find((c) => c.id === "image-session")).toMatchObject({
      status: "ok",
      summary: `${registry.host} accepts ${USER}'s session (${authFile})`,
    });
  });

  let record: ImageRec;

  it("publishes <version>-<sha>: pushed with its digest and OCI labels, recorded with the proto versions it implements", async () => {
    const started = Date.now();
    const r = await cli(["publish"]);
    expect(r.code, r.stderr).toBe(0);
    // The base image came from the loopback registry, in plain HTTP, through the team's session.
    expect(r.stderr).toContain(`Trying to pull ${baseImage}...`);
    const tag = `1.4.0-${sha}`;
    const [pushed, recorded] = r.stdout.trimEnd().split("\n");
    expect(pushed).toMatch(new RegExp(`^pushed ${repository.replace(/[.]/g, "\\.")}:${tag}@sha256:[0-9a-f]{64}$`));
    expect(recorded).toBe(`recorded items:${tag} in organization acme (implements platform.items.v1@1.0.0)`);
    const digest = (pushed as string).split("@")[1] as string;
    console.log(`publish said:\n${r.stdout}`);
    console.log(`publish (build and push): ${((Date.now() - started) / 1000).toFixed(1)} s`);

    const inspected = skopeoInspect(`${repository}:${tag}`);
    expect(inspected.Digest).toBe(digest);
    expect(inspected.RepoTags).toContain(tag);
    expect(inspected.Labels).toMatchObject({
      "org.opencontainers.image.version": "1.4.0",
      "org.opencontainers.image.revision": git("rev-parse", "HEAD"),
      "org.opencontainers.image.source": "https://git.example.com/acme/items.git",
      "org.opencontainers.image.title": "items",
    });
    expect(Date.parse(inspected.Labels["org.opencontainers.image.created"] as string)).toBeGreaterThan(started - 1000);

    const listed = JSON.parse((await cli(["images", "list", "--json"])).stdout) as ImageRec[];
    expect(listed).toHaveLength(1);
    record = listed[0] as ImageRec;
    expect(record).toMatchObject({
      org: "acme",
      service: "items",
      repository,
      tag,
      digest,
      git_sha: sha,
      dirty: false,
      version: "1.4.0",
      protos: [{ package: "platform.items.v1", version: "1.0.0" }],
      published_by: { name: "acme-dev" },
    });
  }, 180_000);

  it("the record is another organization's 404, and absent from its list", async () => {
    const asRival = (path: string) =>
      fetch(`${stack.baseUrl}${path}`, { headers: { authorization: `Bearer ${rivalKey}` } });
    const one = await asRival(`/admin/v1/images/items/tags/${record.tag}`);
    expect(one.status).toBe(404);
    expect(((await one.json()) as { error: { code: string } }).error.code).toBe("image_not_found");
    expect(await (await asRival("/admin/v1/images")).json()).toEqual({ data: [] });
    const own = await fetch(`${stack.baseUrl}/admin/v1/images/items/tags/${record.tag}`, {
      headers: { authorization: `Bearer ${env.PLATFORM_API_KEY}` },
    });
    expect(own.status).toBe(200);
    // A record that names another repository's service is refused, naming the field.
    const bad = await fetch(`${stack.baseUrl}/admin/v1/images`, {
      method: "POST",
      headers: { authorization: `Bearer ${env.PLATFORM_API_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({
        ...record,
        service: "other",
        org: undefined,
        created: undefined,
        published_by: undefined,
      }),
    });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain("service");
  });

  it("refuses a dirty tree naming the changed files; --allow-dirty tags <version>-<sha>-dirty", async () => {
    await writeFile(join(work, "server.mjs"), `${SERVER}// changed\n`);
    await writeFile(join(work, "NOTES.md"), "wip\n");
    const refused = await cli(["publish"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      "error: the workspace has uncommitted changes: server.mjs, NOTES.md; commit or stash them, or publish with --allow-dirty (tagged -dirty)\n",
    );
    const r = await cli(["publish", "--allow-dirty", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const dirty = JSON.parse(r.stdout) as ImageRec;
    expect(dirty).toMatchObject({ tag: `1.4.0-${sha}-dirty`, dirty: true, git_sha: sha });
    expect(skopeoInspect(`${repository}:${dirty.tag}`).Digest).toBe(dirty.digest);
    git("checkout", "--", "server.mjs");
    await rm(join(work, "NOTES.md"));
  }, 180_000);

  it("registry login without --username, against a registry that trusts the platform: the CLI's credential, org-scoped tokens", async () => {
    const teamEnv: NodeJS.ProcessEnv = {
      ...(await buildah.sessionEnv()),
      PLATFORM_API_KEY: env.PLATFORM_API_KEY,
      PLATFORM_CONFIG_DIR: env.PLATFORM_CONFIG_DIR,
    };
    const host = tokenRegistry.host;
    const r = await runCli(["registry", "login", host], teamEnv, work);
    expect(r.code, r.stderr).toBe(0);
    const authFile = join(teamEnv.XDG_RUNTIME_DIR as string, "containers", "auth.json");
    expect(r.stdout).toBe(
      `logged in to ${host} through ${stack.baseUrl} (buildah; session in ${authFile}, valid while your platform sign-in is)\n`,
    );
    console.log(`registry login (token) said: ${r.stdout}`);
    const push = (target: string) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn("buildah", ["push", "-q", "--tls-verify=false", baseImage, `docker://${target}`], {
          env: teamEnv,
        });
        let out = "";
        child.stdout.on("data", (d) => (out += d));
        child.stderr.on("data", (d) => (out += d));
        child.once("close", (code) => resolve({ code, out }));
      });
    expect(await push(`${host}/acme/base:1`)).toMatchObject({ code: 0 });
    const refused = await push(`${host}/rival/base:1`);
    expect(refused.code).not.toBe(0);
    expect(refused.out).toMatch(/unauthorized|denied|authentication required/i);
    // The token server itself: no credential is a 401 with a Basic challenge; another org's scope gets no actions.
    const none = await fetch(`${stack.baseUrl}/auth/registry-token?service=test-registry`);
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toMatch(/^Basic /);
    const basic = `Basic ${Buffer.from(`platform:${env.PLATFORM_API_KEY}`).toString("base64")}`;
    const granted = await fetch(
      `${stack.baseUrl}/auth/registry-token?service=test-registry&scope=repository:acme/items:pull,push&scope=repository:rival/items:pull,push`,
      { headers: { authorization: basic } },
    );
    const { token } = (await granted.json()) as { token: string };
    const claims = JSON.parse(Buffer.from(token.split(".")[1] as string, "base64url").toString());
    expect(claims).toMatchObject({
      iss: "platform",
      aud: "test-registry",
      access: [
        { type: "repository", name: "acme/items", actions: ["pull", "push"] },
        { type: "repository", name: "rival/items", actions: [] },
      ],
    });
  }, 60_000);

  it("the image runs (buildah run, chroot isolation) and answers the Connect call as its non-root user", async () => {
    const port = await freePort();
    const image = runImage(env, `${repository}:${record.tag}`, ["node", "server.mjs"], { PORT: String(port) });
    try {
      await expect.poll(image.output, { timeout: 30_000 }).toContain("listening");
      const res = await fetch(`http://127.0.0.1:${port}/platform.items.v1.ItemService/GetItem`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1" },
        body: JSON.stringify({ id: "42" }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ item: { id: "42", name: "fixture", description: "served by uid 1000" } });
    } finally {
      await image.stop();
    }
  }, 60_000);
});
