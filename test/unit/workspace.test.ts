/**
 * `.platformrc.json`: the shipped JSON Schema in sync with the zod schema and judging files as it
 * does, each key's errors naming the file and the field, the defaults filled in, the image
 * repository's form and its derivation, buf.yaml's exact text, and where the tools keep their state.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bufYaml } from "../../src/workspace/init.ts";
import { IMAGE_REPOSITORY_PATTERN, platformrcJsonSchema, unknownKeys } from "../../src/workspace/config.ts";
import { deriveImageRepository, findWorkspace, requireWorkspace } from "../../src/workspace/find.ts";
import { loadToolSettings } from "../../src/settings/tools.ts";

const SHIPPED = new URL("../../schemas/platformrc.schema.json", import.meta.url);

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-workspace-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A workspace directory holding `config` as its `.platformrc.json`. */
async function workspaceWith(name: string, config: unknown): Promise<string> {
  const root = join(dir, name);
  await mkdir(root, { recursive: true });
  await writeFile(join(root, ".platformrc.json"), JSON.stringify(config));
  return root;
}

const FULL = {
  $schema: "https://platform.example.com/schemas/platformrc.schema.json",
  registryUrl: "https://platform.example.com",
  orgId: "acme",
  imageRepository: "registry.example.com:5000/acme/items",
  protoRoot: "proto",
  language: "python",
  build: { args: { NODE_IMAGE: "registry.example.com/node:24-slim" }, builder: "buildah" },
};

describe("the JSON Schema shipped with the CLI", () => {
  it("is the zod schema's (run `npm run schema:platformrc` after changing it)", async () => {
    expect(JSON.parse(await readFile(SHIPPED, "utf8"))).toEqual(platformrcJsonSchema());
  });

  it("accepts and refuses what the CLI does", async () => {
    const shipped = z.fromJSONSchema(JSON.parse(await readFile(SHIPPED, "utf8")));
    expect(shipped.safeParse(FULL).success).toBe(true);
    expect(shipped.safeParse({ registryUrl: "http://127.0.0.1:8000", orgId: "default" }).success).toBe(true);
    for (const bad of [
      { orgId: "acme" },
      { ...FULL, registryUrl: "ftp://platform.example.com" },
      { ...FULL, orgId: "Acme!" },
      { ...FULL, imageRepository: "acme/items" },
      { ...FULL, protoRoot: "../elsewhere" },
      { ...FULL, language: "go" },
      { ...FULL, build: { builder: "kaniko" } },
      { ...FULL, build: { args: { "1X": "y" } } },
    ]) {
      expect(shipped.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
      const root = await workspaceWith("refused", bad);
      await expect(findWorkspace(root)).rejects.toMatchObject({ exitCode: 2 });
    }
    // Keys it does not know: marked for editors; the CLI reads past them (an older CLI, a newer file).
    expect(shipped.safeParse({ ...FULL, registryURL: "x" }).success).toBe(false);
    expect(unknownKeys({ ...FULL, registryURL: "x", build: { arg: {} } })).toEqual(["build.arg", "registryURL"]);
    const root = await workspaceWith("newer", { ...FULL, registryURL: "x" });
    expect((await findWorkspace(root))?.config.orgId).toBe("acme");
  });
});

describe(".platformrc.json", () => {
  it("names the file and the field of every error", async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ imageRepository: "items" }, /imageRepository: expected host\/path/],
      [{ imageRepository: "registry.example.com/acme/items:v1" }, /imageRepository: expected host\/path/],
      [{ protoRoot: "/abs" }, /protoRoot: expected a directory inside the workspace/],
      [{ language: "go" }, /language: expected one of "node", "python"/],
      [{ build: { args: { "no-dash": "x" } } }, /build\.args\.no-dash: .*expected a build argument name/],
      [{ build: { builder: "kaniko" } }, /build\.builder: expected one of "docker", "podman", "buildah"/],
      [{ orgId: undefined }, /orgId: missing/],
    ];
    for (const [change, message] of cases) {
      const root = await workspaceWith("bad", { ...FULL, ...change });
      const error = await findWorkspace(join(root)).catch((e: unknown) => e);
      expect(error, JSON.stringify(change)).toMatchObject({ exitCode: 2 });
      expect((error as Error).message).toContain(`${join(root, ".platformrc.json")}: `);
      expect((error as Error).message).toMatch(message);
    }
  });

  it("fills in the defaults, the image repository derived from the registry, the organization and the directory", async () => {
    const root = await workspaceWith("My Service", { registryUrl: "http://127.0.0.1:8000/", orgId: "acme" });
    await mkdir(join(root, "src", "deep"), { recursive: true });
    const ws = await requireWorkspace(join(root, "src", "deep"));
    expect(ws.root).toBe(root);
    expect(ws.settings).toEqual({
      registryUrl: "http://127.0.0.1:8000/",
      orgId: "acme",
      imageRepository: "127.0.0.1:8000/acme/my-service",
      protoRoot: "proto",
      language: "node",
      build: { args: {} },
    });
    const full = await requireWorkspace(await workspaceWith("full", FULL));
    expect(full.settings).toMatchObject({ imageRepository: FULL.imageRepository, language: "python" });
    expect(full.settings.build).toEqual(FULL.build);
    const outside = await requireWorkspace(dir).catch((e: unknown) => e);
    expect(outside).toMatchObject({ exitCode: 2 });
    expect((outside as Error).message).toMatch(/^not in a workspace: no \.platformrc\.json in .* run `platform init/);
  });

  it("takes image repositories as host[:port]/path, and derives one only where docker would read it so", () => {
    for (const good of ["registry.example.com/acme/items", "localhost:5000/a", "[::1]:5000/a/b", "10.0.0.1/a__b/c-d"])
      expect(IMAGE_REPOSITORY_PATTERN.test(good), good).toBe(true);
    for (const bad of [
      "acme/items",
      "registry/acme",
      "registry.example.com",
      "host.com/Acme",
      "host.com/a:tag",
      "h.com/-a",
    ])
      expect(IMAGE_REPOSITORY_PATTERN.test(bad), bad).toBe(false);
    expect(deriveImageRepository("https://platform.example.com/", "acme", "Items_API")).toBe(
      "platform.example.com/acme/items-api",
    );
    expect(deriveImageRepository("http://localhost:8000", "acme", "items")).toBe("localhost:8000/acme/items");
    // A dotless host without a port is a Docker Hub path to docker; a name with no letter or digit is no path.
    expect(deriveImageRepository("http://gateway", "acme", "items")).toBeUndefined();
    expect(deriveImageRepository("https://platform.example.com", "acme", "日本")).toBeUndefined();
  });

  it("has buf.yaml hold exactly the rules platform proto lint applies", () => {
    expect(bufYaml("proto")).toBe(
      "version: v2\nmodules:\n  - path: proto\nlint:\n  use:\n    - STANDARD\n    - COMMENT_SERVICE\n    - COMMENT_RPC\nbreaking:\n  use:\n    - WIRE_JSON\n",
    );
  });
});

describe("the tools section", () => {
  it("finds a cluster as the Kubernetes client does, and registry sessions where builders keep them", () => {
    // Without XDG_RUNTIME_DIR, buildah and podman keep sessions under /run/containers/<uid>.
    const runAuth = join("/run/containers", String(process.getuid?.() ?? 0), "auth.json");
    expect(loadToolSettings({})).toEqual({
      kubernetes: undefined,
      registryAuthFiles: [
        runAuth,
        join(homedir(), ".config", "containers", "auth.json"),
        join(homedir(), ".docker", "config.json"),
      ],
      containersAuthFile: runAuth,
      dockerConfigFile: join(homedir(), ".docker", "config.json"),
      registriesConfFiles: [
        join(homedir(), ".config", "containers", "registries.conf"),
        "/etc/containers/registries.conf",
      ],
    });
    expect(loadToolSettings({ KUBERNETES_SERVICE_HOST: "10.0.0.1" }).kubernetes).toBe("in-cluster");
    const set = loadToolSettings({
      KUBECONFIG: "/k/config",
      XDG_RUNTIME_DIR: "/run/user/1000",
      XDG_CONFIG_HOME: "/cfg",
      DOCKER_CONFIG: "/d",
    });
    expect(set).toEqual({
      kubernetes: "kubeconfig",
      registryAuthFiles: ["/run/user/1000/containers/auth.json", "/cfg/containers/auth.json", "/d/config.json"],
      containersAuthFile: "/run/user/1000/containers/auth.json",
      dockerConfigFile: "/d/config.json",
      registriesConfFiles: [
        join(homedir(), ".config", "containers", "registries.conf"),
        "/etc/containers/registries.conf",
      ],
    });
    // CONTAINERS_REGISTRIES_CONF, where set, is the only registries.conf buildah and podman read.
    expect(loadToolSettings({ CONTAINERS_REGISTRIES_CONF: "/r.conf" }).registriesConfFiles).toEqual(["/r.conf"]);
    expect(loadToolSettings({ REGISTRY_AUTH_FILE: "/a.json", XDG_RUNTIME_DIR: "/run" }).registryAuthFiles[0]).toBe(
      "/a.json",
    );
  });
});
