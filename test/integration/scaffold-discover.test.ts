/**
 * Finding the proto service a scaffold implements (src/scaffold/discover.ts): names matched to
 * services, --service, the errors that list what was found, and the messages handed to the
 * scaffolds; with buf building real workspaces. Also the templates' substitution and the Node
 * scaffold's handlers for every streaming kind.
 */
import { rm } from "node:fs/promises";
import { afterAll, describe, expect, it } from "vitest";
import type { ServiceSummary } from "../../src/protos/descriptors.ts";
import { protoWorkspace } from "../../src/workspace/protos.ts";
import { CliError } from "../../src/cli/common/errors.ts";
import { discoverService, nameKey, pickService } from "../../src/scaffold/discover.ts";
import { exampleShape, scaffoldNode } from "../../src/scaffold/node.ts";
import { render } from "../../src/scaffold/templates.ts";
import type { ScaffoldInput } from "../../src/scaffold/types.ts";
import { findWorkspace } from "../../src/workspace/find.ts";
import { ITEMS_PROTO, makeWorkspace, writeFiles } from "../helpers/protos.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function workspace(files: Record<string, string> = {}) {
  const dir = await makeWorkspace({ registryUrl: "http://127.0.0.1:8080", orgId: "acme" });
  dirs.push(dir);
  await writeFiles(dir, files);
  return protoWorkspace(await findWorkspace(dir));
}

const svc = (full_name: string): ServiceSummary => ({
  name: full_name.split(".").at(-1) as string,
  full_name,
  file: "x.proto",
  rpcs: [],
});

function cliError(fn: () => unknown): CliError {
  try {
    fn();
  } catch (e) {
    if (e instanceof CliError) return e;
    throw e;
  }
  throw new Error("expected a CliError");
}

const STREAMS_PROTO = `syntax = "proto3";

package platform.feeds.v1;

import "google/protobuf/empty.proto";

// FeedService streams.
service FeedService {
  // Ping answers.
  rpc Ping(google.protobuf.Empty) returns (google.protobuf.Empty);
  // Watch streams events.
  rpc Watch(WatchRequest) returns (stream Event);
  // Upload takes events.
  rpc Upload(stream Event) returns (google.protobuf.Empty);
  // Chat talks both ways.
  rpc Chat(stream Event) returns (stream Event);
}

message WatchRequest {
  string topic = 1;
}

message Event {
  string text = 1;
  Meta meta = 2;
}

message Meta {
  map<string, string> labels = 1;
}
`;

describe("nameKey and pickService", () => {
  it("compares names without case, separators, a Service suffix or a plural s", () => {
    for (const n of ["items", "Item", "ItemService", "item-service", "ITEMS"]) expect(nameKey(n)).toBe("item");
  });

  const services = [svc("platform.items.v1.ItemService"), svc("platform.orders.v1.OrderService")];

  it("matches the name to the service's name or its package's domain", () => {
    expect(pickService("items", services).full_name).toBe("platform.items.v1.ItemService");
    expect(pickService("order", services).full_name).toBe("platform.orders.v1.OrderService");
    expect(pickService("anything", [svc("platform.items.v1.ItemService")]).full_name).toBe(
      "platform.items.v1.ItemService",
    );
  });

  it("takes --service by full name, or by a short name only one service has", () => {
    expect(pickService("x", services, "platform.orders.v1.OrderService").full_name).toBe(
      "platform.orders.v1.OrderService",
    );
    expect(pickService("x", services, "ItemService").full_name).toBe("platform.items.v1.ItemService");
    const wrong = cliError(() => pickService("items", services, "platform.items.v1.Nope"));
    expect(wrong.exitCode).toBe(2);
    expect(wrong.message).toBe(
      "--service platform.items.v1.Nope: no such service; the workspace's protos declare platform.items.v1.ItemService, platform.orders.v1.OrderService",
    );
    const twice = [svc("platform.a.v1.ItemService"), svc("platform.b.v1.ItemService")];
    expect(cliError(() => pickService("x", twice, "ItemService")).message).toContain(
      "several have that name: give the full name",
    );
  });

  it("lists what it found when the name matches none or several, and says when there is none", () => {
    const none = cliError(() => pickService("billing", services));
    expect(none.exitCode).toBe(2);
    expect(none.message).toBe(
      'no service matches "billing": platform.items.v1.ItemService, platform.orders.v1.OrderService; name one with --service <package.Service>',
    );
    const both = [svc("platform.items.v1.ItemService"), svc("platform.items.v1.ItemAdminService")];
    expect(cliError(() => pickService("items", both)).message).toBe(
      'several services match "items": platform.items.v1.ItemService, platform.items.v1.ItemAdminService; name one with --service <package.Service>',
    );
    const empty = cliError(() => pickService("items", []));
    expect(empty.exitCode).toBe(1);
    expect(empty.message).toContain("the workspace's protos declare no service");
  });
});

describe("discoverService (buf builds the workspace)", () => {
  it("finds ItemService for `items`, with its package, files and messages", async () => {
    const found = await discoverService(await workspace(), "items");
    expect(found.service.full_name).toBe("platform.items.v1.ItemService");
    expect(found.service.rpcs.map((r) => r.name)).toEqual(["GetItem", "ListItems", "CreateItem"]);
    expect(found.protoFiles).toEqual(["platform/items/v1/items.proto"]);
    expect(found.package.package).toBe("platform.items.v1");
    expect([...found.messages.keys()].sort()).toEqual(
      [
        "platform.items.v1.CreateItemRequest",
        "platform.items.v1.CreateItemResponse",
        "platform.items.v1.GetItemRequest",
        "platform.items.v1.GetItemResponse",
        "platform.items.v1.Item",
        "platform.items.v1.ListItemsRequest",
        "platform.items.v1.ListItemsResponse",
      ].sort(),
    );
  });

  it("follows messages into imports and maps; ignores services of imported files", async () => {
    const ws = await workspace({ "proto/platform/feeds/v1/feeds.proto": STREAMS_PROTO });
    const found = await discoverService(ws, "feeds");
    expect(found.service.full_name).toBe("platform.feeds.v1.FeedService");
    expect(found.messages.has("google.protobuf.Empty")).toBe(true);
    expect(found.messages.has("platform.feeds.v1.Meta")).toBe(true);
    expect(found.messages.has("platform.items.v1.Item")).toBe(false);
  });

  it("reports protos that do not compile, and a workspace without protos", async () => {
    const broken = await workspace({ "proto/platform/items/v1/items.proto": `${ITEMS_PROTO}\nmessage {\n` });
    await expect(discoverService(broken, "items")).rejects.toThrow(/the protos do not compile/);
    const dir = await makeWorkspace({ registryUrl: "http://127.0.0.1:8080", orgId: "acme" });
    dirs.push(dir);
    await rm(`${dir}/proto`, { recursive: true });
    const empty = await protoWorkspace(await findWorkspace(dir));
    await expect(discoverService(empty, "items")).rejects.toThrow(/no \.proto files in proto\//);
  });
});

describe("templates and the Node scaffold", () => {
  it("substitutes values and keeps or drops sections, whole lines for tags on their own", () => {
    const values = { values: { name: "items" }, flags: { example: true, paginated: false } };
    expect(
      render("a {{name}}\n{{#example}}\nyes\n{{/example}}\n{{^paginated}}\nno pages\n{{/paginated}}\nz", values),
    ).toBe("a items\nyes\nno pages\nz");
    expect(render("x{{#paginated}} paged{{/paginated}}.", values)).toBe("x.");
    expect(render("a{{#example}} b{{/example}}\nc\n", values)).toBe("a b\nc\n");
    expect(() => render("{{nmae}}", values)).toThrow("unknown placeholder {{nmae}}");
    expect(() => render("{{#nope}}x{{/nope}}", values)).toThrow("unknown section {{#nope}}");
  });

  async function input(files: Record<string, string>, name: string, example = false): Promise<ScaffoldInput> {
    const ws = await workspace(files);
    const found = await discoverService(ws, name);
    return {
      name,
      example,
      ...found,
      protoRoot: ws.protoRoot,
      imageRepository: "127.0.0.1:5000/acme/x",
      registryUrl: "http://127.0.0.1:8080",
    };
  }

  it("writes one handler per RPC in the shape of its streaming kind, and a test calling each", async () => {
    const files = await scaffoldNode(await input({ "proto/platform/feeds/v1/feeds.proto": STREAMS_PROTO }, "feeds"));
    const service = files.find((f) => f.path === "src/service.ts")?.content ?? "";
    expect(service).toContain('import { FeedService } from "./__generated__/platform/feeds/v1/feeds_pb.js";');
    expect(service).toContain("async ping(_request, _context) {");
    expect(service).toContain("watch(_request, _context) {");
    expect(service).toContain("async upload(_requests, _context) {");
    expect(service).toContain("chat(_requests, _context) {");
    expect(service).toContain("platform.feeds.v1.WatchRequest → stream platform.feeds.v1.Event (server streaming)");
    const test = files.find((f) => f.path === "test/service.test.ts")?.content ?? "";
    expect(test).toContain('it("Ping answers unimplemented"');
    expect(test).toContain('it.runIf(http2)("Upload answers unimplemented"');
    expect(test).toContain("drain(client().chat(createAsyncIterable([])))");
    expect(files.map((f) => f.path)).toEqual(expect.arrayContaining([".gitignore", ".dockerignore", "Dockerfile"]));
    expect(files.find((f) => f.path === "package.json")?.content).toContain('"name": "feeds"');
    for (const f of files) expect(f.content, f.path).not.toMatch(/\{\{[#^/]?\w+\}\}/);
  });

  it("--example knows whether ListItems pages, and lists what a different proto lacks", async () => {
    const paged = await input({}, "items", true);
    expect(exampleShape(paged).paginated).toBe(true);
    const files = await scaffoldNode(paged);
    expect(files.find((f) => f.path === "src/store.ts")).toBeDefined();
    expect(files.find((f) => f.path === "prisma/migrations/0001_init/migration.sql")).toBeDefined();
    expect(files.find((f) => f.path === "src/service.ts")?.content).toContain("request.pageToken");

    const unpaged = await input(
      {
        "proto/platform/items/v1/items.proto": ITEMS_PROTO.replace(
          "  int32 page_size = 1;\n  string page_token = 2;\n",
          "",
        ).replace("  string next_page_token = 2;\n", ""),
      },
      "items",
      true,
    );
    expect(exampleShape(unpaged).paginated).toBe(false);
    const service = (await scaffoldNode(unpaged)).find((f) => f.path === "src/service.ts")?.content ?? "";
    expect(service).not.toContain("pageToken");
    expect(service).toContain("The proto has no page_size/page_token");

    const feeds = await input({ "proto/platform/feeds/v1/feeds.proto": STREAMS_PROTO }, "feeds", true);
    const refused = cliError(() => exampleShape(feeds));
    expect(refused.message).toContain("no RPC GetItem; no RPC ListItems; no RPC CreateItem");
  });
});
