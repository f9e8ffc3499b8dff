/**
 * The Node scaffold (Connect for Node v2, Prisma 7, pino, prom-client, Vitest, ESLint): the files in
 * templates/service/node/ (`common/`, then `plain/` or `example/`), rendered with the service's
 * names, plus what depends on the proto's shape and is generated here: `src/service.ts` with one
 * handler per RPC (any proto, any streaming kind) and, for the plain scaffold, a test calling each.
 * `--example` fills in the example ItemService, so it needs that shape and says what is missing.
 */
import { join } from "node:path";
import type { MessageSummary, RpcSummary } from "../protos/descriptors.ts";
import { CommandError } from "../process/command-error.ts";
import { renderDir, TEMPLATES_DIR, type TemplateValues } from "./templates.ts";
import type { ScaffoldFile, ScaffoldInput, Scaffolder } from "./types.ts";

const NODE_TEMPLATES = join(TEMPLATES_DIR, "node");

/** The method's name in protobuf-es v2's service descriptors and Connect's clients (`GetItem` → `getItem`). */
export function localName(rpc: string): string {
  return rpc.charAt(0).toLowerCase() + rpc.slice(1);
}

/** The TypeScript module protoc-gen-es writes for a .proto, relative to `from` (`./__generated__/…_pb.js`). */
export function stubImport(protoFile: string, from: "src" | "test"): string {
  const path = `__generated__/${protoFile.replace(/\.proto$/, "_pb.js")}`;
  return from === "src" ? `./${path}` : `../src/${path}`;
}

type Kind = "unary" | "server_streaming" | "client_streaming" | "bidi_streaming";

function kindOf(rpc: RpcSummary): Kind {
  if (rpc.client_streaming && rpc.server_streaming) return "bidi_streaming";
  if (rpc.client_streaming) return "client_streaming";
  return rpc.server_streaming ? "server_streaming" : "unary";
}

/** A doc comment at `indent`, from the proto's comment (and the RPC's types). */
function docComment(lines: string[], indent: string): string {
  const safe = lines.map((l) => l.replaceAll("*/", "*\\/").trimEnd());
  if (safe.length === 1) return `${indent}/** ${safe[0]} */\n`;
  return `${indent}/**\n${safe.map((l) => (l === "" ? `${indent} *\n` : `${indent} * ${l}\n`)).join("")}${indent} */\n`;
}

function rpcComment(rpc: RpcSummary, indent: string): string {
  const kind = kindOf(rpc);
  const stream = (t: string, streaming: boolean) => (streaming ? `stream ${t}` : t);
  return docComment(
    [
      ...(rpc.comment ? rpc.comment.split("\n") : [`${rpc.name}.`]),
      "",
      `${stream(rpc.input, rpc.client_streaming)} → ${stream(rpc.output, rpc.server_streaming)}${kind === "unary" ? "" : ` (${kind.replace("_", " ")})`}`,
    ],
    indent,
  );
}

/** A handler that answers Unimplemented, in the shape Connect expects for its streaming kind. */
function unimplementedHandler(rpc: RpcSummary): string {
  const name = localName(rpc.name);
  const body = `      throw unimplemented("${rpc.name}");\n    },\n`;
  switch (kindOf(rpc)) {
    case "unary":
      return `${rpcComment(rpc, "    ")}    async ${name}(_request, _context) {\n${body}`;
    case "client_streaming":
      return `${rpcComment(rpc, "    ")}    async ${name}(_requests, _context) {\n${body}`;
    case "server_streaming":
      // Return an async iterable of responses: an `async *` generator that yields them.
      return `${rpcComment(rpc, "    ")}    ${name}(_request, _context) {\n${body}`;
    case "bidi_streaming":
      return `${rpcComment(rpc, "    ")}    ${name}(_requests, _context) {\n${body}`;
  }
}

const UNIMPLEMENTED_HELPER = `/** What a handler answers until it is written: callers see the code \`unimplemented\`. */
function unimplemented(rpc: string): ConnectError {
  return new ConnectError(\`\${service.typeName}.\${rpc} is not implemented yet\`, Code.Unimplemented);
}
`;

function plainService(input: ScaffoldInput, exportName: string): string {
  const s = input.service;
  return `/**
 * The handlers of ${s.full_name} (${s.file}):
 * one per RPC, typed from the generated descriptors (a missing handler or a wrong field is a
 * compile error). Each answers Unimplemented until it is written: replace its \`throw\` with the
 * RPC's work. \`deps\` holds the database (Prisma's client and the pg pool) when DATABASE_URL is
 * set, and the logger.
 */
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { ${exportName} } from "${stubImport(s.file, "src")}";
import type { Database } from "./db.js";
import type { Logger } from "./logger.js";

/** The proto service this process serves (server.ts registers it, health reports it). */
export const service = ${exportName};

export type Deps = { db: Database | undefined; log: Logger };

${UNIMPLEMENTED_HELPER}
export function createHandlers(_deps: Deps): ServiceImpl<typeof ${exportName}> {
  return {
${s.rpcs.map(unimplementedHandler).join("\n")}  };
}
`;
}

function plainTest(input: ScaffoldInput, exportName: string): string {
  const s = input.service;
  const cases = s.rpcs.map((rpc) => {
    const name = localName(rpc.name);
    const call = {
      unary: `client().${name}({})`,
      server_streaming: `drain(client().${name}({}))`,
      client_streaming: `client().${name}(createAsyncIterable([]))`,
      bidi_streaming: `drain(client().${name}(createAsyncIterable([])))`,
    }[kindOf(rpc)];
    // Client and bidirectional streams need HTTP/2 (Connect's and gRPC's); over HTTP/1.1 no protocol carries them.
    const it = rpc.client_streaming ? "it.runIf(http2)" : "it";
    return `  ${it}("${rpc.name} answers unimplemented", async () => {\n    expect(await codeOf(() => ${call})).toBe(Code.Unimplemented);\n  });\n`;
  });
  const streams = s.rpcs.some((r) => r.server_streaming);
  const clientStreams = s.rpcs.some((r) => r.client_streaming);
  return `/**
 * Every RPC of ${s.full_name} through real Connect clients, over each protocol the server speaks,
 * against a server on a free port: each answers Unimplemented until its handler is written.
 * Replace these with tests of what the handlers do.
 */
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
${clientStreams ? 'import { createAsyncIterable } from "@connectrpc/connect/protocol";\n' : ""}import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ${exportName} } from "${stubImport(s.file, "test")}";
import { createLogger } from "../src/logger.js";
import { type RunningServer, startServer } from "../src/server.js";

let server: RunningServer;
beforeAll(async () => {
  server = await startServer({
    port: 0,
    host: "127.0.0.1",
    db: undefined,
    shutdownTimeoutMs: 5_000,
    log: createLogger("silent"),
  });
  await server.ready;
});
afterAll(() => server?.shutdown());

/** The protocols the server speaks on its one port. */
const transports: { name: string; http2: boolean; make: (baseUrl: string) => Transport }[] = [
  { name: "Connect over HTTP/1.1", http2: false, make: (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1" }) },
  { name: "Connect over h2c", http2: true, make: (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "2" }) },
  { name: "gRPC over h2c", http2: true, make: (baseUrl) => createGrpcTransport({ baseUrl }) },
  {
    name: "gRPC-Web over HTTP/1.1",
    http2: false,
    make: (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }),
  },
];

/** The code a call fails with; undefined when it succeeds. */
async function codeOf(call: () => Promise<unknown>): Promise<Code | undefined> {
  try {
    await call();
    return undefined;
  } catch (e) {
    return ConnectError.from(e).code;
  }
}
${
  streams
    ? `
async function drain(stream: AsyncIterable<unknown>): Promise<void> {
  for await (const _message of stream) {
    // Only the stream's end (or error) matters here.
  }
}
`
    : ""
}
describe.each(transports)("${s.name} over $name", ({ make${clientStreams ? ", http2" : ""} }) => {
  const client = () => createClient(${exportName}, make(server.url));

${cases.join("\n")}});
`;
}

/** The message `type` names (`platform.items.v1.Item`, `repeated …`), or undefined. */
function messageOf(input: ScaffoldInput, type: string | undefined): MessageSummary | undefined {
  return type === undefined ? undefined : input.messages.get(type.replace(/^repeated /, ""));
}

function field(message: MessageSummary | undefined, name: string) {
  return message?.fields.find((f) => f.name === name);
}

/**
 * What `--example` needs of the proto (the example ItemService), and whether ListItems pages.
 * Every missing piece is listed, so one run tells the whole story.
 */
export function exampleShape(input: ScaffoldInput): { paginated: boolean; item: MessageSummary } {
  const problems: string[] = [];
  const rpc = (name: string) => {
    const r = input.service.rpcs.find((r) => r.name === name);
    if (!r) problems.push(`no RPC ${name}`);
    else if (r.client_streaming || r.server_streaming) problems.push(`${name} streams (the example's RPCs are unary)`);
    return r;
  };
  const need = (message: MessageSummary | undefined, name: string, type: string | ((t: string) => boolean)) => {
    if (!message) return;
    const f = field(message, name);
    const ok = f && (typeof type === "string" ? f.type === type : type(f.type));
    if (!ok) problems.push(`${message.full_name} has no ${typeof type === "string" ? `${type} ` : ""}field ${name}`);
  };
  const get = rpc("GetItem");
  const list = rpc("ListItems");
  const create = rpc("CreateItem");
  const itemType = field(messageOf(input, get?.output), "item")?.type;
  const item = messageOf(input, itemType);
  if (get && !item) problems.push(`${get.output} has no Item field item`);
  for (const f of ["id", "name", "description"]) need(item, f, "string");
  need(messageOf(input, get?.input), "id", "string");
  need(messageOf(input, create?.input), "name", "string");
  need(messageOf(input, create?.input), "description", "string");
  need(messageOf(input, create?.output), "item", (t) => t === item?.full_name);
  need(messageOf(input, list?.output), "items", (t) => t === `repeated ${item?.full_name}`);
  if (problems.length > 0 || !item)
    throw new CommandError(
      `--example implements the example ItemService (GetItem, ListItems, CreateItem and Item {id, name, description}), but ${input.service.full_name} differs: ${problems.join("; ")}. Scaffold without --example, or shape the proto like the example ItemService`,
    );
  const req = messageOf(input, list?.input);
  const res = messageOf(input, list?.output);
  const paginated =
    field(req, "page_size")?.type === "int32" &&
    field(req, "page_token")?.type === "string" &&
    field(res, "next_page_token")?.type === "string";
  return { paginated, item };
}

function rpcCommentFor(input: ScaffoldInput, name: string): string {
  const rpc = input.service.rpcs.find((r) => r.name === name);
  return rpc ? rpcComment(rpc, "    ") : "";
}

export const scaffoldNode: Scaffolder = async (input) => {
  const s = input.service;
  // protoc-gen-es exports the service descriptor under the service's own name.
  const exportName = s.name;
  const shape = input.example ? exampleShape(input) : undefined;
  const others = s.rpcs.filter((r) => !["GetItem", "ListItems", "CreateItem"].includes(r.name));
  const values: TemplateValues = {
    values: {
      name: input.name,
      serviceFullName: s.full_name,
      serviceExport: exportName,
      serviceFile: s.file,
      protoImport: stubImport(s.file, "src"),
      protoImportFromTest: stubImport(s.file, "test"),
      protoFiles: input.protoFiles.map((f) => `${input.protoRoot}/${f}`).join(", "),
      protoRoot: input.protoRoot,
      firstRpc: s.rpcs[0]?.name ?? "Method",
      imageRepository: input.imageRepository ?? "<image repository>",
      registryUrl: input.registryUrl,
      itemMessage: shape?.item.full_name ?? "",
      getItemComment: rpcCommentFor(input, "GetItem"),
      listItemsComment: rpcCommentFor(input, "ListItems"),
      createItemComment: rpcCommentFor(input, "CreateItem"),
      otherHandlers: others.length > 0 ? `\n${others.map(unimplementedHandler).join("\n")}` : "",
    },
    flags: { example: input.example, paginated: shape?.paginated ?? false },
  };
  const files: ScaffoldFile[] = [
    ...(await renderDir(join(NODE_TEMPLATES, "common"), values)),
    ...(await renderDir(join(NODE_TEMPLATES, input.example ? "example" : "plain"), values)),
  ];
  if (!input.example)
    files.push(
      { path: "src/service.ts", content: plainService(input, exportName) },
      { path: "test/service.test.ts", content: plainTest(input, exportName) },
    );
  else if (others.length > 0) {
    // The example's extra RPCs answer Unimplemented, through the same helper as a plain scaffold's.
    const service = files.find((f) => f.path === "src/service.ts")!;
    service.content = service.content.replace(
      "\nexport function createHandlers",
      `\n${UNIMPLEMENTED_HELPER}\nexport function createHandlers`,
    );
  }
  return files.sort((a, b) => a.path.localeCompare(b.path));
};
