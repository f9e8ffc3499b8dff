/**
 * `platform service create --lang node` as a team runs it, in temporary git workspaces holding the
 * example ItemService: the plain scaffold installs from the npm registry, builds, lints and passes
 * its own tests (every RPC answers unimplemented); `--example` does the same, its tests also against
 * a private PostgreSQL, and then the built service runs against that PostgreSQL: Create, Get and
 * List through a Connect client from here, a restart of the service and of PostgreSQL, and the item
 * is still there. Also: existing files are refused without --force, and a name or --service that
 * matches no service, several services, or none declared, are errors listing what was found.
 *
 * Both scaffolds install the same dependencies (checked) with `npm ci`, from the package-lock.json
 * the template ships: the plain one with an empty npm cache of its own, so every package comes from
 * the registry as on a new machine (a lock naming a version the registry lacks fails here). The
 * example has the same lock (checked) and starts from a hard-linked copy of that node_modules, so
 * its `npm install` only checks it.
 * Skipped, saying why, where the npm registry cannot be reached; the PostgreSQL steps where a
 * private cluster cannot start (test/helpers/postgres.ts).
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Postgres, postgresUnavailable, startPostgres } from "../helpers/postgres.ts";
import { ITEMS_PROTO, makeWorkspace, writeFiles } from "../helpers/protos.ts";
import { freePort } from "../helpers/redis.ts";
import { npmInstall, npmRegistryUnavailable, step as runStep } from "../helpers/scaffold.ts";
import { type CliResult, runCli } from "../helpers/stack.ts";

const exec = promisify(execFile);
const INSTALL_TIMEOUT = 600_000;

const noRegistry = await npmRegistryUnavailable();
if (noRegistry) console.warn(`service create --lang node: install, build and test skipped: ${noRegistry}`);
const noPostgres = postgresUnavailable();
if (noPostgres) console.warn(`service create --lang node: the PostgreSQL steps skipped: ${noPostgres}`);

const dirs: string[] = [];
/** The plain scaffold's workspace once its install succeeded: the example's dependencies are compared with it. */
let installed: string | undefined;
/** An npm cache of this run's own: empty for the plain scaffold's install (a cold cache), then warm. */
const coldCache = await mkdtemp(join(tmpdir(), "platform-scaffold-cold-npm-"));
dirs.push(coldCache);
const timings: Record<string, number> = {};
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  if (Object.keys(timings).length > 0) console.log("service-node timings (s):", JSON.stringify(timings));
});

async function workspace(): Promise<string> {
  const dir = await makeWorkspace({ registryUrl: "http://127.0.0.1:8080", orgId: "acme" });
  dirs.push(dir);
  await exec("git", ["init", "-q"], { cwd: dir });
  return dir;
}

const cli = (args: string[], cwd: string): Promise<CliResult> => runCli(args, { ...process.env }, cwd);

const step = (label: string, cwd: string, program: string, args: string[], env: NodeJS.ProcessEnv = {}) =>
  runStep(timings, label, cwd, program, args, env);
const install = (label: string, cwd: string) => npmInstall(timings, label, cwd, coldCache);

/** Every file under `dir` (without .git and node_modules) with its sha256. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    const path = relative(dir, join(e.parentPath, e.name));
    if (!e.isFile() || path.startsWith(".git/") || path.startsWith("node_modules/")) continue;
    out[path] = createHash("sha256")
      .update(await readFile(join(dir, path)))
      .digest("hex");
  }
  return out;
}

describe("service create: finding the service and refusing to overwrite", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await workspace();
  });

  it("scaffolds ItemService for `items`, then refuses to replace any file without --force (exit 1, nothing changed)", async () => {
    const first = await cli(["service", "create", "items", "--lang", "node"], dir);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain("wrote    src/service.ts");
    expect(first.stdout).toContain("wrote    src/__generated__/platform/items/v1/items_pb.ts");
    expect(first.stdout).toContain("platform.items.v1.ItemService scaffolded in node");
    expect(first.stdout).toContain("npm ci && npm test");
    const service = await readFile(join(dir, "src/service.ts"), "utf8");
    for (const rpc of ["getItem", "listItems", "createItem"])
      expect(service).toContain(`async ${rpc}(_request, _context)`);

    await writeFile(join(dir, "src/service.ts"), "// the team's own work\n");
    const before = await snapshot(dir);
    const again = await cli(["service", "create", "items", "--lang", "node"], dir);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("already exist, nothing written:");
    for (const path of ["package.json", "src/index.ts", "src/service.ts", "Dockerfile", "prisma/schema.prisma"])
      expect(again.stderr).toContain(path);
    expect(again.stderr).toContain("--force");
    expect(await snapshot(dir)).toEqual(before);

    const forced = await cli(["service", "create", "items", "--lang", "node", "--force"], dir);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain("replaced src/service.ts");
    expect(await readFile(join(dir, "src/service.ts"), "utf8")).toContain("throw unimplemented(");
  });

  it("refuses a --service the protos do not declare, naming the ones they do (exit 2)", async () => {
    const r = await cli(["service", "create", "items", "--lang", "node", "--service", "platform.items.v1.Nope"], dir);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      "--service platform.items.v1.Nope: no such service; the workspace's protos declare platform.items.v1.ItemService",
    );
  });

  it("refuses bad names and languages as usage errors (exit 2)", async () => {
    const bad = await cli(["service", "create", "Items_API", "--lang", "node"], dir);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('<name> "Items_API": expected lowercase letters, digits and');
    // A scaffold must be deployable under its name: a service name is at most 40 characters.
    const long = await cli(["service", "create", "a".repeat(41), "--lang", "node"], dir);
    expect(long.code).toBe(2);
    expect(long.stderr).toContain("expected at most 40 characters");
    const lang = await cli(["service", "create", "items", "--lang", "rust"], dir);
    expect(lang.code).toBe(2);
    expect(lang.stderr).toContain('--lang: expected node or python, got "rust"');
  });

  it("needs --service where several services could be meant, and a declared service at all", async () => {
    const several = await workspace();
    await writeFiles(several, {
      "proto/platform/things/v1/things.proto": `syntax = "proto3";\n\npackage platform.things.v1;\n\n// ThingService keeps things.\nservice ThingService {\n  // GetThing returns a thing.\n  rpc GetThing(GetThingRequest) returns (GetThingResponse);\n}\n\n// OtherService does more.\nservice OtherService {\n  // GetThing returns a thing.\n  rpc GetThing(GetThingRequest) returns (GetThingResponse);\n}\n\nmessage GetThingRequest {\n  string id = 1;\n}\n\nmessage GetThingResponse {\n  string id = 1;\n}\n`,
    });
    const ambiguous = await cli(["service", "create", "things", "--lang", "node"], several);
    expect(ambiguous.code).toBe(2);
    expect(ambiguous.stderr).toContain(
      'several services match "things": platform.things.v1.ThingService, platform.things.v1.OtherService; name one with --service <package.Service>',
    );
    const unmatched = await cli(["service", "create", "billing", "--lang", "node"], several);
    expect(unmatched.code).toBe(2);
    expect(unmatched.stderr).toContain('no service matches "billing": platform.items.v1.ItemService');
    const picked = await cli(
      ["service", "create", "billing", "--lang", "node", "--service", "platform.things.v1.OtherService"],
      several,
    );
    expect(picked.code, picked.stderr).toBe(0);
    expect(picked.stdout).toContain("platform.things.v1.OtherService scaffolded in node");

    const none = await workspace();
    await writeFiles(none, {
      "proto/platform/items/v1/items.proto": ITEMS_PROTO.replace(/\/\/ ItemService[\s\S]*?\n}\n/, ""),
    });
    const empty = await cli(["service", "create", "items", "--lang", "node"], none);
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain("the workspace's protos declare no service");
  });

  it("says which parts of the example's shape --example misses", async () => {
    const other = await workspace();
    await writeFiles(other, {
      "proto/platform/items/v1/items.proto": ITEMS_PROTO.replace(
        "  // CreateItem stores a new item and returns it with its id.\n  rpc CreateItem(CreateItemRequest) returns (CreateItemResponse);\n",
        "",
      ).replace("string description = 3;", "int32 description = 3;"),
    });
    const r = await cli(["service", "create", "items", "--lang", "node", "--example"], other);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("--example implements the example ItemService");
    expect(r.stderr).toContain("no RPC CreateItem");
    expect(r.stderr).toContain("platform.items.v1.Item has no string field description");
    expect(await readdir(other)).not.toContain("package.json");
  });
});

describe.skipIf(noRegistry !== undefined)("service create --lang node: install, build, test", () => {
  it(
    "the plain scaffold installs, builds, lints and passes its own tests: every RPC answers unimplemented",
    async () => {
      const dir = await workspace();
      const created = await cli(["service", "create", "items", "--lang", "node"], dir);
      expect(created.code, created.stderr).toBe(0);
      await install("plain: npm ci (cold cache)", dir);
      installed = dir;
      await step("plain: npm run build", dir, "npm", ["run", "build"]);
      await step("plain: npm run lint", dir, "npm", ["run", "lint"]);
      const test = await step("plain: npm test", dir, "npm", ["test"]);
      expect(test).toMatch(/Tests\s+18 passed/);
      await step("plain: npm run test:coverage", dir, "npm", ["run", "test:coverage"]);
    },
    INSTALL_TIMEOUT + 300_000,
  );

  describe("--example", () => {
    let dir: string;
    let pg: Postgres | undefined;
    let service: ChildProcess | undefined;

    beforeAll(async () => {
      dir = await workspace();
      const created = await cli(["service", "create", "items", "--lang", "node", "--example"], dir);
      expect(created.code, created.stderr).toBe(0);
      expect(created.stdout).toContain("platform.items.v1.ItemService scaffolded in node (example)");
      if (!noPostgres) pg = await startPostgres();
    }, 120_000);

    afterAll(async () => {
      service?.kill("SIGKILL");
      await pg?.remove();
    });

    it(
      "installs (the plain scaffold's node_modules, the same lock), builds, lints and passes its own tests, in memory and in PostgreSQL",
      async () => {
        if (installed) {
          const deps = async (d: string) => {
            const pkg = JSON.parse(await readFile(join(d, "package.json"), "utf8"));
            return { dependencies: pkg.dependencies, devDependencies: pkg.devDependencies };
          };
          expect(await deps(dir)).toEqual(await deps(installed));
          const lock = (d: string) => readFile(join(d, "package-lock.json"), "utf8");
          expect(await lock(dir)).toBe(await lock(installed));
          // The same lock, installed by `npm ci` above: a hard-linked copy, which `npm install` only checks (seconds, where `npm ci` takes 90).
          await exec("cp", ["-al", join(installed, "node_modules"), join(dir, "node_modules")]);
          await step(
            "example: npm install (checks the copy)",
            dir,
            "npm",
            ["install", "--prefer-offline", "--no-audit", "--no-fund"],
            {
              npm_config_cache: coldCache,
            },
          );
        } else await install("example: npm ci", dir);
        await step("example: npm run build", dir, "npm", ["run", "build"]);
        await step("example: npm run lint", dir, "npm", ["run", "lint"]);
        // A database of the tests' own: they empty its items table, and the service below uses the default one.
        if (pg) await exec("createdb", ["-h", "127.0.0.1", "-p", String(pg.port), "-U", "postgres", "scaffold_tests"]);
        const testDb = pg?.url.replace(/\/postgres$/, "/scaffold_tests");
        const test = await step("example: npm test", dir, "npm", ["test"], testDb ? { TEST_DATABASE_URL: testDb } : {});
        expect(test).toMatch(pg ? /Tests\s+16 passed/ : /Tests\s+11 passed/);
      },
      INSTALL_TIMEOUT + 300_000,
    );

    it.skipIf(noPostgres !== undefined)(
      "runs against PostgreSQL: Create, Get and List through Connect; the item survives restarts of the service and of PostgreSQL",
      async () => {
        const db = pg as Postgres;
        const port = await freePort();
        const baseUrl = `http://127.0.0.1:${port}`;
        const logs: string[] = [];
        const start = async () => {
          const child = spawn(join(dir, "node_modules/.bin/node"), ["dist/index.js"], {
            cwd: dir,
            env: { PATH: process.env.PATH, PORT: String(port), HOST: "127.0.0.1", DATABASE_URL: db.url },
            stdio: ["ignore", "pipe", "pipe"],
          });
          child.stdout?.on("data", (d) => logs.push(String(d)));
          child.stderr?.on("data", (d) => logs.push(String(d)));
          await expect
            .poll(
              () =>
                fetch(`${baseUrl}/readyz`).then(
                  (r) => r.status,
                  () => 0,
                ),
              { timeout: 30_000 },
            )
            .toBe(200);
          return child;
        };
        const stop = async (child: ChildProcess) => {
          const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
          child.kill("SIGTERM");
          expect(await exited, logs.join("")).toBe(0);
        };

        // Connect and the stubs from the scaffold's own node_modules and build, as its clients would.
        const clientModule = join(dir, "e2e-client.mjs");
        await writeFile(
          clientModule,
          'export { createClient, ConnectError, Code } from "@connectrpc/connect";\nexport { createConnectTransport } from "@connectrpc/connect-node";\nexport { ItemService } from "./dist/__generated__/platform/items/v1/items_pb.js";\n',
        );
        const m = await import(pathToFileURL(clientModule).href);
        const client = m.createClient(m.ItemService, m.createConnectTransport({ baseUrl, httpVersion: "1.1" }));

        service = await start();
        const { item } = await client.createItem({ name: "kept", description: "survives restarts" });
        expect(item.id).toMatch(/^[0-9a-f-]{36}$/);
        expect((await client.getItem({ id: item.id })).item).toMatchObject({ name: "kept" });
        await client.createItem({ name: "second" });
        expect((await client.listItems({})).items.map((i: { name: string }) => i.name)).toEqual(["kept", "second"]);
        const log = logs.join("");
        expect(log).toContain('"msg":"migration applied"');
        expect(log).toContain('"store":"postgresql"');

        await stop(service);
        await db.stop();
        await db.start();
        service = await start();
        expect((await client.getItem({ id: item.id })).item).toEqual(item);
        expect((await client.listItems({ pageSize: 1 })).items.map((i: { name: string }) => i.name)).toEqual(["kept"]);
        const missing = await client.getItem({ id: "missing-id" }).catch((e: unknown) => e);
        expect(missing).toBeInstanceOf(m.ConnectError);
        expect(missing.code).toBe(m.Code.NotFound);
        expect(missing.rawMessage).toBe("item missing-id not found");
        // The second start found its migration applied and did not apply it again.
        expect(logs.join("").match(/"msg":"migration applied"/g)).toHaveLength(1);
        const metrics = await (await fetch(`${baseUrl}/metrics`)).text();
        expect(metrics).toContain(
          'rpc_server_errors_total{service="platform.items.v1.ItemService",method="GetItem",code="not_found"} 1',
        );
        await stop(service);
        service = undefined;
      },
      120_000,
    );
  });
});
