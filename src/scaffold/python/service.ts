/**
 * The parts of a Python scaffold that follow the proto: `service.py` (one handler per RPC, each
 * answering UNIMPLEMENTED, or the example ItemService for `--example`) and `tests/test_service.py`
 * (every RPC called through a real gRPC stub). Everything that does not depend on the proto is a
 * file under templates/service/python/.
 */
import type { FieldSummary, RpcSummary } from "../../protos/descriptors.ts";
import { CommandError } from "../../process/command-error.ts";
import type { ScaffoldInput } from "../types.ts";
import { Imports, messageOf, messageRef, moduleOf, snakeCase } from "./names.ts";

/** What `--example` relies on in the proto, found by name; the optional parts are used when present. */
export type ExampleShape = {
  /** The Item message's full name. */
  item: string;
  description: boolean;
  pageSize: boolean;
  pageToken: boolean;
};

const EXAMPLE_RPCS = ["CreateItem", "GetItem", "ListItems"];

function field(input: ScaffoldInput, message: string, name: string): FieldSummary | undefined {
  return messageOf(input, message)?.fields.find((f) => f.name === name);
}

/**
 * Checks that the service has the example ItemService shape (CreateItem(name) → item, GetItem(id) →
 * item, ListItems → items, on an Item with string id and name), naming every gap when it has not.
 */
export function exampleShape(input: ScaffoldInput): ExampleShape {
  const problems: string[] = [];
  const rpc = (name: string) => input.service.rpcs.find((r) => r.name === name);
  const need = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  for (const name of EXAMPLE_RPCS) {
    const r = rpc(name);
    need(r !== undefined, `no ${name} RPC`);
    if (r) need(!r.client_streaming && !r.server_streaming, `${name} streams (the example's RPCs are unary)`);
  }
  const create = rpc("CreateItem");
  const get = rpc("GetItem");
  const list = rpc("ListItems");
  const item = create && field(input, create.output, "item")?.type;
  if (create) {
    need(field(input, create.input, "name")?.type === "string", `${create.input} has no string field name`);
    need(item !== undefined && messageOf(input, item) !== undefined, `${create.output} has no message field item`);
  }
  if (item && messageOf(input, item)) {
    for (const f of ["id", "name"])
      need(field(input, item, f)?.type === "string", `${item} (CreateItem's item) has no string field ${f}`);
  }
  if (get) {
    need(field(input, get.input, "id")?.type === "string", `${get.input} has no string field id`);
    need(
      item === undefined || field(input, get.output, "item")?.type === item,
      `${get.output} has no field item of type ${item}`,
    );
  }
  if (list)
    need(
      item === undefined || field(input, list.output, "items")?.type === `repeated ${item}`,
      `${list.output} has no field items of type repeated ${item}`,
    );
  if (problems.length > 0 || !create || !list || !item)
    throw new CommandError(
      `--example implements the example ItemService (CreateItem(name, description) → item, GetItem(id) → item, ` +
        `ListItems → items, on an Item with string id, name and description), and ${input.service.full_name} ` +
        `does not have that shape: ${problems.join("; ")}. Scaffold it without --example and write the handlers in service.py`,
    );
  const isString = (message: string, name: string) => field(input, message, name)?.type === "string";
  return {
    item,
    description: isString(item, "description") && isString(create.input, "description"),
    pageSize: field(input, list.input, "page_size")?.type === "int32",
    pageToken: isString(list.input, "page_token") && isString(list.output, "next_page_token"),
  };
}

/** Python source lines, indented by four spaces per level. */
class Lines {
  readonly out: string[] = [];
  add(level: number, ...lines: string[]): this {
    for (const line of lines) this.out.push(line === "" ? "" : `${"    ".repeat(level)}${line}`);
    return this;
  }
  toString(): string {
    return `${this.out.join("\n")}\n`;
  }
}

/** A docstring's text: the proto comment, one line or several. */
function docstring(text: string | undefined, fallback: string): string[] {
  const lines = (text ?? fallback).trim().split("\n");
  if (lines.length === 1) return [`"""${lines[0]?.replace(/"""/g, "'''")}"""`];
  return ['"""', ...lines.map((l) => l.replace(/"""/g, "'''")), '"""'];
}

/** The message's class, or a lookup by full name for one the input does not describe. */
function typeRef(input: ScaffoldInput, imports: Imports, fullName: string, fallback: string): string {
  return messageRef(input, imports, fullName) ?? fallback;
}

/** The handler's `def`, on one line, or wrapped as black and ruff format it when that is long. */
function handlerSignature(input: ScaffoldInput, imports: Imports, r: RpcSummary): string[] {
  const request = typeRef(input, imports, r.input, "Any");
  const response = typeRef(input, imports, r.output, "Any");
  const param = r.client_streaming ? `request_iterator: Iterator[${request}]` : `request: ${request}`;
  const result = r.server_streaming ? `Iterator[${response}]` : response;
  const params = `self, ${param}, context: grpc.ServicerContext`;
  const line = `def ${r.name}(${params}) -> ${result}:`;
  return line.length <= MAX_LINE - 4 ? [line] : [`def ${r.name}(`, `    ${params}`, `) -> ${result}:`];
}

/** Generated lines stay within this: pyproject.toml sets ruff's line-length to it. */
const MAX_LINE = 120;

/** `function(a, b)` on one line at `level`, or one argument a line when that is long. */
function callLines(level: number, fn: string, args: string[], prefix = ""): string[] {
  const line = `${prefix}${fn}(${args.join(", ")})`;
  if (line.length + level * 4 <= MAX_LINE) return [line];
  return [`${prefix}${fn}(`, ...args.map((a) => `    ${a},`), ")"];
}

function serviceHeader(input: ScaffoldInput, example: boolean): string[] {
  const proto = `${input.protoRoot}/${input.service.file}`;
  return example
    ? [
        '"""',
        `Handlers of ${input.service.full_name} (${proto}):`,
        "the example ItemService. Items live in PostgreSQL when DATABASE_URL is set, in memory",
        "otherwise (store.py). The messages and the servicer base class come from the stubs",
        "`platform proto generate --lang python` writes in src/__generated__/.",
        '"""',
      ]
    : [
        '"""',
        `Handlers of ${input.service.full_name} (${proto}),`,
        "one per RPC, each answering UNIMPLEMENTED until it is written. The messages and the servicer base",
        "class come from the stubs `platform proto generate --lang python` writes in src/__generated__/",
        "(run it again after changing the proto).",
        '"""',
      ];
}

/** `service.py`: the servicer, `SERVICE` (its full name, for health) and `register(server, database)`. */
export function servicePy(input: ScaffoldInput, shape: ExampleShape | undefined): string {
  const imports = new Imports();
  const grpcModule = imports.use(moduleOf(input.service.file, "_pb2_grpc"));
  const body = new Lines();
  const name = input.service.name;
  const exampleRpcs = shape ? EXAMPLE_RPCS : [];
  body.add(0, `class ${name}(${grpcModule}.${name}Servicer):`);
  body.add(1, ...docstring(input.service.comment, `${input.service.full_name}.`), "");
  if (shape) {
    body.add(1, "def __init__(self, store: Store) -> None:", "    self.store = store", "");
  } else {
    body.add(1, "def __init__(self, database: Database | None) -> None:");
    body.add(2, "# The database when DATABASE_URL is set (reachable and migrated before the first call), else None.");
    body.add(2, "self.database = database", "");
  }
  for (const r of input.service.rpcs) {
    body.add(1, ...handlerSignature(input, imports, r));
    body.add(2, ...docstring(r.comment, `${r.name}.`));
    if (shape && exampleRpcs.includes(r.name)) body.add(2, ...exampleHandler(input, imports, r, shape));
    else body.add(2, `context.abort(grpc.StatusCode.UNIMPLEMENTED, "${r.name} is not implemented yet")`);
    body.add(0, "");
  }
  const out = new Lines();
  out.add(0, ...serviceHeader(input, shape !== undefined));
  out.add(0, "", "from __future__ import annotations", "");
  const stdlib = [
    ...(shape?.pageToken ? ["import base64"] : []),
    ...(input.service.rpcs.some((r) => r.client_streaming || r.server_streaming)
      ? ["from collections.abc import Iterator"]
      : []),
  ];
  if (body.out.some((l) => /\bAny\b/.test(l))) stdlib.push("from typing import Any");
  if (stdlib.length > 0) out.add(0, ...stdlib, "");
  out.add(0, "import grpc", ...imports.lines("third-party"), "");
  out.add(0, ...imports.lines("first-party"), "");
  out.add(0, "from .db import Database");
  if (shape) out.add(0, "from .store import Item, MemoryStore, PostgresStore, Store");
  out.add(0, "", `SERVICE = "${input.service.full_name}"`);
  if (shape) out.add(0, ...exampleHelpers(input, imports, shape));
  out.add(0, "", "");
  out.out.push(...body.out);
  out.add(0, "", "def register(server: grpc.Server, database: Database | None) -> None:");
  out.add(1, '"""Adds the handlers to the server (server.py calls it once, at start)."""');
  const servicer = shape ? `${name}(PostgresStore(database) if database else MemoryStore())` : `${name}(database)`;
  out.add(1, `servicer = ${servicer}`, `${grpcModule}.add_${name}Servicer_to_server(servicer, server)`);
  return out.toString();
}

function exampleHelpers(input: ScaffoldInput, imports: Imports, shape: ExampleShape): string[] {
  const item = messageRef(input, imports, shape.item) as string;
  const lines = new Lines();
  if (shape.pageSize || shape.pageToken) lines.add(0, "DEFAULT_PAGE_SIZE = 50");
  if (shape.pageSize) lines.add(0, "MAX_PAGE_SIZE = 1000");
  lines.add(0, "", "", `def to_message(item: Item) -> ${item}:`);
  lines.add(
    1,
    `return ${item}(id=item.id, name=item.name${shape.description ? ", description=item.description" : ""})`,
  );
  if (shape.pageToken) {
    lines.add(0, "", "", "def page_token(after: int) -> str:");
    lines.add(1, '"""Opaque to clients, who send back what they got: the position of the last item of a page."""');
    lines.add(1, 'return base64.urlsafe_b64encode(f"after:{after}".encode()).decode().rstrip("=")');
    lines.add(0, "", "", "def position(token: str) -> int | None:");
    lines.add(1, '"""The position a page token points after; None for a token this service did not write."""');
    lines.add(1, "try:");
    lines.add(2, 'text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()');
    lines.add(1, "except ValueError:  # not base64, or not UTF-8");
    lines.add(2, "return None");
    lines.add(1, 'prefix, _, number = text.partition(":")');
    lines.add(1, 'return int(number) if prefix == "after" and number.isdigit() else None');
  }
  return lines.out;
}

function exampleHandler(input: ScaffoldInput, imports: Imports, r: RpcSummary, shape: ExampleShape): string[] {
  const response = messageRef(input, imports, r.output) as string;
  const abort = (code: string, message: string) => `context.abort(grpc.StatusCode.${code}, ${message})`;
  const l = new Lines();
  switch (r.name) {
    case "CreateItem":
      l.add(0, "if not request.name.strip():");
      l.add(1, abort("INVALID_ARGUMENT", '"name must not be empty"'));
      l.add(0, `item = self.store.create(request.name, ${shape.description ? "request.description" : '""'})`);
      l.add(0, `return ${response}(item=to_message(item))`);
      break;
    case "GetItem":
      l.add(0, "if not request.id:", `    ${abort("INVALID_ARGUMENT", '"id must not be empty"')}`);
      l.add(0, "item = self.store.get(request.id)", "if item is None:");
      l.add(1, abort("NOT_FOUND", 'f"item {request.id} not found"'));
      l.add(0, `return ${response}(item=to_message(item))`);
      break;
    default:
      if (shape.pageSize) {
        l.add(0, "if request.page_size < 0:", `    ${abort("INVALID_ARGUMENT", '"page_size must not be negative"')}`);
        l.add(0, "# 0 asks for the default; more than the maximum gets the maximum (AIP-158).");
        l.add(0, "size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)");
      }
      if (shape.pageToken) {
        l.add(0, "after = position(request.page_token) if request.page_token else 0");
        l.add(0, "if after is None:");
        l.add(1, abort("INVALID_ARGUMENT", '"page_token is not one this service returned"'));
        l.add(0, "# One more than asked says whether another page follows.");
        l.add(0, `items = self.store.list(after, ${shape.pageSize ? "size" : "DEFAULT_PAGE_SIZE"} + 1)`);
        l.add(0, `page = items[:${shape.pageSize ? "size" : "DEFAULT_PAGE_SIZE"}]`);
        l.add(0, 'token = page_token(page[-1].seq) if len(items) > len(page) else ""');
        l.add(0, `return ${response}(items=[to_message(i) for i in page], next_page_token=token)`);
      } else {
        l.add(0, `items = self.store.list(0, ${shape.pageSize ? "size" : "2**62"})`);
        l.add(0, `return ${response}(items=[to_message(i) for i in items])`);
      }
  }
  return l.out;
}

/** The expression that builds an empty request of `fullName` in the tests. */
function newRequest(input: ScaffoldInput, imports: Imports, fullName: string): string {
  const ref = messageRef(input, imports, fullName);
  return ref ? `${ref}()` : `message("${fullName}")`;
}

/** How a test calls `r` with `request` and waits for its outcome, whatever it streams. */
function call(r: RpcSummary, request: string): string {
  const argument = r.client_streaming ? `iter([${request}])` : request;
  const invocation = `stub.${r.name}(${argument}, timeout=5)`;
  return r.server_streaming ? `list(${invocation})` : invocation;
}

/** `expect_status(grpc.StatusCode.CODE, lambda: CALL)`, wrapped when long. */
function expectStatus(level: number, code: string, callExpr: string, prefix = ""): string[] {
  return callLines(level, "expect_status", [`grpc.StatusCode.${code}`, `lambda: ${callExpr}`], prefix);
}

/** `tests/test_service.py`: every RPC through a real stub on the server conftest.py starts. */
export function testsPy(input: ScaffoldInput, shape: ExampleShape | undefined): string {
  const imports = new Imports();
  const grpcModule = imports.use(moduleOf(input.service.file, "_pb2_grpc"));
  const body = new Lines();
  const exampleRpcs = shape ? EXAMPLE_RPCS : [];
  const unimplemented = input.service.rpcs.filter((r) => !exampleRpcs.includes(r.name));
  for (const r of unimplemented) {
    body.add(
      0,
      "",
      "",
      `def test_${snakeCase(r.name)}_is_unimplemented(stub: ${grpcModule}.${input.service.name}Stub) -> None:`,
    );
    body.add(1, ...expectStatus(1, "UNIMPLEMENTED", call(r, newRequest(input, imports, r.input))));
  }
  if (shape) body.out.push(...exampleTests(input, imports, grpcModule, shape));
  const out = new Lines();
  out.add(0, '"""');
  out.add(
    0,
    shape
      ? `${input.service.full_name} through a real gRPC client, on the server conftest.py starts (in`
      : `Every RPC of ${input.service.full_name} through a real gRPC client, on the server conftest.py starts:`,
  );
  out.add(
    0,
    shape
      ? "memory, or PostgreSQL with TEST_DATABASE_URL): create, read back, list in order, page, and the errors."
      : "each answers UNIMPLEMENTED until its handler is written; replace its test with real ones then.",
  );
  out.add(
    0,
    '"""',
    "",
    "from __future__ import annotations",
    "",
    "from collections.abc import Callable",
    "from typing import Any",
    "",
  );
  const lookups = body.out.some((l) => l.includes('message("'));
  out.add(0, "import grpc", "import pytest");
  if (lookups) {
    imports.use("google.protobuf.descriptor_pool");
    imports.use("google.protobuf.message_factory");
  }
  out.add(0, ...imports.lines("third-party"));
  out.add(0, "", ...imports.lines("first-party"), "", "");
  out.add(0, "@pytest.fixture", `def stub(channel: grpc.Channel) -> ${grpcModule}.${input.service.name}Stub:`);
  out.add(1, `return ${grpcModule}.${input.service.name}Stub(channel)`, "", "");
  out.add(0, "def expect_status(code: grpc.StatusCode, call: Callable[[], Any]) -> grpc.RpcError:");
  out.add(1, '"""Runs `call`, which must fail with `code`; returns the error (details() is its message)."""');
  out.add(1, "with pytest.raises(grpc.RpcError) as caught:", "    call()");
  out.add(1, "assert caught.value.code() == code, caught.value.details()", "return caught.value");
  if (lookups) {
    out.add(0, "", "", "def message(full_name: str) -> Any:");
    out.add(1, '"""An empty message of a type from outside this package (the stubs have loaded its file)."""');
    out.add(1, "return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))()");
  }
  out.out.push(...body.out);
  return out.toString();
}

function exampleTests(input: ScaffoldInput, imports: Imports, grpcModule: string, shape: ExampleShape): string[] {
  const rpc = (name: string) => input.service.rpcs.find((r) => r.name === name) as RpcSummary;
  const req = (name: string) => messageRef(input, imports, rpc(name).input) as string;
  const [create, get, list] = [req("CreateItem"), req("GetItem"), req("ListItems")];
  const stubType = `${grpcModule}.${input.service.name}Stub`;
  const l = new Lines();
  l.add(0, "", "", `def test_create_then_get(stub: ${stubType}) -> None:`);
  l.add(1, `request = ${create}(name="first"${shape.description ? ', description="the first item"' : ""})`);
  l.add(1, "created = stub.CreateItem(request, timeout=5).item");
  l.add(
    1,
    `assert created.id and created.name == "first"${shape.description ? ' and created.description == "the first item"' : ""}`,
  );
  l.add(1, `assert stub.GetItem(${get}(id=created.id), timeout=5).item == created`);
  l.add(0, "", "", `def test_create_with_an_empty_name_is_invalid(stub: ${stubType}) -> None:`);
  l.add(1, ...expectStatus(1, "INVALID_ARGUMENT", `stub.CreateItem(${create}(name=""), timeout=5)`));
  l.add(0, "", "", `def test_get_a_missing_item_is_not_found(stub: ${stubType}) -> None:`);
  l.add(1, ...expectStatus(1, "NOT_FOUND", `stub.GetItem(${get}(id="no-such-item"), timeout=5)`, "error = "));
  l.add(1, 'assert error.details() == "item no-such-item not found"');
  l.add(0, "", "", `def test_list_in_creation_order(stub: ${stubType}) -> None:`);
  l.add(1, `ids = [stub.CreateItem(${create}(name=f"item {n}"), timeout=5).item.id for n in range(5)]`);
  if (shape.pageToken) {
    l.add(1, "# Page by page, two at a time; items other tests created come first.");
    l.add(1, "seen: list[str] = []", 'token = ""', "while True:");
    l.add(2, `page = stub.ListItems(${list}(${shape.pageSize ? "page_size=2, " : ""}page_token=token), timeout=5)`);
    if (shape.pageSize) l.add(2, "assert len(page.items) <= 2");
    l.add(2, "seen += [item.id for item in page.items]", "token = page.next_page_token", "if not token:", "    break");
  } else {
    l.add(1, `seen = [item.id for item in stub.ListItems(${list}(), timeout=5).items]`);
  }
  l.add(1, "assert [i for i in seen if i in ids] == ids");
  if (shape.pageToken) {
    l.add(0, "", "", `def test_list_refuses_a_page_token_it_did_not_write(stub: ${stubType}) -> None:`);
    l.add(1, ...expectStatus(1, "INVALID_ARGUMENT", `stub.ListItems(${list}(page_token="nonsense"), timeout=5)`));
  }
  return l.out;
}
