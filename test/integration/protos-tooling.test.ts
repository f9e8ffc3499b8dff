/**
 * `platform proto lint` and `proto generate` in a workspace as `platform init` leaves it, with the
 * real CLI, the real buf, protoc-gen-es and grpcio-tools: the example ItemService lints clean, a bad
 * proto fails with `path:line:column` findings (buf's and the platform's), the TypeScript stubs
 * type-check against @bufbuild/protobuf and run, the Python stubs import beside the standard
 * library's `platform` and serve a real gRPC call (skipped, saying so, without a Python that has
 * grpcio-tools: scripts/protos/setup-python.sh makes one), a second run changes no byte, and
 * `proto fetch` writes nothing outside --out whatever a server answers.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import { mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lintWorkspace } from "../../src/workspace/protos.ts";
import { findWorkspace } from "../../src/workspace/find.ts";
import { grpcPython, ITEMS_PATH, makeWorkspace, writeFiles } from "../helpers/protos.ts";
import { runCli } from "../helpers/stack.ts";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PYTHON = grpcPython();
if (!PYTHON)
  console.warn(
    "Python proto generation test skipped: no Python with grpcio-tools (.venv-grpc or PLATFORM_TEST_PYTHON_GRPC; scripts/protos/setup-python.sh makes it)",
  );

const dirs: string[] = [];
let env: NodeJS.ProcessEnv;

/** A workspace of its own for each test, cleaned up at the end. */
async function workspace(files: Record<string, string> = {}): Promise<string> {
  const dir = await makeWorkspace();
  await writeFiles(dir, files);
  dirs.push(dir);
  return dir;
}

/** Every file under `dir` with its bytes and mtime, to show a second run changes nothing. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile()) continue;
    const path = join(e.parentPath, e.name);
    const bytes = await readFile(path);
    out[path.slice(dir.length + 1)] =
      `${createHash("sha256").update(bytes).digest("hex")} ${(await stat(path)).mtimeMs}`;
  }
  return out;
}

beforeAll(async () => {
  const config = await mkdtemp(join(tmpdir(), "platform-protos-config-"));
  dirs.push(config);
  env = { ...process.env, PLATFORM_CONFIG_DIR: config, PLATFORM_BASE_URL: undefined, PLATFORM_API_KEY: undefined };
});

afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe("proto lint", () => {
  it("passes the example ItemService, with a one-line summary", async () => {
    const dir = await workspace();
    const r = await runCli(["proto", "lint"], env, dir);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("1 file in proto/ lint clean (buf.yaml's rules and the platform's)\n");
    const json = await runCli(["proto", "lint", "--format", "json"], env, dir);
    expect(JSON.parse(json.stdout)).toEqual({ files: [ITEMS_PATH], findings: [] });
    // From a subdirectory too: the workspace is found by walking up.
    expect((await runCli(["proto", "lint"], env, join(dir, "proto/platform"))).code).toBe(0);
  });

  it("fails a bad proto with path:line:column findings: buf's rules and the platform's conventions", async () => {
    const dir = await workspace({
      // A package of the wrong shape (in the matching directory, so buf has nothing to say about
      // that), a service and an RPC without comments, a camelCase field.
      "proto/acme/things/v1/things.proto": `syntax = "proto3";

package acme.things.v1;

service ThingService {
  rpc GetThing(GetThingRequest) returns (GetThingResponse);
}

message GetThingRequest {
  string id = 1;
  string thingName = 2;
}

message GetThingResponse {
  string id = 1;
}
`,
      "proto/platform/legacy/v1/legacy.proto": `syntax = "proto2";

package platform.legacy.v1;

message Legacy {
  optional string name = 1;
}
`,
    });
    const r = await runCli(["proto", "lint"], env, dir);
    expect(r.code).toBe(1);
    const things = "proto/acme/things/v1/things.proto";
    expect(r.stdout.trim().split("\n")).toEqual([
      `${things}:3:1: PLATFORM_PACKAGE_NAME: Package name "acme.things.v1" should have the form "platform.<domain>.v<major>", such as "platform.items.v1".`,
      `${things}:5:1: COMMENT_SERVICE: Service "ThingService" should have a non-empty comment for documentation.`,
      `${things}:6:3: COMMENT_RPC: RPC "GetThing" should have a non-empty comment for documentation.`,
      `${things}:11:10: FIELD_LOWER_SNAKE_CASE: Field name "thingName" should be lower_snake_case, such as "thing_name".`,
      `proto/platform/legacy/v1/legacy.proto:1:1: PLATFORM_SYNTAX_PROTO3: Files must use proto3 syntax (syntax = "proto3";), not proto2.`,
    ]);
    expect(r.stderr).toBe("5 findings in 2 files of proto/\n");
    const json = await runCli(["proto", "lint", "--format", "json"], env, dir);
    expect(json.code).toBe(1);
    const { findings } = JSON.parse(json.stdout) as { findings: Record<string, unknown>[] };
    expect(findings[0]).toEqual({
      path: things,
      line: 3,
      column: 1,
      end_line: 3,
      end_column: 24,
      rule: "PLATFORM_PACKAGE_NAME",
      message: expect.stringContaining("acme.things.v1"),
    });
    // The same through the function `platform doctor` calls.
    const report = await lintWorkspace(await findWorkspace(dir));
    expect(report.findings.map((f) => f.rule)).toEqual(findings.map((f) => f.rule));
    expect(report.files).toHaveLength(3);
  });

  it("reports a file that does not compile at its position, and what to do without a buf.yaml", async () => {
    const dir = await workspace({ "proto/platform/broken/v1/broken.proto": 'syntax = "proto3";\nmessage {\n' });
    const r = await runCli(["proto", "lint"], env, dir);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^proto\/platform\/broken\/v1\/broken\.proto:2:9: COMPILE: /m);
    await rm(join(dir, "buf.yaml"));
    const none = await runCli(["proto", "lint"], env, dir);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("no buf.yaml in");
    expect(none.stderr).toContain("run `platform init`");
    const outside = await mkdtemp(join(tmpdir(), "platform-no-workspace-"));
    dirs.push(outside);
    const nowhere = await runCli(["proto", "lint"], env, outside);
    expect(nowhere.code).toBe(1);
    expect(nowhere.stderr).toContain("no .platformrc.json in this directory or any above it: run `platform init`");
  });
});

describe("proto generate", () => {
  it("writes TypeScript stubs with service descriptors that type-check against @bufbuild/protobuf and run; twice changes nothing", async () => {
    const dir = await workspace();
    const first = await runCli(["proto", "generate", "--lang", "node"], env, dir);
    expect(first.code, first.stderr).toBe(0);
    const stub = join(dir, "src/__generated__/platform/items/v1/items_pb.ts");
    const text = await readFile(stub, "utf8");
    expect(text.split("\n")[0]).toBe(
      "// Code generated by `platform proto generate` (protoc-gen-es 2.17.0, target=ts) from proto/platform/items/v1/items.proto. DO NOT EDIT.",
    );
    expect(text).toContain("export const ItemService: GenService<");
    expect(first.stdout).toMatch(/node stubs in src\/__generated__\/ \(protoc-gen-es [\d.]+\): 1 written/);

    const before = await snapshot(join(dir, "src"));
    const second = await runCli(["proto", "generate", "--lang", "node"], env, dir);
    expect(second.stdout).toMatch(/0 written, 1 unchanged, 0 removed/);
    expect(await snapshot(join(dir, "src"))).toEqual(before);

    // Compiled against the real @bufbuild/protobuf, as a Node service would be, then run.
    await symlink(join(ROOT, "node_modules"), join(dir, "node_modules"));
    await writeFiles(dir, {
      "package.json": '{ "type": "module" }\n',
      "tsconfig.json": JSON.stringify({
        compilerOptions: {
          target: "es2022",
          module: "nodenext",
          moduleResolution: "nodenext",
          strict: true,
          types: [],
          outDir: "out",
        },
        include: ["check.ts", "src/**/*.ts"],
      }),
      "check.ts": `import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { type Item, ItemSchema, ItemService } from "./src/__generated__/platform/items/v1/items_pb.js";

const item: Item = create(ItemSchema, { id: "1", name: "a", description: "b" });
const back: Item = fromBinary(ItemSchema, toBinary(ItemSchema, item));
const rpcs: string[] = Object.values(ItemService.method).map((m) => \`\${m.name}:\${m.methodKind}:\${m.input.typeName}\`);
console.log(JSON.stringify({ name: back.name, rpcs }));
`,
    });
    await run(join(ROOT, "node_modules/.bin/tsc"), ["-p", dir]);
    const out = await run(process.execPath, [join(dir, "out/check.js")]);
    expect(JSON.parse(out.stdout)).toEqual({
      name: "a",
      rpcs: [
        "GetItem:unary:platform.items.v1.GetItemRequest",
        "ListItems:unary:platform.items.v1.ListItemsRequest",
        "CreateItem:unary:platform.items.v1.CreateItemRequest",
      ],
    });
  });

  it("removes the stubs of a proto that is gone, and only files it wrote", async () => {
    const dir = await workspace({
      "proto/platform/extra/v1/extra.proto":
        'syntax = "proto3";\n\npackage platform.extra.v1;\n\nmessage Extra {\n  string id = 1;\n}\n',
      "src/__generated__/platform/mine_pb.ts": "// written by hand\n",
    });
    expect((await runCli(["proto", "generate", "--lang", "node"], env, dir)).code).toBe(0);
    await rm(join(dir, "proto/platform/extra"), { recursive: true });
    const r = await runCli(["proto", "generate", "--lang", "node"], env, dir);
    expect(r.stdout).toContain("removed  src/__generated__/platform/extra/v1/extra_pb.ts");
    expect(r.stdout).toMatch(/0 written, 1 unchanged, 1 removed/);
    await expect(stat(join(dir, "src/__generated__/platform/extra"))).rejects.toThrow(/ENOENT/);
    expect(await readFile(join(dir, "src/__generated__/platform/mine_pb.ts"), "utf8")).toBe("// written by hand\n");
  });

  it.skipIf(!PYTHON)(
    "writes Python stubs below the platform/ root that import beside the standard library's platform and serve a gRPC call; twice changes nothing",
    async () => {
      const dir = await workspace();
      const python = PYTHON as string;
      const first = await runCli(["proto", "generate", "--lang", "python", "--python", python], env, dir);
      expect(first.code, first.stderr).toBe(0);
      const out = join(dir, "src/__generated__");
      expect((await readdir(join(out, "items/v1"))).sort()).toEqual([
        "items_pb2.py",
        "items_pb2.pyi",
        "items_pb2_grpc.py",
      ]);
      for (const file of ["items_pb2.py", "items_pb2.pyi", "items_pb2_grpc.py"])
        expect((await readFile(join(out, "items/v1", file), "utf8")).split("\n")[0]).toMatch(
          /^# Code generated by `platform proto generate` \(grpcio-tools [\d.]+\) from proto\/platform\/items\/v1\/items\.proto\. DO NOT EDIT\.$/,
        );
      const before = await snapshot(out);
      const second = await runCli(["proto", "generate", "--lang", "python", "--python", python], env, dir);
      expect(second.stdout).toMatch(/0 written, 3 unchanged, 0 removed/);
      expect(await snapshot(out)).toEqual(before);

      // A real server and client from the stubs; the standard library's platform still imports.
      await writeFile(
        join(dir, "serve.py"),
        `import platform
from concurrent import futures
import grpc
from items.v1 import items_pb2, items_pb2_grpc

class Items(items_pb2_grpc.ItemServiceServicer):
    def GetItem(self, request, context):
        return items_pb2.GetItemResponse(item=items_pb2.Item(id=request.id, name="n", description="d"))

server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
items_pb2_grpc.add_ItemServiceServicer_to_server(Items(), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
    reply = items_pb2_grpc.ItemServiceStub(channel).GetItem(items_pb2.GetItemRequest(id="42"))
server.stop(None)
print(platform.system(), reply.item.id, reply.item.name, type(reply).__module__)
`,
      );
      const served = await run(python, [join(dir, "serve.py")], { env: { ...process.env, PYTHONPATH: out } });
      expect(served.stdout.trim()).toBe("Linux 42 n items.v1.items_pb2");
    },
  );

  it("says what is missing when the Python has no grpcio-tools", async () => {
    const dir = await workspace();
    const r = await runCli(["proto", "generate", "--lang", "python", "--python", "/nonexistent/python"], env, dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("proto generate --lang python needs grpcio-tools in /nonexistent/python");
    expect(r.stderr).toContain("--python");
  });
});

describe("proto fetch", () => {
  let server: Server;
  let baseUrl: string;
  beforeAll(async () => {
    // A proto catalog that answers with paths that would escape --out.
    server = createServer((req, res) => {
      const path = req.url?.endsWith("/1.0.0") ? "/tmp/escape.proto" : "../../escape.proto";
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          package: "platform.evil.v1",
          version: "1.0.0",
          files: [{ path, size: 0, sha256: "0".repeat(64) }],
          image: { size: 0, sha256: "0".repeat(64) },
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("writes nothing outside --out, whatever paths the server sends", async () => {
    const parent = await mkdtemp(join(tmpdir(), "platform-fetch-"));
    dirs.push(parent);
    const fetchEnv = { ...env, PLATFORM_BASE_URL: baseUrl, PLATFORM_API_KEY: "sk-plat-test" };
    for (const [spec, path] of [
      ["platform.evil.v1", "../../escape.proto"],
      ["platform.evil.v1@1.0.0", "/tmp/escape.proto"],
    ]) {
      const r = await runCli(["proto", "fetch", spec as string, "--out", join(parent, "a/b")], fetchEnv, parent);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`the proto catalog sent an unsafe path: ${path}`);
    }
    expect(await readdir(parent)).toEqual([]);
    const bad = await runCli(["proto", "fetch", "Platform.Evil@1", "--out", parent], fetchEnv, parent);
    expect(bad.code).toBe(2);
  });
});
