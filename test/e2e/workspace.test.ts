/**
 * The workspace as a new team makes it, against the shared `platform up` (its organizations have
 * names of this file's own): `platform init` in an empty git repository (run from a subdirectory,
 * writing at the git root), its checks of the registry and the organization, `--offline`, `--force` and refusing to overwrite; every later command finding
 * `.platformrc.json` from a nested directory and naming it with the field in its errors; and
 * `platform doctor` all green after init and `auth login --api-key`, then failing check by check
 * (not a workspace, no credentials, an expired token, another organization's key, an unreachable
 * registry, a cluster) with exit 1 and the fix, as text and as `--json`.
 */
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { PLATFORM_VERSION } from "../../src/contracts/version.ts";
import { freePort } from "../../src/process/free-port.ts";
import { FakeKubernetesApi } from "../helpers/fake-kubernetes-api.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type CliResult, runCli, type Stack } from "../helpers/stack.ts";

type Key = { id: string; key: string; org: string };
type Doctor = { ok: boolean; checks: { id: string; status: string; summary: string; fix?: string }[] };

const BUF_YAML =
  "version: v2\nmodules:\n  - path: proto\nlint:\n  use:\n    - STANDARD\n    - COMMENT_SERVICE\n    - COMMENT_RPC\nbreaking:\n  use:\n    - WIRE_JSON\n";

const ACME = unique("acme");
const RIVAL = unique("rival");
const NOWHERE = unique("nowhere");

let stack: Stack;
let work: string;
let acmeAdmin: Key;
let rivalAdmin: Key;

beforeAll(async () => {
  stack = await sharedStack();
  work = await mkdtemp(join(tmpdir(), "platform-workspace-"));
  for (const org of [ACME, RIVAL]) expect((await runCli(["orgs", "create", org], stack.env)).code).toBe(0);
  const key = async (org: string) => {
    const r = await runCli(["keys", "create", `${org}-admin`, "--org", org, "--role", "admin", "--json"], stack.env);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as Key;
  };
  acmeAdmin = await key(ACME);
  rivalAdmin = await key(RIVAL);
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** A person's shell: its own (empty, at first) config directory, no platform variables. */
async function shell(name: string, extra: NodeJS.ProcessEnv = {}): Promise<NodeJS.ProcessEnv> {
  const config = join(work, `config-${name}`);
  await mkdir(config, { recursive: true, mode: 0o700 });
  return {
    ...stack.env,
    PLATFORM_BASE_URL: undefined,
    PLATFORM_API_KEY: undefined,
    PLATFORM_CONFIG_DIR: config,
    // The trainer check imports torch (seconds per doctor run) where the checkout has .venv-ref;
    // these tests are about the workspace, so doctor asks a Python that answers at once.
    PLATFORM_TRAINER_PYTHON: "python3",
    ...extra,
  };
}

/** An empty git repository with a nested directory; resolves both. */
async function repository(name: string): Promise<{ root: string; nested: string }> {
  const root = join(work, name);
  const nested = join(root, "services", "items");
  await mkdir(nested, { recursive: true });
  git(root, "init", "-q");
  return { root, nested };
}

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd,
    encoding: "utf8",
  });
}

const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

function doctorJson(r: CliResult): Doctor {
  return JSON.parse(r.stdout) as Doctor;
}

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

const statusOf = (d: Doctor, id: string) => d.checks.find((c) => c.id === id);

/** Where nothing listens. */
async function closedUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

describe("platform init", () => {
  it("in an empty git repository, from a subdirectory: both files at the git root, checked, and never replaced without --force", async () => {
    const { root, nested } = await repository("Items Team");
    const env = await shell("team");
    const init = ["init", "--registry-url", `${stack.baseUrl}/`, "--org-id", ACME];

    // Before signing in: the registry is checked, the organization cannot be, and it says so.
    const first = await runCli(init, env, nested);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toContain(
      `warning: ${stack.baseUrl} is a platform gateway (${PLATFORM_VERSION}), but organization "${ACME}" was not checked: no credentials for ${stack.baseUrl}. Run \`platform auth login\``,
    );
    const rcFile = join(root, ".platformrc.json");
    expect(first.stdout).toContain(`wrote ${rcFile}: registry ${stack.baseUrl}, organization ${ACME}`);
    expect(await exists(join(nested, ".platformrc.json"))).toBe(false);
    const host = new URL(stack.baseUrl).host;
    const written = JSON.parse(await readFile(rcFile, "utf8"));
    expect(written).toEqual({
      $schema: `${stack.baseUrl}/schemas/platformrc.schema.json`,
      registryUrl: stack.baseUrl,
      orgId: ACME,
      imageRepository: `${host}/${ACME}/items-team`,
      protoRoot: "proto",
      language: "node",
      build: { args: {} },
    });
    expect(await readFile(join(root, "buf.yaml"), "utf8")).toBe(BUF_YAML);
    expect((await stat(join(root, "proto"))).isDirectory()).toBe(true);

    // `$schema` names the schema shipped with the CLI, as the platform serves it, and it accepts the file.
    const served = await fetch(written.$schema);
    expect(served.status).toBe(200);
    const schema = (await served.json()) as Record<string, unknown>;
    expect(schema).toEqual(
      JSON.parse(await readFile(new URL("../../schemas/platformrc.schema.json", import.meta.url), "utf8")),
    );
    expect(z.fromJSONSchema(schema).safeParse(written).success).toBe(true);

    // Again: refused, nothing changed; the same with a stray buf.yaml alone.
    const before = await readFile(rcFile, "utf8");
    const again = await runCli([...init, "--lang", "python"], env, nested);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain(`${rcFile} and ${join(root, "buf.yaml")} already exist; nothing was changed`);
    expect(await readFile(rcFile, "utf8")).toBe(before);

    // Every later command finds the file from the nested directory: auth login takes its registry.
    const login = await runCli(["auth", "login", "--api-key", acmeAdmin.key], env, nested);
    expect(login.code, login.stderr).toBe(0);
    expect(login.stdout).toContain(`logged in to ${stack.baseUrl} as ${ACME}-admin (admin of organization ${ACME})`);
    const orgs = await runCli(["orgs", "list", "--json"], env, nested);
    expect(JSON.parse(orgs.stdout).map((o: { id: string }) => o.id)).toEqual([ACME]);

    // Signed in, --force checks the organization too and replaces both files.
    const forced = await runCli([...init, "--force", "--lang", "python"], env, nested);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain(
      `checked: ${stack.baseUrl} is a platform gateway (${PLATFORM_VERSION}); organization ${ACME} (${ACME}) exists`,
    );
    expect(JSON.parse(await readFile(rcFile, "utf8")).language).toBe("python");

    // An organization that does not exist, and another's (the same 404): exit 1, the file unchanged.
    const now = await readFile(rcFile, "utf8");
    for (const org of [NOWHERE, RIVAL]) {
      const r = await runCli(["init", "--registry-url", stack.baseUrl, "--org-id", org, "--force"], env, nested);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`organization "${org}" not found at ${stack.baseUrl}, or not yours`);
    }
    expect(await readFile(rcFile, "utf8")).toBe(now);

    // doctor, all green once the tree is committed, from the nested directory.
    git(root, "add", "-A");
    git(root, "commit", "-q", "-m", "workspace");
    const doctor = await runCli(["doctor"], env, nested);
    expect(doctor.code, doctor.stdout).toBe(0);
    for (const line of [
      new RegExp(`^✓ CLI +platform ${escaped(PLATFORM_VERSION)} on Node ${escaped(process.versions.node)}$`, "m"),
      new RegExp(
        `^✓ \\.platformrc\\.json +${escaped(rcFile)}: registry ${escaped(stack.baseUrl)}, organization ${ACME}`,
        "m",
      ),
      new RegExp(`^✓ platform +${escaped(stack.baseUrl)}: platform ${escaped(PLATFORM_VERSION)}$`, "m"),
      new RegExp(`^✓ credentials +.*: ${ACME}-admin, admin of organization ${ACME}, with an API key$`, "m"),
      new RegExp(`^✓ organization +${ACME} \\(${ACME}\\)$`, "m"),
      /^✓ buf +buf 1\.\d+\.\d+ /m,
      /^✓ protos lint +no \.proto files under proto\/ yet$/m,
      /^✓ git +git \S+, clean at [0-9a-f]{7,}$/m,
      /^- cluster +no Kubernetes backend configured/m,
      /^all required checks passed/m,
    ])
      expect(doctor.stdout).toMatch(line);
    expect(doctor.stdout).not.toContain("✗");
    const json = doctorJson(await runCli(["doctor", "--json"], env, nested));
    expect(json.ok).toBe(true);
    expect(json.checks.map((c) => c.id)).toEqual([
      "cli",
      "workspace",
      "registry",
      "credentials",
      "organization",
      "buf",
      "protos",
      "git",
      "builder",
      "image-registry",
      "image-session",
      "pull-credential",
      "service-rollout",
      "service-replicas",
      "service-route",
      "cluster",
      "trainer",
      "llama-binary",
    ]);
    expect(statusOf(json, "credentials")).toMatchObject({ status: "ok" });
    // Nothing deployed from this workspace yet: the service checks are skipped, saying so.
    expect(statusOf(json, "service-rollout")).toMatchObject({
      status: "skip",
      summary: expect.stringMatching(/^nothing deployed from \S+ yet \(platform dev-center service deploy\)$/),
    });
    // A dirty tree is a warning, never a failure.
    await writeFile(join(root, "NOTES.md"), "work in progress\n");
    const dirty = await runCli(["doctor", "--json"], env, nested);
    expect(dirty.code).toBe(0);
    expect(statusOf(doctorJson(dirty), "git")).toMatchObject({
      status: "warn",
      summary: expect.stringContaining("1 uncommitted change"),
      fix: "commit or stash them: `platform publish` refuses a dirty tree",
    });
    // A proto that does not lint is a failure, its findings shown as `platform proto lint` shows them.
    await writeFile(join(root, "proto", "items.proto"), 'syntax = "proto3";\n');
    const unlinted = await runCli(["doctor"], env, nested);
    expect(unlinted.code).toBe(1);
    expect(unlinted.stdout).toMatch(/^✗ protos lint +\d+ finding\(s\) in 1 file\(s\):/m);
    expect(unlinted.stdout).toMatch(/proto\/items\.proto:\d+:\d+: [A-Z_]+: /);
  });

  it("--offline writes without asking; an unreachable registry or another service is a clear exit 1, writing nothing", async () => {
    const { root } = await repository("offline");
    const env = await shell("offline");
    const down = await closedUrl();
    const refused = await runCli(["init", "--registry-url", down, "--org-id", ACME], env, root);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`error: cannot reach ${down} (ECONNREFUSED): check --registry-url`);
    expect(await exists(join(root, ".platformrc.json"))).toBe(false);

    const other = createServer((_req, res) => res.writeHead(200, { "content-type": "text/plain" }).end("hello"));
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
    const otherUrl = `http://127.0.0.1:${(other.address() as { port: number }).port}`;
    try {
      const r = await runCli(["init", "--registry-url", otherUrl, "--org-id", ACME], env, root);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `${otherUrl} is not a platform gateway: GET /healthz answered HTTP 200 without the platform's version`,
      );
      const v1 = await runCli(["init", "--registry-url", `${stack.baseUrl}/v1`, "--org-id", ACME], env, root);
      expect(v1.stderr).toMatch(/is not a platform gateway: GET \/healthz answered HTTP 401: .*without \/v1/);
    } finally {
      other.close();
    }
    expect(await exists(join(root, ".platformrc.json"))).toBe(false);

    const offline = await runCli(["init", "--registry-url", down, "--org-id", ACME, "--offline"], env, root);
    expect(offline.code, offline.stderr).toBe(0);
    expect(offline.stderr).toContain("--offline: the platform and the organization were not checked");
    expect(JSON.parse(await readFile(join(root, ".platformrc.json"), "utf8"))).toMatchObject({
      registryUrl: down,
      imageRepository: `${new URL(down).host}/${ACME}/offline`,
    });
  });

  it("outside git writes in the current directory; bad flags exit 2 naming the flag", async () => {
    const plain = join(work, "no-git");
    await mkdir(plain);
    const env = await shell("plain");
    const r = await runCli(
      ["init", "--registry-url", stack.baseUrl, "--org-id", ACME, "--image-repository", "registry.example.com/acme/x"],
      env,
      plain,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(await readFile(join(plain, ".platformrc.json"), "utf8")).imageRepository).toBe(
      "registry.example.com/acme/x",
    );
    const cases: [string[], string][] = [
      [["--registry-url", "ftp://x", "--org-id", ACME], "--registry-url: expected the platform's http(s) base URL"],
      [["--registry-url", stack.baseUrl, "--org-id", "Acme!"], "--org-id: expected an organization id"],
      [["--registry-url", stack.baseUrl, "--org-id", ACME, "--lang", "go"], '--lang: expected one of "node", "python"'],
      [
        ["--registry-url", stack.baseUrl, "--org-id", ACME, "--image-repository", "acme/items"],
        "--image-repository: expected host/path",
      ],
    ];
    for (const [flags, message] of cases) {
      const bad = await runCli(["init", ...flags, "--force"], env, plain);
      expect([bad.code, bad.stderr], flags.join(" ")).toEqual([2, expect.stringContaining(`error: ${message}`)]);
    }
  });
});

describe("platform doctor", () => {
  it("not in a workspace: exit 1, the fix is platform init", async () => {
    const nowhere = join(work, "nowhere");
    await mkdir(nowhere);
    const env = await shell("nowhere");
    const r = await runCli(["doctor"], env, nowhere);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      new RegExp(`^✗ \\.platformrc\\.json +no \\.platformrc\\.json in ${escaped(nowhere)} or above it$`, "m"),
    );
    expect(r.stdout).toMatch(
      /^ +fix: run `platform init --registry-url <url> --org-id <id>` at the repository's root$/m,
    );
    expect(r.stdout).toMatch(/^✗ platform +no platform: not in a workspace/m);
    const json = doctorJson(await runCli(["doctor", "--json"], env, nowhere));
    expect(json.ok).toBe(false);
    expect(statusOf(json, "workspace")).toMatchObject({
      status: "fail",
      fix: expect.stringContaining("platform init"),
    });
    expect(statusOf(json, "cli")).toMatchObject({ status: "ok" });
  });

  it("a malformed .platformrc.json: every command names the file and the field (exit 2), doctor fails on it", async () => {
    const { root, nested } = await repository("malformed");
    const file = join(root, ".platformrc.json");
    await writeFile(file, JSON.stringify({ registryUrl: stack.baseUrl, orgId: ACME, imageRepository: "items" }));
    const env = await shell("malformed");
    const r = await runCli(["orgs", "list"], env, nested);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(
      `error: ${file}: imageRepository: expected host/path: host[:port]/path, e.g. registry.example.com:5000/acme/items (a lowercase path, no tag or digest)`,
    );
    const doctor = await runCli(["doctor"], env, nested);
    expect(doctor.code).toBe(1);
    expect(doctor.stdout).toMatch(
      new RegExp(`^✗ \\.platformrc\\.json +${escaped(file)}: imageRepository: expected host/path`, "m"),
    );
    expect(doctor.stdout).toContain("fix: correct the field it names");
    expect(doctor.stdout).toMatch(/^- platform +not checked: \.platformrc\.json does not parse/m);
  });

  it("credentials: none, an expired session, another organization's key, a registry that does not answer", async () => {
    const { root } = await repository("creds");
    const rc = { registryUrl: stack.baseUrl, orgId: ACME };
    await writeFile(join(root, ".platformrc.json"), JSON.stringify(rc));
    const env = await shell("creds");

    const none = await runCli(["doctor"], env, root);
    expect(none.code).toBe(1);
    expect(none.stdout).toMatch(
      new RegExp(`^✗ credentials +not logged in to ${escaped(stack.baseUrl)}: no credentials in `, "m"),
    );
    expect(none.stdout).toContain("fix: run `platform auth login`");
    expect(none.stdout).toMatch(/^- organization +not checked/m);

    // A CLI token that expired, whose refresh token the platform does not know.
    await writeFile(
      join(env.PLATFORM_CONFIG_DIR as string, "credentials.json"),
      JSON.stringify({
        registries: {
          [stack.baseUrl]: { token: "pt_expired", refresh_token: "ptr_unknown", expires: new Date(0).toISOString() },
        },
      }),
      { mode: 0o600 },
    );
    const expired = doctorJson(await runCli(["doctor", "--json"], env, root));
    expect(expired.ok).toBe(false);
    expect(statusOf(expired, "credentials")).toMatchObject({
      status: "fail",
      summary: `session expired for ${stack.baseUrl}: run platform auth login`,
      fix: expect.stringContaining("platform auth login"),
    });

    // Signed in as another organization: the credentials are fine, the organization is not theirs.
    expect((await runCli(["auth", "login", "--api-key", rivalAdmin.key], env, root)).code).toBe(0);
    const rival = await runCli(["doctor"], env, root);
    expect(rival.code).toBe(1);
    expect(rival.stdout).toMatch(new RegExp(`^✓ credentials +.*${RIVAL}-admin, admin of organization ${RIVAL}`, "m"));
    expect(rival.stdout).toMatch(
      new RegExp(
        `^✗ organization +signed in as ${RIVAL}-admin of organization ${RIVAL}, but the workspace belongs to ${ACME}$`,
        "m",
      ),
    );

    const down = await closedUrl();
    await writeFile(join(root, ".platformrc.json"), JSON.stringify({ ...rc, registryUrl: down }));
    const unreachable = await runCli(["doctor"], env, root);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stdout).toMatch(
      new RegExp(`^✗ platform +cannot reach ${escaped(down)} \\(ECONNREFUSED\\)$`, "m"),
    );
    expect(unreachable.stdout).toMatch(/^ +fix: check registryUrl in \.platformrc\.json/m);
  });

  it("the cluster, where KUBECONFIG configures one: its API server answering, or a failure", async () => {
    const { root } = await repository("cluster");
    await writeFile(join(root, ".platformrc.json"), JSON.stringify({ registryUrl: stack.baseUrl, orgId: ACME }));
    const api = new FakeKubernetesApi();
    const server = await api.start();
    const kubeconfig = async (name: string, url: string) => {
      const path = join(work, `${name}.kubeconfig`);
      await writeFile(
        path,
        `apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: ${url}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: team\n  context:\n    cluster: c\n    user: u\ncurrent-context: team\n`,
      );
      return path;
    };
    try {
      const env = await shell("cluster", { KUBECONFIG: await kubeconfig("up", server) });
      const up = doctorJson(await runCli(["doctor", "--json"], env, root));
      expect(statusOf(up, "cluster")).toEqual({
        id: "cluster",
        name: "cluster",
        required: true,
        status: "ok",
        summary: `${server} answers: Kubernetes v1.33.0 (context team)`,
        details: { server, context: "team", version: "v1.33.0" },
      });
      expect(api.requests.map((r) => `${r.method} ${r.path} ${r.authorization}`)).toContain("GET /version Bearer t");
      const down = await closedUrl();
      const downEnv = await shell("cluster-down", { KUBECONFIG: await kubeconfig("down", down) });
      const r = await runCli(["doctor"], downEnv, root);
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(new RegExp(`^✗ cluster +cannot reach the cluster at ${escaped(down)}: `, "m"));
      expect(r.stdout).toContain("fix: check KUBECONFIG and its current context (`kubectl cluster-info`)");
    } finally {
      await api.close();
    }
  });
});
