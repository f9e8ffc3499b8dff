/**
 * Plain HTTP to loopback image registries in builds (src/container-images/registries-conf.ts): which hosts a
 * build names, how they are marked insecure in the registries.conf buildah would read otherwise
 * (v2 `[[registry]]` and v1 `[registries.insecure]`), and that the file lives only for the build.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "smol-toml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loopbackHosts, withInsecure, withLoopbackRegistries } from "../../src/container-images/registries-conf.ts";

const DOCKERFILE = `ARG NODE_IMAGE=127.0.0.1:5000/library/node:24-slim
FROM \${NODE_IMAGE} AS build
COPY --from=localhost:5001/tools/buf:1 /buf /usr/local/bin/buf
FROM registry.example.com/base/run:1
# not an image: http://127.0.0.2:8080 (no path after the host)
`;

describe("loopbackHosts", () => {
  it("names each loopback registry of the Dockerfile and the build arguments, once, and nothing else", () => {
    expect(
      loopbackHosts(DOCKERFILE, {
        NODE_IMAGE: "[::1]:5002/library/node:24-slim",
        PYTHON_IMAGE: "127.10.0.3/base/python:3.12",
        OTHER: "registry.example.com/a/b",
        LOOKALIKE: "my127.0.0.1:5000/x",
      }),
    ).toEqual(["127.0.0.1:5000", "127.10.0.3", "[::1]:5002", "localhost:5001"]);
    expect(loopbackHosts("FROM registry.example.com/base/node:24\n", { A: "node:24-slim" })).toEqual([]);
  });
});

describe("withInsecure", () => {
  it("v2: marks the host's own entry, adds the others, keeps everything else", () => {
    const base = parse(`unqualified-search-registries = ["docker.io"]
[[registry]]
location = "127.0.0.1:5000"
[[registry.mirror]]
location = "mirror.example.com"
[[registry]]
location = "registry.example.com"
`);
    const conf = withInsecure(base, ["127.0.0.1:5000", "localhost:5001"]);
    expect(conf).toEqual({
      "unqualified-search-registries": ["docker.io"],
      registry: [
        { location: "127.0.0.1:5000", insecure: true, mirror: [{ location: "mirror.example.com" }] },
        { location: "registry.example.com" },
        { location: "localhost:5001", insecure: true },
      ],
    });
    // The base is left as it was.
    expect((base.registry as { insecure?: boolean }[])[0]?.insecure).toBeUndefined();
  });

  it("v1: adds the hosts to [registries.insecure], as that form must", () => {
    const base = parse(`[registries.search]
registries = ["docker.io"]
[registries.insecure]
registries = ["10.0.0.5:5000"]
`);
    expect(withInsecure(base, ["127.0.0.1:5000"])).toEqual({
      registries: {
        search: { registries: ["docker.io"] },
        insecure: { registries: ["10.0.0.5:5000", "127.0.0.1:5000"] },
      },
    });
  });
});

describe("withLoopbackRegistries", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "platform-registries-test-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("no loopback host: no variable, nothing written", async () => {
    expect(await withLoopbackRegistries([], [join(dir, "none.conf")], async (env) => env)).toEqual({});
  });

  it("writes the first existing configuration with the hosts marked, for the build only", async () => {
    const user = join(dir, "user.conf");
    await writeFile(user, 'unqualified-search-registries = ["docker.io"]\n');
    let seen: { file: string; text: string } | undefined;
    await withLoopbackRegistries(["127.0.0.1:5000"], [join(dir, "missing.conf"), user], async (env) => {
      const file = env.CONTAINERS_REGISTRIES_CONF as string;
      seen = { file, text: await readFile(file, "utf8") };
    });
    expect(parse(seen?.text ?? "")).toEqual({
      "unqualified-search-registries": ["docker.io"],
      registry: [{ location: "127.0.0.1:5000", insecure: true }],
    });
    expect(existsSync(seen?.file ?? "")).toBe(false);
  });

  it("a registries.conf that is not TOML: an error naming it", async () => {
    const bad = join(dir, "bad.conf");
    await writeFile(bad, "[[registry]\n");
    await expect(withLoopbackRegistries(["127.0.0.1:5000"], [bad], async () => undefined)).rejects.toThrow(
      `${bad}: not valid TOML`,
    );
  });
});
