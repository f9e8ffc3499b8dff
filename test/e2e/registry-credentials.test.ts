/**
 * A team deploys from its own private registry with no operator pull file (issue 32, point 1;
 * docs/services.md, "Pulling from a private registry"): `platform up` with no
 * PLATFORM_IMAGE_PULL_AUTH_FILE, Debian's docker-registry with htpasswd on loopback, buildah
 * (private vfs storage) and skopeo. A published image's first deploy is refused with the command
 * that fixes it; a member may not set the credential, the organization's admin does
 * (`platform registry credentials set <host> --username … --password-stdin`), and the deploy and
 * a rollout then complete, with doctor's pull-credential check following along. Then a second
 * registry that trusts the platform's token server (PLATFORM_REGISTRY_TOKEN_KEY): published there,
 * deployed and rolled out with no credential at all, the scaler's own pull grant doing it.
 * Skipped, saying why, where the image tools are missing.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  pushBaseImage,
  type Registry,
  startRegistry,
  tokenKeyPair,
} from "../helpers/registry.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";

const unavailable = imageToolsUnavailable();
if (unavailable) console.warn(`registry credentials test skipped: ${unavailable}`);

const USER = "team";
// Only for the throwaway registry this test starts; it goes to htpasswd and through stdin.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

/** A js service as the local backend probes one: GET /readyz answers 200 once it listens. */
const SERVER = `import { createServer } from "node:http";
const server = createServer((req, res) => res.writeHead(req.url === "/readyz" || req.url === "/healthz" ? 200 : 404).end());
server.listen(Number(process.env.PORT ?? 8080), process.env.HOST, () => console.log("listening"));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
`;
const DOCKERFILE = `ARG NODE_IMAGE=node:24-slim
FROM \${NODE_IMAGE}
WORKDIR /app
COPY package.json server.mjs ./
USER node
CMD ["node", "server.mjs"]
`;

let stack: OwnStack;
let registry: Registry;
let tokenRegistry: Registry;
let keys: string;
let buildah: PrivateBuildah;
let work: string;
let env: NodeJS.ProcessEnv;
let adminKey: string;
let devKey: string;
let baseImage: string;

const cli = (args: string[], input?: string, key = devKey) =>
  runCli(args, { ...env, PLATFORM_API_KEY: key }, work, input);
const git = (...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd: work,
    encoding: "utf8",
  }).trim();

/** Points the workspace at `repository`, commits and publishes; the tag. */
async function publishTo(repository: string): Promise<string> {
  await writeFile(
    join(work, ".platformrc.json"),
    `${JSON.stringify({ registryUrl: stack.baseUrl, orgId: "acme", imageRepository: repository, build: { builder: "buildah", args: { NODE_IMAGE: baseImage } } }, null, 2)}\n`,
  );
  git("add", "-A");
  git("commit", "-q", "-m", `publish to ${repository}`);
  const published = await cli(["publish"]);
  expect(published.code, published.stderr).toBe(0);
  return /^pushed \S+:(\S+)@sha256:/m.exec(published.stdout)?.[1] as string;
}

async function pullCheck() {
  const doctor = JSON.parse((await cli(["doctor", "--json"])).stdout) as {
    checks: { id: string; status: string; summary: string; fix?: string }[];
  };
  return doctor.checks.find((c) => c.id === "pull-credential");
}

/** Deploys `name` at `tag`, rolls it out again (a restart pulls again), and checks the release serves. */
async function deployAndRollOut(name: string, tag: string): Promise<void> {
  const deployed = await cli(["dev-center", "service", "deploy", name, "--tag", tag, "--repo-type", "js", "--wait"]);
  expect(deployed.code, `${deployed.stdout}${deployed.stderr}\n${stack.output()}`).toBe(0);
  const rolled = await cli(["dev-center", "rollout", "start", name, "--restart", "--wait"]);
  expect(rolled.code, `${rolled.stdout}${rolled.stderr}`).toBe(0);
  const status = JSON.parse((await cli(["dev-center", "rollout", "status", name, "--json"])).stdout);
  expect(status).toMatchObject({ phase: "complete", current: { tag } });
  // The restart's replica serves (the deploy's may still be draining).
  expect(status.replicas).toContainEqual(expect.objectContaining({ tag, revision: "r2", state: "ready" }));
}

describe.skipIf(unavailable !== undefined)("deploying from a team's private registry", () => {
  beforeAll(async () => {
    keys = await mkdtemp(join(tmpdir(), "platform-token-keys-"));
    const pair = await tokenKeyPair(keys);
    stack = await startStack({
      env: {
        PLATFORM_REGISTRY_TOKEN_KEY: pair.key,
        PLATFORM_IMAGE_PULL_AUTH_FILE: undefined,
        PLATFORM_ROLLOUT_DEADLINE_MS: "90000",
      },
    });
    expect((await stack.admin("POST", "/admin/v1/orgs", { id: "acme" })).status).toBe(201);
    const key = async (name: string, role: string) =>
      (await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name, org: "acme", role })).body.key;
    adminKey = await key("acme-admin", "admin");
    devKey = await key("acme-dev", "user");
    registry = await startRegistry({ [USER]: PASSWORD });
    tokenRegistry = await startRegistry(
      {},
      {
        realm: `${stack.baseUrl}/auth/registry-token`,
        service: "team-registry",
        issuer: "platform",
        rootCertBundle: pair.cert,
      },
    );
    buildah = await privateBuildah();
    baseImage = await pushBaseImage(buildah, registry, USER, PASSWORD, "node");
    work = await mkdtemp(join(tmpdir(), "platform-registry-credentials-"));
    await writeFile(join(work, "package.json"), `${JSON.stringify({ name: "items", version: "1.0.0" })}\n`);
    await writeFile(join(work, "server.mjs"), SERVER);
    await writeFile(join(work, "Dockerfile"), DOCKERFILE);
    await writeFile(join(work, ".dockerignore"), ".git\n.config\n");
    git("init", "-q");
    env = { ...buildah.env, PLATFORM_BASE_URL: undefined, PLATFORM_CONFIG_DIR: join(work, ".config") };
    await writeFile(join(work, ".git", "info", "exclude"), ".config/\n");
    const login = await cli(["registry", "login", registry.host, "--username", USER, "--password-stdin"], PASSWORD);
    expect(login.code, login.stderr).toBe(0);
  }, 300_000);

  afterAll(async () => {
    const code = await stack?.stop();
    await registry?.stop();
    await tokenRegistry?.stop();
    await buildah?.remove();
    for (const dir of [work, keys]) if (dir) await rm(dir, { recursive: true, force: true });
    expect(code).toBe(0);
  }, 120_000);

  it("the organization's own credential: refused with the fix, set by its admin, then deployed and rolled out", async () => {
    const tag = await publishTo(`${registry.host}/acme/items`);
    expect(await pullCheck()).toMatchObject({
      status: "warn",
      fix: `an admin of the organization runs: platform registry credentials set ${registry.host} --username <user> --password-stdin`,
    });
    const refused = await cli([
      "dev-center",
      "service",
      "deploy",
      "items",
      "--tag",
      tag,
      "--repo-type",
      "js",
      "--wait",
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stdout + refused.stderr).toContain(
      `not logged in to ${registry.host} (no pull credential for ${registry.host}); an admin of the organization runs: platform registry credentials set ${registry.host} --username <user> --password-stdin`,
    );
    expect((await cli(["dev-center", "service", "delete", "items"])).code).toBe(0);

    const member = await cli(
      ["registry", "credentials", "set", registry.host, "--username", USER, "--password-stdin"],
      PASSWORD,
    );
    expect(member.code).toBe(1);
    expect(member.stderr).toMatch(/only an admin of the organization/);
    const set = await cli(
      ["registry", "credentials", "set", registry.host, "--username", USER, "--password-stdin"],
      `${PASSWORD}\n`,
      adminKey,
    );
    expect(set.code, set.stderr).toBe(0);
    const listed = await cli(["registry", "credentials", "list"]);
    const row = listed.stdout.split("\n").find((l) => l.includes(registry.host)) ?? "";
    expect(row.split("│").map((c) => c.trim())).toEqual([
      "",
      registry.host,
      "team",
      expect.any(String),
      "acme-admin",
      "",
    ]);
    expect(listed.stdout + set.stdout + set.stderr).not.toContain(PASSWORD);
    expect(await pullCheck()).toMatchObject({ status: "ok", summary: expect.stringContaining("organization's own") });

    await deployAndRollOut("items", tag);
    expect(stack.output()).not.toContain(PASSWORD);
  }, 900_000);

  it("a registry that trusts the platform's token server: deployed and rolled out with no credential at all", async () => {
    const login = await cli(["registry", "login", tokenRegistry.host]);
    expect(login.code, login.stderr).toBe(0);
    const tag = await publishTo(`${tokenRegistry.host}/acme/things`);
    expect(await pullCheck()).toMatchObject({ status: "ok", summary: expect.stringContaining("token server") });
    await deployAndRollOut("things", tag);
  }, 900_000);
});
