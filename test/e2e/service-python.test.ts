/**
 * `platform service create <name> --lang python` end to end, in a temporary git workspace with the
 * example ItemService: each scaffold is clean under its own ruff settings; the plain one passes its
 * own pytest (every RPC UNIMPLEMENTED) and builds a wheel (offline) holding the service and its
 * stubs, as its Dockerfile installs it; the `--example` one passes its pytest in memory and against
 * a private PostgreSQL, and, run as `python -m items_service` with DATABASE_URL, keeps what
 * CreateItem stored across a restart of the service and of PostgreSQL. The Python is `.venv-grpc`
 * (scripts/protos/setup-python.sh), shared through a `.pth` file by each workspace's `.venv`, so
 * nothing is downloaded; without it, or without a PostgreSQL to start, the tests skip and say why.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { runBuf } from "../../src/protos/buf.ts";
import { scaffoldPython } from "../../src/scaffold/python/index.ts";
import type { ScaffoldInput } from "../../src/scaffold/types.ts";
import { decodeDescriptorSet, summarizePackage } from "../../src/protos/descriptors.ts";
import { type Postgres, postgresUnavailable, startPostgres } from "../helpers/postgres.ts";
import { grpcPython, makeWorkspace } from "../helpers/protos.ts";
import { freePort } from "../helpers/redis.ts";
import { ITEMS_PY_CLIENT, ITEMS_PY_CLIENT_CALL } from "../helpers/scaffold.ts";
import { runCli } from "../helpers/stack.ts";

const run = promisify(execFile);
const PYTHON = grpcPython();
const NO_PYTHON =
  "Python service scaffold tests skipped: no .venv-grpc with grpcio-tools, psycopg, prometheus-client, pytest and ruff (scripts/protos/setup-python.sh makes it)";
const NO_POSTGRES = postgresUnavailable();
if (!PYTHON) console.warn(NO_PYTHON);
else if (NO_POSTGRES) console.warn(`Python example against PostgreSQL skipped: ${NO_POSTGRES}`);

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** What `service create` hands the scaffolder, built here from the workspace's image until it is merged. */
async function scaffoldInput(dir: string, example: boolean): Promise<ScaffoldInput> {
  const build = await runBuf(["build", "-o", "-"], dir);
  if (build.code !== 0) throw new Error(`buf build: ${build.stderr}`);
  const pkg = summarizePackage(decodeDescriptorSet(build.stdout), "platform.items.v1");
  return {
    name: "items",
    example,
    service: pkg.services[0]!,
    package: pkg,
    messages: new Map(pkg.messages.map((m) => [m.full_name, m])),
    protoRoot: "proto",
    protoFiles: pkg.files,
    imageRepository: "registry.example.com/acme/items",
    registryUrl: "http://127.0.0.1:8080",
  };
}

/**
 * The one step the workspace's team runs: today the scaffolder called directly, its files written
 * and the stubs generated; once `service create` is merged, `platform service create items --lang
 * python [--example]` (which does both).
 */
async function createService(dir: string, example: boolean): Promise<void> {
  const args = ["service", "create", "items", "--lang", "python", ...(example ? ["--example"] : [])];
  const r = await runCli(args, process.env, dir);
  if (r.code !== 0) throw new Error(`service create: ${r.stderr}`);
}

async function python(program: string, code: string, cwd: string): Promise<string> {
  return (await run(program, ["-c", code], { cwd })).stdout.trim();
}

/**
 * A workspace as a team starts one: `platform init`'s files, git, and a `.venv` (what `proto
 * generate` and the README use) sharing `.venv-grpc`'s packages through a `.pth` file.
 */
async function workspace(): Promise<string> {
  const dir = await makeWorkspace({ registryUrl: "http://127.0.0.1:8080", orgId: "acme", language: "python" });
  dirs.push(dir);
  await run("git", ["init", "-q"], { cwd: dir });
  await run(PYTHON as string, ["-m", "venv", "--without-pip", ".venv"], { cwd: dir });
  const purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])";
  const shared = await python(PYTHON as string, purelib, dir);
  await writeFile(join(await python(join(dir, ".venv/bin/python"), purelib, dir), "shared-grpc.pth"), `${shared}\n`);
  return dir;
}

/**
 * What `pip install -e .` (the README's step) gives the workspace's .venv: the service's package and
 * the stubs importable from anywhere. A `.pth` file does the same in no time; the plain test builds
 * the wheel, which is what checks that pyproject.toml packages both.
 */
async function makeImportable(dir: string): Promise<void> {
  const purelib = await python(
    join(dir, ".venv/bin/python"),
    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    dir,
  );
  await writeFile(join(purelib, "items-editable.pth"), `${join(dir, "src")}\n${join(dir, "src/__generated__")}\n`);
}

/** `ruff check` and `ruff format --check`, with the scaffold's own settings (pyproject.toml). */
async function lint(dir: string): Promise<void> {
  const ruff = join(dirname(PYTHON as string), "ruff");
  for (const args of [
    ["check", "."],
    ["format", "--check", "--diff", "."],
  ])
    await run(ruff, args, { cwd: dir }).catch((e: { stdout: string; stderr: string }) => {
      throw new Error(`ruff ${args[0]} failed:\n${e.stdout}\n${e.stderr}`);
    });
}

async function pytest(dir: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  const r = await run(join(dir, ".venv/bin/python"), ["-m", "pytest", "-q", "-p", "no:cacheprovider"], {
    cwd: dir,
    env: { ...process.env, ...env },
    timeout: 120_000,
  }).catch((e: { stdout: string; stderr: string }) => {
    throw new Error(`pytest failed:\n${e.stdout}\n${e.stderr}`);
  });
  return r.stdout;
}

describe.skipIf(!PYTHON)("platform service create --lang python", () => {
  it("plain: lint clean, its tests find every RPC UNIMPLEMENTED, and its wheel holds the service and the stubs", async () => {
    const dir = await workspace();
    await createService(dir, false);
    const service = await readFile(join(dir, "src/items_service/service.py"), "utf8");
    for (const rpc of ["GetItem", "ListItems", "CreateItem"]) {
      expect(service).toContain(`context.abort(grpc.StatusCode.UNIMPLEMENTED, "${rpc} is not implemented yet")`);
      expect(await readFile(join(dir, "tests/test_service.py"), "utf8")).toContain(
        `def test_${rpc.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase()}_is_unimplemented`,
      );
    }
    await lint(dir);
    // No install: pyproject.toml's pytest settings put src/ and the stubs on the path.
    const out = await pytest(dir);
    expect(out).toMatch(/\b7 passed\b/);
    // The distribution the Dockerfile installs: the service's package and the generated stubs.
    await run(
      PYTHON as string,
      ["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."],
      {
        cwd: dir,
        timeout: 120_000,
      },
    );
    const listing = await python(
      PYTHON as string,
      "import glob, zipfile; print('\\n'.join(zipfile.ZipFile(glob.glob('dist/*.whl')[0]).namelist()))",
      dir,
    );
    expect(listing.split("\n")).toEqual(
      expect.arrayContaining([
        "items_service/server.py",
        "items_service/service.py",
        "items/v1/items_pb2.py",
        "items/v1/items_pb2_grpc.py",
      ]),
    );
    expect(listing).not.toContain("__generated__");
  });

  it("--example refuses a proto without the ItemService shape, naming what is missing", async () => {
    const dir = await workspace();
    const input = await scaffoldInput(dir, true);
    const service = { ...input.service, rpcs: input.service.rpcs.filter((r) => r.name !== "GetItem") };
    await expect(scaffoldPython({ ...input, service })).rejects.toThrow(
      /--example implements the example ItemService .* platform\.items\.v1\.ItemService does not have that shape: no GetItem RPC\. Scaffold it without --example/,
    );
  });

  describe("--example", () => {
    let dir: string;
    let pg: Postgres | undefined;
    afterAll(async () => {
      await pg?.remove();
    });

    it("lint clean, and passes its own tests with items in memory", async () => {
      dir = await workspace();
      await createService(dir, true);
      await lint(dir);
      await makeImportable(dir);
      expect(await pytest(dir)).toMatch(/\b9 passed\b/);
    });

    it.skipIf(NO_POSTGRES !== undefined)(
      "keeps items in PostgreSQL across a restart of the service and of PostgreSQL",
      async () => {
        pg = await startPostgres();
        // Its own tests against the database (the migrations run, the store is PostgreSQL's).
        expect(await pytest(dir, { TEST_DATABASE_URL: pg.url })).toMatch(/\b9 passed\b/);
        await writeFile(join(dir, "client.py"), ITEMS_PY_CLIENT);
        const port = await freePort();
        const call = async (...args: string[]) =>
          JSON.parse(
            await python(
              join(dir, ".venv/bin/python"),
              `${ITEMS_PY_CLIENT_CALL}(${JSON.stringify([String(port), ...args])})`,
              dir,
            ),
          );

        let service = await startService(dir, port, pg.url);
        const created = await call("create", "durable", "kept across restarts");
        expect(created).toMatchObject({ name: "durable", description: "kept across restarts" });
        expect(await call("get", created.id)).toEqual(created);
        await stopService(service);

        await pg.stop();
        await pg.start();
        service = await startService(dir, port, pg.url);
        expect(await call("get", created.id)).toEqual(created);
        const listed = await call("list");
        expect(listed.map((i: { id: string }) => i.id)).toContain(created.id);
        expect(await call("get", "no-such-item")).toEqual({
          code: "NOT_FOUND",
          message: "item no-such-item not found",
        });
        await stopService(service);
      },
      120_000,
    );
  });
});

/** `python -m items_service` as the image runs it; resolves once it logs `ready`. */
async function startService(dir: string, port: number, databaseUrl: string): Promise<ChildProcess> {
  const child = spawn(join(dir, ".venv/bin/python"), ["-m", "items_service"], {
    cwd: dir,
    env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", METRICS_PORT: "off", DATABASE_URL: databaseUrl },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the service did not log ready in 30 s:\n${output}`)), 30_000);
    const seen = (d: Buffer) => {
      output += d;
      if (output.split("\n").some((l) => l.includes('"msg": "ready"'))) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", (d) => (output += d));
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the service exited (${code}) before it was ready:\n${output}`));
    });
  });
  return child;
}

/** SIGTERM, and the graceful stop ends the process with status 0. */
async function stopService(child: ChildProcess): Promise<void> {
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  expect(await exited).toBe(0);
}
